package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/jackc/pgx/v5/pgconn"
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

// CreateRun inserts a run and its root action a0 (QUEUED) in one transaction
// and returns them. created is false when IdempotencyKey matched an earlier
// run, which is returned as GetRun reads it. Errors: ErrConflict when the
// name is taken.
func (s *Store) CreateRun(ctx context.Context, nr NewRun) (d RunDetail, created bool, err error) {
	spec, err := json.Marshal(nr.Spec)
	if err != nil {
		return RunDetail{}, false, err
	}
	var earlier *domain.RunKey
	err = s.InTx(ctx, func(tx *Store) error {
		if nr.IdempotencyKey != "" {
			var err error
			if earlier, err = tx.runByIdempotencyKey(ctx, nr); earlier != nil || !errors.Is(err, ErrNotFound) {
				return err
			}
		}
		run := Run{Project: nr.Key.Project, Domain: nr.Key.Domain, Name: nr.Key.Run, Spec: spec,
			Phase: string(domain.PhaseQueued), Version: 1}
		if nr.IdempotencyKey != "" {
			run.IdempotencyKey = &nr.IdempotencyKey
		}
		if err := tx.q(ctx).Create(&run).Error; err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.ConstraintName == "runs_idempotency_key" {
				return errIdempotencyRace
			}
			return mapErr(err)
		}
		root := Action{Project: run.Project, Domain: run.Domain, RunName: run.Name, Name: domain.RootActionName,
			Kind: "workflow", Spec: spec, DependsOn: []string{}, Phase: string(domain.PhaseQueued), Version: 1}
		if err := tx.q(ctx).Create(&root).Error; err != nil {
			return mapErr(err)
		}
		d = RunDetail{Run: run, Actions: []ActionDetail{{Action: root}}}
		return tx.event(ctx, nr.Key, domain.RootActionName, "run.created", map[string]any{"phase": run.Phase})
	})
	if errors.Is(err, errIdempotencyRace) {
		// A concurrent create with the same key committed first: answer
		// with its run, as a retry after it would have been.
		if earlier, err = s.runByIdempotencyKey(ctx, nr); err != nil {
			return RunDetail{}, false, err
		}
	}
	if err != nil || earlier == nil {
		return d, err == nil, err
	}
	d, err = s.GetRun(ctx, *earlier)
	return d, false, err
}

// runByIdempotencyKey returns the key of the run created with nr's
// Idempotency-Key in its project and domain. Errors: ErrNotFound.
func (s *Store) runByIdempotencyKey(ctx context.Context, nr NewRun) (*domain.RunKey, error) {
	var run Run
	if err := s.q(ctx).Select("name").Where("project = ? AND domain = ? AND idempotency_key = ?",
		nr.Key.Project, nr.Key.Domain, nr.IdempotencyKey).Take(&run).Error; err != nil {
		return nil, mapErr(err)
	}
	return &domain.RunKey{Project: nr.Key.Project, Domain: nr.Key.Domain, Run: run.Name}, nil
}

// errIdempotencyRace: the run's insert lost to a concurrent create with the
// same Idempotency-Key.
var errIdempotencyRace = errors.New("idempotency key taken concurrently")

// GetRun returns a run with its actions, tasks and attempts.
// Errors: ErrNotFound.
func (s *Store) GetRun(ctx context.Context, key domain.RunKey) (RunDetail, error) {
	run, actions, err := s.details(ctx, key, "")
	if err != nil {
		return RunDetail{}, err
	}
	var spec domain.WorkflowSpec
	if err := json.Unmarshal(run.Spec, &spec); err != nil {
		return RunDetail{}, fmt.Errorf("run %s: spec: %w", key, err)
	}
	return RunDetail{Run: run, Actions: inSpecOrder(actions, spec)}, nil
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
	_, ds, err := s.details(ctx, key.RunKey, key.Action)
	if err != nil {
		return ActionDetail{}, err
	}
	if len(ds) == 0 {
		return ActionDetail{}, ErrNotFound
	}
	return ds[0], nil
}

// detailsSQL reads a run's row with its actions (the one named @only, or
// all when @only is empty), their tasks and the tasks' attempts, each as
// the JSON Postgres builds from the rows (the models' json tags are the
// column names): one round trip, however many rows. Actions come root
// first, then in creation order.
const detailsSQL = `SELECT row_to_json(r),
	(SELECT coalesce(json_agg(a ORDER BY a.parent_action_name NULLS FIRST, a.created_at, a.name), '[]')
	   FROM actions a
	  WHERE a.project = r.project AND a.domain = r.domain AND a.run_name = r.name AND (@only = '' OR a.name = @only)),
	(SELECT coalesce(json_agg(t ORDER BY t.action_name, t.idx), '[]')
	   FROM tasks t
	  WHERE t.project = r.project AND t.domain = r.domain AND t.run_name = r.name AND (@only = '' OR t.action_name = @only)),
	(SELECT coalesce(json_agg(at ORDER BY at.task_id, at.number), '[]')
	   FROM tasks t JOIN attempts at ON at.task_id = t.id
	  WHERE t.project = r.project AND t.domain = r.domain AND t.run_name = r.name AND (@only = '' OR t.action_name = @only))
FROM runs r WHERE r.project = @project AND r.domain = @domain AND r.name = @run`

// details loads a run and its actions (or only the one named) with their
// tasks and attempts. Errors: ErrNotFound (no such run).
func (s *Store) details(ctx context.Context, key domain.RunKey, only string) (Run, []ActionDetail, error) {
	var run Run
	var rawRun, rawActions, rawTasks, rawAttempts []byte
	err := s.q(ctx).Raw(detailsSQL, sql.Named("project", key.Project), sql.Named("domain", key.Domain),
		sql.Named("run", key.Run), sql.Named("only", only)).Row().Scan(&rawRun, &rawActions, &rawTasks, &rawAttempts)
	if errors.Is(err, sql.ErrNoRows) {
		return run, nil, ErrNotFound
	}
	if err != nil {
		return run, nil, mapErr(err)
	}
	var actions []Action
	var tasks []Task
	var attempts []Attempt
	if err := decodeEach([][]byte{rawRun, rawActions, rawTasks, rawAttempts}, &run, &actions, &tasks, &attempts); err != nil {
		return run, nil, fmt.Errorf("run %s: decode rows: %w", key, err)
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
	return run, out, nil
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

// eventFull appends e with data as its JSON: in a transaction, to the rows
// InTx inserts before it commits; else at once.
func (s *Store) eventFull(ctx context.Context, e RunEvent, data any) error {
	raw, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("event data: %w", err)
	}
	e.Data = raw
	if s.events != nil {
		*s.events = append(*s.events, e)
		return nil
	}
	return mapErr(s.q(ctx).Create(&e).Error)
}

// flushEvents inserts the transaction's buffered events in one statement,
// in the order they were written.
func (s *Store) flushEvents(ctx context.Context) error {
	if s.events == nil || len(*s.events) == 0 {
		return nil
	}
	err := s.q(ctx).Create(s.events).Error
	*s.events = nil
	return mapErr(err)
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
