package store

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
)

// Trigger is a row of triggers: a published event of EventKey starts a run
// of the workflow template WorkflowName (version WorkflowVersion, nil: the
// latest live one) when Filter holds, with the params Params map (param
// name → CEL expression over the event). The json tags are the column
// names (rows are read with row_to_json).
type Trigger struct {
	Project         string            `gorm:"primaryKey" json:"project"`
	Domain          string            `gorm:"primaryKey" json:"domain"`
	Name            string            `gorm:"primaryKey" json:"name"`
	EventKey        string            `json:"event_key"`
	WorkflowName    string            `json:"workflow_name"`
	WorkflowVersion *int              `json:"workflow_version"`
	Filter          string            `json:"filter"`
	Params          map[string]string `gorm:"serializer:json" json:"params"`
	CreatedAt       time.Time         `json:"created_at"`
}

// TriggerKey names a trigger in a project and domain.
type TriggerKey struct{ Project, Domain, Name string }

// CreateTrigger stores t (CreatedAt is set here; nil Params are stored as
// none). Errors: ErrConflict when the name is taken.
func (s Triggers) CreateTrigger(ctx context.Context, t Trigger) (Trigger, error) {
	t.CreatedAt = dbNow()
	if t.Params == nil {
		t.Params = map[string]string{}
	}
	if err := s.q(ctx).Create(&t).Error; err != nil {
		return Trigger{}, mapErr(err)
	}
	return t, nil
}

// GetTrigger returns a trigger. Errors: ErrNotFound.
func (s Triggers) GetTrigger(ctx context.Context, key TriggerKey) (Trigger, error) {
	var t Trigger
	err := s.q(ctx).Where("project = ? AND domain = ? AND name = ?", key.Project, key.Domain, key.Name).Take(&t).Error
	return t, mapErr(err)
}

// ListTriggers returns a page of the triggers of project/domain by name,
// after cursor (the last name of the previous page), and the next page's
// cursor ("" on the last); limit is 1 to 500, default 50. Errors:
// ErrBadCursor when cursor is not a trigger's name.
func (s Triggers) ListTriggers(ctx context.Context, project, dom, cursor string, limit int) ([]Trigger, string, error) {
	if cursor != "" && !domain.ValidName(cursor) {
		return nil, "", ErrBadCursor
	}
	limit = min(max(cmp.Or(limit, 50), 1), 500)
	var ts []Trigger
	err := s.q(ctx).Where("project = ? AND domain = ? AND name > ?", project, dom, cursor).
		Order("name").Limit(limit + 1).Find(&ts).Error
	if err != nil {
		return nil, "", mapErr(err)
	}
	if len(ts) <= limit {
		return ts, "", nil
	}
	return ts[:limit], ts[limit-1].Name, nil
}

// DeleteTrigger deletes a trigger: later events start nothing through it.
// Errors: ErrNotFound.
func (s Triggers) DeleteTrigger(ctx context.Context, key TriggerKey) error {
	res := s.q(ctx).Where("project = ? AND domain = ? AND name = ?", key.Project, key.Domain, key.Name).
		Delete(&Trigger{})
	if res.Error != nil {
		return mapErr(res.Error)
	}
	if res.RowsAffected == 0 {
		return ErrNotFound
	}
	return nil
}

// KeyTrigger is a trigger of an event key with the template version its
// runs run: the version it pins, or the latest; nil when that does not
// exist or the template is deleted.
type KeyTrigger struct {
	Trigger  Trigger   `json:"trigger"`
	Template *Template `json:"template"`
}

// keyTriggersSQL reads the triggers of @key in @project/@domain, by name,
// each with its template version (the pinned one or the latest, live), as
// one JSON array: one round trip however many triggers, through the
// triggers_by_key index and the templates' primary key.
const keyTriggersSQL = `SELECT coalesce(json_agg(json_build_object('trigger', row_to_json(t), 'template', row_to_json(w))
	ORDER BY t.name), '[]')
  FROM triggers t
  LEFT JOIN LATERAL (SELECT * FROM workflow_templates w
	 WHERE w.project = t.project AND w.domain = t.domain AND w.name = t.workflow_name AND w.deleted_at IS NULL
	   AND (t.workflow_version IS NULL OR w.version = t.workflow_version)
	 ORDER BY w.version DESC LIMIT 1) w ON true
 WHERE t.project = @project AND t.domain = @domain AND t.event_key = @key`

// KeyTriggers returns the triggers of event key in project/domain, by
// name, each with its template version.
func (s Triggers) KeyTriggers(ctx context.Context, project, dom, key string) ([]KeyTrigger, error) {
	var out []KeyTrigger
	err := scanRows(s.raw(ctx, keyTriggersSQL, map[string]any{"project": project, "domain": dom, "key": key}), &out)
	if err != nil {
		return nil, fmt.Errorf("triggers of %s: %w", key, err)
	}
	return out, nil
}

// PublishedEvent is a row of published_events: an event as it was
// published, and what each trigger of its key did with it.
type PublishedEvent struct {
	Project string `gorm:"primaryKey"`
	Domain  string `gorm:"primaryKey"`
	ID      string `gorm:"primaryKey"`
	Key     string
	// Payload is the event's payload, as encoding/json decodes it.
	Payload map[string]any `gorm:"serializer:json"`
	// Deliveries holds one EventDelivery per trigger of Key at publication,
	// by trigger name.
	Deliveries []EventDelivery `gorm:"serializer:json"`
	CreatedAt  time.Time
}

// EventDelivery is what a published event did through one trigger: start
// Run, or nothing, Error saying why when it failed (neither: its filter did
// not hold).
type EventDelivery struct {
	Trigger string `json:"trigger"`
	Run     string `json:"run,omitempty"`
	Error   string `json:"error,omitempty"`
}

// PublishedEventKey names a published event in a project and domain.
type PublishedEventKey struct{ Project, Domain, ID string }

// insertEventSQL inserts a published event unless its id is taken. A
// concurrent insert of the same id waits on the primary key until the
// first commits, then inserts nothing: one publication of an id wins.
const insertEventSQL = `INSERT INTO published_events (project, domain, id, key, payload, deliveries, created_at)
VALUES (@project, @domain, @id, @key, CAST(@payload AS jsonb), CAST(@deliveries AS jsonb), @now)
ON CONFLICT DO NOTHING
RETURNING created_at`

// InsertPublishedEvent stores e (CreatedAt is set here) unless an event of
// its id exists, or commits meanwhile: then it writes nothing and returns
// created false. Errors: the database's.
func (s Triggers) InsertPublishedEvent(ctx context.Context, e PublishedEvent) (PublishedEvent, bool, error) {
	e.CreatedAt = dbNow()
	if e.Payload == nil {
		e.Payload = map[string]any{}
	}
	if e.Deliveries == nil {
		e.Deliveries = []EventDelivery{}
	}
	payload, err := encodeRows(e.Payload)
	if err != nil {
		return PublishedEvent{}, false, fmt.Errorf("event payload: %w", err)
	}
	deliveries, err := encodeRows(e.Deliveries)
	if err != nil {
		return PublishedEvent{}, false, fmt.Errorf("event deliveries: %w", err)
	}
	var at []time.Time
	err = s.raw(ctx, insertEventSQL, map[string]any{"project": e.Project, "domain": e.Domain, "id": e.ID, "key": e.Key,
		"payload": string(payload), "deliveries": string(deliveries), "now": e.CreatedAt}).Scan(&at).Error
	if err != nil {
		return PublishedEvent{}, false, mapErr(err)
	}
	return e, len(at) == 1, nil
}

// SetDeliveries replaces a published event's deliveries. Errors:
// ErrNotFound.
func (s Triggers) SetDeliveries(ctx context.Context, key PublishedEventKey, deliveries []EventDelivery) error {
	raw, err := encodeRows(deliveries)
	if err != nil {
		return fmt.Errorf("event deliveries: %w", err)
	}
	res := s.exec(ctx, `UPDATE published_events SET deliveries = CAST(? AS jsonb)
		WHERE project = ? AND domain = ? AND id = ?`, string(raw), key.Project, key.Domain, key.ID)
	if res.Error != nil {
		return mapErr(res.Error)
	}
	if res.RowsAffected == 0 {
		return ErrNotFound
	}
	return nil
}

// GetPublishedEvent returns a published event. Errors: ErrNotFound.
func (s Triggers) GetPublishedEvent(ctx context.Context, key PublishedEventKey) (PublishedEvent, error) {
	var e PublishedEvent
	err := s.q(ctx).Where("project = ? AND domain = ? AND id = ?", key.Project, key.Domain, key.ID).Take(&e).Error
	return e, mapErr(err)
}
