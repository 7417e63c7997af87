package store

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/capstan-run/capstan/pkg/domain"
)

// NewRun is what CreateRun inserts.
type NewRun struct {
	Key domain.RunKey
	// Spec must be normalized and valid.
	Spec domain.WorkflowSpec
	// IdempotencyKey, when set, makes a retried create return the first run.
	IdempotencyKey string
}

// RunDetail is a run with its actions, their tasks and attempts.
type RunDetail struct {
	Run     Run
	Actions []ActionDetail
}

// ActionDetail is an action with its tasks.
type ActionDetail struct {
	Action Action
	Tasks  []TaskDetail
}

// TaskDetail is a task with its attempt history, oldest first.
type TaskDetail struct {
	Task     Task
	Attempts []Attempt
}

// CreateRun inserts a run and its root action a0 (QUEUED) in one transaction.
// created is false when IdempotencyKey matched an earlier run, which is
// returned. Errors: ErrConflict when the name is taken.
func (s *Store) CreateRun(ctx context.Context, nr NewRun) (run Run, created bool, err error) {
	spec, err := json.Marshal(nr.Spec)
	if err != nil {
		return Run{}, false, err
	}
	err = s.InTx(ctx, func(tx *Store) error {
		if nr.IdempotencyKey != "" {
			err := tx.q(ctx).Where("project = ? AND domain = ? AND idempotency_key = ?",
				nr.Key.Project, nr.Key.Domain, nr.IdempotencyKey).Take(&run).Error
			if err == nil {
				return nil
			}
			if !errors.Is(mapErr(err), ErrNotFound) {
				return mapErr(err)
			}
		}
		run = Run{Project: nr.Key.Project, Domain: nr.Key.Domain, Name: nr.Key.Run, Spec: spec,
			Phase: string(domain.PhaseQueued), Version: 1}
		if nr.IdempotencyKey != "" {
			run.IdempotencyKey = &nr.IdempotencyKey
		}
		if err := tx.q(ctx).Create(&run).Error; err != nil {
			return mapErr(err)
		}
		root := Action{Project: run.Project, Domain: run.Domain, RunName: run.Name, Name: domain.RootActionName,
			Kind: "workflow", Spec: spec, DependsOn: []string{}, Phase: string(domain.PhaseQueued), Version: 1}
		if err := tx.q(ctx).Create(&root).Error; err != nil {
			return mapErr(err)
		}
		created = true
		return tx.event(ctx, nr.Key, domain.RootActionName, "run.created", map[string]any{"phase": run.Phase})
	})
	return run, created, err
}

// GetRun returns a run with its actions, tasks and attempts.
// Errors: ErrNotFound.
func (s *Store) GetRun(ctx context.Context, key domain.RunKey) (RunDetail, error) {
	var d RunDetail
	if err := s.q(ctx).Where("project = ? AND domain = ? AND name = ?", key.Project, key.Domain, key.Run).
		Take(&d.Run).Error; err != nil {
		return d, mapErr(err)
	}
	actions, err := s.actionDetails(ctx, key, "")
	if err != nil {
		return d, err
	}
	var spec domain.WorkflowSpec
	if err := json.Unmarshal(d.Run.Spec, &spec); err != nil {
		return d, fmt.Errorf("run %s: spec: %w", key, err)
	}
	d.Actions = inSpecOrder(actions, spec)
	return d, nil
}

// inSpecOrder sorts actions as their steps appear in the spec, the root a0
// first.
func inSpecOrder(actions []ActionDetail, spec domain.WorkflowSpec) []ActionDetail {
	pos := map[string]int{domain.RootActionName: -1}
	for i, st := range spec.Steps {
		pos[st.Name] = i
	}
	slices.SortStableFunc(actions, func(a, b ActionDetail) int { return cmp.Compare(pos[a.Action.Name], pos[b.Action.Name]) })
	return actions
}

// GetAction returns one action with its tasks and attempts.
// Errors: ErrNotFound.
func (s *Store) GetAction(ctx context.Context, key domain.ActionKey) (ActionDetail, error) {
	ds, err := s.actionDetails(ctx, key.RunKey, key.Action)
	if err != nil {
		return ActionDetail{}, err
	}
	if len(ds) == 0 {
		return ActionDetail{}, ErrNotFound
	}
	return ds[0], nil
}

// actionDetails loads the run's actions (or only the one named) with tasks
// and attempts, root first, then in creation order.
func (s *Store) actionDetails(ctx context.Context, key domain.RunKey, only string) ([]ActionDetail, error) {
	var actions []Action
	q := s.q(ctx).Where("project = ? AND domain = ? AND run_name = ?", key.Project, key.Domain, key.Run)
	if only != "" {
		q = q.Where("name = ?", only)
	}
	if err := q.Order("parent_action_name NULLS FIRST, created_at, name").Find(&actions).Error; err != nil {
		return nil, mapErr(err)
	}
	var tasks []Task
	tq := s.q(ctx).Where("project = ? AND domain = ? AND run_name = ?", key.Project, key.Domain, key.Run)
	if only != "" {
		tq = tq.Where("action_name = ?", only)
	}
	if err := tq.Order("action_name, idx").Find(&tasks).Error; err != nil {
		return nil, mapErr(err)
	}
	ids := make([]int64, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	var attempts []Attempt
	if len(ids) > 0 {
		if err := s.q(ctx).Where("task_id IN ?", ids).Order("task_id, number").Find(&attempts).Error; err != nil {
			return nil, mapErr(err)
		}
	}
	byTask := map[int64][]Attempt{}
	for _, a := range attempts {
		byTask[a.TaskID] = append(byTask[a.TaskID], a)
	}
	byAction := map[string][]TaskDetail{}
	for _, t := range tasks {
		byAction[t.ActionName] = append(byAction[t.ActionName], TaskDetail{Task: t, Attempts: byTask[t.ID]})
	}
	out := make([]ActionDetail, len(actions))
	for i, a := range actions {
		out[i] = ActionDetail{Action: a, Tasks: byAction[a.Name]}
	}
	return out, nil
}

// RunFilter selects runs for ListRuns.
type RunFilter struct {
	Project, Domain string
	// Phase, when set, keeps runs in that phase.
	Phase string
	// Cursor is the NextCursor of the previous page.
	Cursor string
	// Limit is the page size, 1 to 500. Default 50.
	Limit int
}

// ErrBadCursor: the cursor was not produced by ListRuns.
var ErrBadCursor = errors.New("invalid cursor")

// ListRuns returns a page of runs, newest first, and the cursor of the next
// page ("" on the last). Errors: ErrBadCursor.
func (s *Store) ListRuns(ctx context.Context, f RunFilter) ([]Run, string, error) {
	limit := min(max(cmpOr(f.Limit, 50), 1), 500)
	q := s.q(ctx).Where("project = ? AND domain = ?", f.Project, f.Domain)
	if f.Phase != "" {
		q = q.Where("phase = ?", f.Phase)
	}
	if f.Cursor != "" {
		at, name, err := decodeCursor(f.Cursor)
		if err != nil {
			return nil, "", err
		}
		q = q.Where("(created_at, name) < (?, ?)", at, name)
	}
	var runs []Run
	if err := q.Order("created_at DESC, name DESC").Limit(limit + 1).Find(&runs).Error; err != nil {
		return nil, "", mapErr(err)
	}
	if len(runs) <= limit {
		return runs, "", nil
	}
	last := runs[limit-1]
	return runs[:limit], encodeCursor(last.CreatedAt, last.Name), nil
}

func encodeCursor(at time.Time, name string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(at.UTC().Format(time.RFC3339Nano) + "|" + name))
}

func decodeCursor(c string) (time.Time, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", ErrBadCursor
	}
	ts, name, ok := strings.Cut(string(raw), "|")
	at, err := time.Parse(time.RFC3339Nano, ts)
	// Postgres refuses NUL and invalid UTF-8 in a text parameter; no key we
	// encode holds either.
	if !ok || err != nil || !utf8.ValidString(name) || strings.ContainsRune(name, 0) {
		return time.Time{}, "", ErrBadCursor
	}
	return at, name, nil
}

// event appends a run_events row for key's run.
func (s *Store) event(ctx context.Context, key domain.RunKey, action, typ string, data any) error {
	return s.eventFull(ctx, RunEvent{Project: key.Project, Domain: key.Domain, RunName: key.Run,
		ActionName: strPtr(action), Type: typ}, data)
}

func (s *Store) eventFull(ctx context.Context, e RunEvent, data any) error {
	raw, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("event data: %w", err)
	}
	e.Data = raw
	return mapErr(s.q(ctx).Create(&e).Error)
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
