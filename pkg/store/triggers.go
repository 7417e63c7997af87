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

// publishSQL inserts the published event of @project/@domain/@id unless
// its id is taken, and only then the runs of @runs (in key order, the
// lock order), their root actions (@roots) and run.created events
// (@events), and queues @notices for the commit while a listener is
// registered (listenersLive); it returns the events it inserted (1 or 0)
// and the notifications it queued. One statement, atomic without a transaction: a concurrent
// publication of the same id waits on the event's key until the first
// commits, then inserts nothing. A run whose name is taken fails the
// whole statement (a unique violation): nothing is written. The new runs
// need no feed lock: no other transaction writes events of a run that has
// not committed.
var publishSQL = `WITH ev AS (INSERT INTO published_events (project, domain, id, key, payload, deliveries, created_at)
	VALUES (@project, @domain, @id, @key, CAST(@payload AS jsonb), CAST(@deliveries AS jsonb), @now)
	ON CONFLICT DO NOTHING RETURNING 1),
r AS (INSERT INTO runs (` + columnsOf[Run]() + `) SELECT ` + columnsOf[Run]() + `
	FROM jsonb_populate_recordset(NULL::runs, CAST(@runs AS jsonb)) WHERE EXISTS (SELECT 1 FROM ev)
	ORDER BY project, domain, name RETURNING 1),
a AS (INSERT INTO actions (` + actionColumns + `) SELECT ` + actionColumns + `
	FROM jsonb_populate_recordset(NULL::actions, CAST(@roots AS jsonb)) WHERE EXISTS (SELECT 1 FROM r) RETURNING 1),
e AS (INSERT INTO run_events (` + columnsOf[RunEvent]() + `) SELECT ` + columnsOf[RunEvent]() + `
	FROM jsonb_populate_recordset(NULL::run_events, CAST(@events AS jsonb)) WHERE EXISTS (SELECT 1 FROM a) RETURNING 1),
n AS (SELECT pg_notify(@channel, x) FROM unnest(CAST(CAST(@notices AS text) AS text[])) AS x
	WHERE EXISTS (SELECT 1 FROM e) AND ` + listenersLive + `)
SELECT (SELECT count(*) FROM ev), (SELECT count(*) FROM n)`

// PublishEvent stores e (CreatedAt is set here) and, when its id is new,
// creates runs as CreateRuns does (each QUEUED, with its root action a0
// and its run.created event; every NewRun's Spec normalized and valid), in
// one statement. created is false when an event of the id exists, or
// commits meanwhile: then nothing is written. Errors: ErrConflict when a
// run's name is taken (nothing is written); the database's.
func (s Triggers) PublishEvent(ctx context.Context, e PublishedEvent, runs []NewRun) (PublishedEvent, bool, error) {
	e.CreatedAt = dbNow()
	if e.Payload == nil {
		e.Payload = map[string]any{}
	}
	if e.Deliveries == nil {
		e.Deliveries = []EventDelivery{}
	}
	args, err := publishArgs(e, runs)
	if err != nil {
		return PublishedEvent{}, false, fmt.Errorf("event %s: %w", e.ID, err)
	}
	var created, notified int
	if err := scanRow(s.raw(ctx, publishSQL, args), &created, &notified); err != nil {
		return PublishedEvent{}, false, mapErr(err)
	}
	return e, created == 1, nil
}

// publishArgs are publishSQL's parameters for e and runs.
func publishArgs(e PublishedEvent, runs []NewRun) (map[string]any, error) {
	rows, roots, events := make([]Run, len(runs)), make([]Action, len(runs)), make([]RunEvent, len(runs))
	for i, nr := range runs {
		rows[i] = nr.row(e.CreatedAt)
		roots[i], events[i] = rootOf(rows[i], e.CreatedAt), createdEvent(rows[i], e.CreatedAt)
	}
	_, notices, err := eventNotices(events)
	if err != nil {
		return nil, err
	}
	args := map[string]any{"project": e.Project, "domain": e.Domain, "id": e.ID, "key": e.Key, "now": e.CreatedAt,
		"channel": EventsChannel, "notices": Strings(notices)}
	for name, v := range map[string]any{"payload": e.Payload, "deliveries": e.Deliveries, "runs": rows,
		"roots": roots, "events": events} {
		raw, err := encodeRows(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		args[name] = string(raw)
	}
	return args, nil
}

// TakenRunNames returns which of names are runs of project/domain, for a
// publication whose run names were taken (PublishEvent's ErrConflict).
func (s Triggers) TakenRunNames(ctx context.Context, project, dom string, names []string) ([]string, error) {
	var taken []string
	err := s.raw(ctx, `SELECT name FROM runs WHERE project = ? AND domain = ? AND name = ANY(CAST(? AS text[]))
		ORDER BY name`, project, dom, Strings(names)).Scan(&taken).Error
	return taken, mapErr(err)
}

// GetPublishedEvent returns a published event. Errors: ErrNotFound.
func (s Triggers) GetPublishedEvent(ctx context.Context, key PublishedEventKey) (PublishedEvent, error) {
	var e PublishedEvent
	err := s.q(ctx).Where("project = ? AND domain = ? AND id = ?", key.Project, key.Domain, key.ID).Take(&e).Error
	return e, mapErr(err)
}
