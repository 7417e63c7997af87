package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"
)

// NewRun is what CreateRun inserts.
type NewRun struct {
	Key domain.RunKey
	// Spec must be normalized and valid.
	Spec domain.WorkflowSpec
	// IdempotencyKey, when set, makes a retried create return the first run.
	IdempotencyKey string
	// Params are the run's resolved params (domain.ResolveParams); nil when
	// the spec declares none.
	Params map[string]any
	// Origin is where the run comes from beside its spec; zero for an
	// inline spec.
	Origin RunOrigin
	// Keys are the run's evaluated admission keys
	// (domain.WorkflowSpec.AdmissionKeys of Spec and Params).
	Keys domain.AdmissionKeys
	// Child, for a child run, is the workflow step it is of; nil for a run
	// created through the API.
	Child *ChildOf
	// SuspendedAt, when set, is the run's suspend_requested_at from its
	// creation (a child of a suspended parent).
	SuspendedAt *time.Time
}

// ChildOf is where a child run belongs: its parent's workflow step, its
// index among the step's children, the step's generation, its try (how
// many children of the index started before it) and its depth.
type ChildOf struct {
	Parent     domain.ActionKey
	Index      int
	Generation int
	Try        int
	Depth      int
}

// RunOrigin is what started a run: a template version (WorkflowName and
// WorkflowVersion), with, for a scheduled run, the schedule and its time,
// or, for a triggered one, the trigger and the published event's id.
type RunOrigin struct {
	WorkflowName    string
	WorkflowVersion int
	ScheduleName    string
	ScheduledAt     time.Time
	TriggerName     string
	EventID         string
	// Guard, for a run of a template version read earlier (a cache),
	// makes CreateRun insert only while that version is live and, with
	// Latest, still the latest: else ErrStaleTemplate, and nothing is
	// written.
	Guard, Latest bool
}

// row returns the runs row of nr, QUEUED, created at now.
func (nr NewRun) row(now time.Time) Run {
	run := Run{Project: nr.Key.Project, Domain: nr.Key.Domain, Name: nr.Key.Run, Spec: nr.Spec,
		TimeoutMs: nr.Spec.TimeoutDuration().Milliseconds(), Phase: string(domain.PhaseQueued), Version: 1,
		CreatedAt: now, UpdatedAt: now, Params: nr.Params, ConcurrencyKey: nr.Keys.Concurrency,
		FairnessKey: nr.Keys.Fairness, TTLSuccessMs: nr.Spec.TTL.Millis(domain.PhaseSucceeded),
		TTLFailureMs: nr.Spec.TTL.Millis(domain.PhaseFailed)}
	if nr.IdempotencyKey != "" {
		run.IdempotencyKey = &nr.IdempotencyKey
	}
	if c := nr.Child; c != nil {
		run.ParentRun, run.ParentAction = &c.Parent.Run, &c.Parent.Action
		run.ParentIndex, run.ParentGeneration, run.ParentTry = &c.Index, &c.Generation, &c.Try
		run.Depth = c.Depth
	}
	run.SuspendRequestedAt = nr.SuspendedAt
	o := nr.Origin
	if o.WorkflowName != "" {
		run.WorkflowName, run.WorkflowVersion = &o.WorkflowName, &o.WorkflowVersion
	}
	if o.ScheduleName != "" {
		at := o.ScheduledAt.UTC()
		run.ScheduleName, run.ScheduledAt = &o.ScheduleName, &at
	}
	if o.TriggerName != "" {
		run.TriggerName, run.EventID = &o.TriggerName, &o.EventID
	}
	return run
}

// rootOf is the root action a0 of run, QUEUED, created at now.
func rootOf(run Run, now time.Time) Action {
	return Action{Project: run.Project, Domain: run.Domain, RunName: run.Name, Name: domain.RootActionName,
		Kind: "workflow", DependsOn: Strings{}, Phase: string(domain.PhaseQueued), Version: 1,
		CreatedAt: now, UpdatedAt: now}
}

// createdEvent is the run.created event of run (QUEUED), at now.
func createdEvent(run Run, now time.Time) RunEvent {
	root := domain.RootActionName
	return RunEvent{Project: run.Project, Domain: run.Domain, RunName: run.Name, ActionName: &root,
		Type: "run.created", Data: []byte(`{"phase":"` + run.Phase + `"}`), CreatedAt: now}
}

// CreateRun inserts a run, its root action a0 (QUEUED) and its
// "run.created" event, in one statement (insertRun), and returns them.
// created is false when IdempotencyKey matched an earlier run, which is
// returned as GetRun reads it. Errors: ErrConflict when the name is taken,
// ErrStaleTemplate when nr.Origin.Guard and its template version changed.
func (s Runs) CreateRun(ctx context.Context, nr NewRun) (d RunDetail, created bool, err error) {
	var earlier *domain.RunKey
	if nr.IdempotencyKey != "" {
		if earlier, err = s.runByIdempotencyKey(ctx, nr); err != nil && !errors.Is(err, ErrNotFound) {
			return RunDetail{}, false, err
		}
	}
	if earlier == nil {
		run, root, err := s.insertRun(ctx, nr)
		if !errors.Is(err, errIdempotencyRace) {
			return RunDetail{Run: run, Actions: []ActionDetail{{Action: root}}}, err == nil, err
		}
		// A concurrent create with the same key committed first: answer
		// with its run, as a retry after it would have been.
		if earlier, err = s.runByIdempotencyKey(ctx, nr); err != nil {
			return RunDetail{}, false, err
		}
	}
	d, err = s.GetRun(ctx, *earlier)
	return d, false, err
}

// insertRun inserts nr's run row, its root action a0 (QUEUED) and its
// "run.created" event, and notifies the feed while a listener is
// registered, in one statement (atomic without a transaction), and returns
// the run and a0. The run's feed lock is not needed: no other transaction
// writes events of a run that has not committed. Errors:
// errIdempotencyRace, ErrConflict (the name is taken), ErrStaleTemplate
// (a guarded template version changed).
func (s *core) insertRun(ctx context.Context, nr NewRun) (Run, Action, error) {
	now := time.Now().UTC()
	run := nr.row(now)
	root, created := rootOf(run, now), createdEvent(run, now)
	args := map[string]any{"channel": EventsChannel}
	for name, row := range map[string]any{"run": run, "root": root, "created": created} {
		j, err := encodeRows(row)
		if err != nil {
			return Run{}, Action{}, fmt.Errorf("run %s: %w", nr.Key, err)
		}
		args[name] = string(j)
	}
	_, notices, err := eventNotices([]RunEvent{created})
	if err != nil {
		return Run{}, Action{}, err
	}
	args["notice"] = notices[0]
	o := nr.Origin
	args["guard"], args["latest"], args["wf"], args["wv"] = o.Guard, o.Latest, o.WorkflowName, o.WorkflowVersion
	args["project"], args["domain"] = nr.Key.Project, nr.Key.Domain
	var inserted, notified int64
	err = scanRow(s.raw(ctx, insertRunSQL, args), &inserted, &notified)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.ConstraintName == "runs_idempotency_key" {
		return Run{}, Action{}, errIdempotencyRace
	}
	if err == nil && inserted == 0 {
		return Run{}, Action{}, ErrStaleTemplate
	}
	return run, root, mapErr(err)
}

// insertRunSQL inserts the run of @run while templateGuard holds, the root
// action of @root (only once the run's insert returned a row) and the
// event of @created, and queues @notice for the commit while a listener is
// registered (listenersLive); it returns how many runs it inserted (0 or
// 1) and notices it queued. Each row is a parameter of its
// own, used once: a named parameter used n times is sent, and parsed as
// JSON, n times (one array of the three rows, read at three places, cost
// three parses of every row).
var insertRunSQL = `WITH r AS (INSERT INTO runs (` + columnsOf[Run]() + `) SELECT ` + columnsOf[Run]() + `
	FROM jsonb_populate_record(NULL::runs, CAST(@run AS jsonb)) WHERE ` + templateGuard + ` RETURNING 1),
a AS (INSERT INTO actions (` + actionColumns + `) SELECT ` + actionColumns + `
	FROM jsonb_populate_record(NULL::actions, CAST(@root AS jsonb)) WHERE EXISTS (SELECT 1 FROM r) RETURNING 1),
e AS (INSERT INTO run_events (` + columnsOf[RunEvent]() + `) SELECT ` + columnsOf[RunEvent]() + `
	FROM jsonb_populate_record(NULL::run_events, CAST(@created AS jsonb)) WHERE EXISTS (SELECT 1 FROM a) RETURNING 1),
n AS (SELECT pg_notify(@channel, @notice) FROM e WHERE ` + listenersLive + `)
SELECT (SELECT count(*) FROM r), (SELECT count(*) FROM n)`

// templateGuard holds unless @guard: then only while the runs row's
// template version (@wf, @wv of @project/@domain) is live and, with
// @latest, no later version exists.
const templateGuard = `(NOT @guard OR EXISTS (SELECT 1 FROM workflow_templates t
	WHERE t.project = @project AND t.domain = @domain AND t.name = @wf AND t.version = @wv AND t.deleted_at IS NULL
	  AND (NOT @latest OR NOT EXISTS (SELECT 1 FROM workflow_templates n
	        WHERE n.project = t.project AND n.domain = t.domain AND n.name = t.name AND n.version > t.version))))`

// runByIdempotencyKey returns the key of the run created with nr's
// Idempotency-Key in its project and domain. Errors: ErrNotFound.
func (s *core) runByIdempotencyKey(ctx context.Context, nr NewRun) (*domain.RunKey, error) {
	var run Run
	if err := s.q(ctx).Select("name").Where("project = ? AND domain = ? AND idempotency_key = ?",
		nr.Key.Project, nr.Key.Domain, nr.IdempotencyKey).Take(&run).Error; err != nil {
		return nil, mapErr(err)
	}
	return &domain.RunKey{Project: nr.Key.Project, Domain: nr.Key.Domain, Run: run.Name}, nil
}

// ErrStaleTemplate: a guarded create's template version is deleted, or
// no longer the latest (RunOrigin.Guard).
var ErrStaleTemplate = errors.New("the template version changed")

// errIdempotencyRace: the run's insert lost to a concurrent create with the
// same Idempotency-Key.
var errIdempotencyRace = errors.New("idempotency key taken concurrently")

// GetRun returns a run with its actions, each with its first page of
// tasks (at most RunTasksPerAction, TaskPage's order) and their attempts,
// its task counts and the cursor of its next page, and the run's child
// runs, in one statement. Errors: ErrNotFound.
func (s Runs) GetRun(ctx context.Context, key domain.RunKey) (RunDetail, error) {
	d, err := s.details(ctx, key, "", TaskPage{Limit: RunTasksPerAction})
	if err != nil {
		return RunDetail{}, err
	}
	d.Actions = inSpecOrder(d.Actions, d.Run.Spec)
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

// GetAction returns one action with its first page of tasks (GetActionPage
// with the default page). Errors: ErrNotFound.
func (s Actions) GetAction(ctx context.Context, key domain.ActionKey) (ActionDetail, error) {
	return s.GetActionPage(ctx, key, TaskPage{})
}

// GetActionPage returns one action with the page of its tasks (and their
// attempts) that page selects, its task counts and the cursor of the next
// page. Errors: ErrNotFound (no such run or action), ErrBadCursor.
func (s Actions) GetActionPage(ctx context.Context, key domain.ActionKey, page TaskPage) (ActionDetail, error) {
	d, err := s.details(ctx, key.RunKey, key.Action, page)
	if err != nil {
		return ActionDetail{}, err
	}
	if len(d.Actions) == 0 {
		return ActionDetail{}, ErrNotFound
	}
	return d.Actions[0], nil
}

// LockRun locks a run's row (FOR UPDATE) and returns it: the first lock of
// every transaction that moves a run (docs/design-notes.md, "Lock order").
// Errors: ErrNotFound.
func (s Runs) LockRun(ctx context.Context, key domain.RunKey) (Run, error) {
	var run Run
	err := scanRows(s.raw(ctx, `SELECT row_to_json(r) FROM runs r WHERE project = ? AND domain = ? AND name = ? FOR UPDATE`,
		key.Project, key.Domain, key.Run), &run)
	return run, err
}

// SetRunPhase sets the run row's phase (mirroring a0's); a terminal phase also
// sets ended_at and the run's expiry (expiresAtSQL).
func (s Runs) SetRunPhase(ctx context.Context, key domain.RunKey, p domain.Phase, now time.Time) error {
	up := map[string]any{"phase": string(p), "updated_at": now, "version": gorm.Expr("version + 1"),
		"expires_at": gorm.Expr(expiresAtSQL("runs", "'"+string(p)+"'", "CAST(? AS timestamptz)",
			strconv.FormatBool(p.IsTerminal())), now)}
	if p.IsTerminal() {
		up["ended_at"] = now
	}
	return mapErr(s.q(ctx).Model(&Run{}).Where("project = ? AND domain = ? AND name = ?", key.Project, key.Domain, key.Run).
		Updates(up).Error)
}

// UnfinishedRuns returns the keys of runs not yet terminal, oldest first,
// but for runs waiting for a concurrency slot: the sweep of the lines
// (LineHeads) starts those, and a long line must not fill the limit.
func (s Runs) UnfinishedRuns(ctx context.Context, limit int) ([]domain.RunKey, error) {
	var rows []Run
	if err := s.q(ctx).Select("project, domain, name").
		Where("ended_at IS NULL AND NOT (concurrency_key IS NOT NULL AND admitted_at IS NULL)").Order("created_at").Limit(limit).
		Find(&rows).Error; err != nil {
		return nil, mapErr(err)
	}
	keys := make([]domain.RunKey, len(rows))
	for i, r := range rows {
		keys[i] = domain.RunKey{Project: r.Project, Domain: r.Domain, Run: r.Name}
	}
	return keys, nil
}

// ErrNotRestartable: a restart of a run not in a terminal failure phase.
var ErrNotRestartable = errors.New("run not in a terminal failure phase")

// ErrUnknownStep: a restart's from_step names no step of the run's spec.
var ErrUnknownStep = errors.New("no such step")

// RequestSuspend records a suspend of a run (KubeVela's suspend) and of
// every live descendant run (its children's, through their workflow
// steps): it sets suspend_requested_at (kept when a suspend is already in
// force) and writes a "run.suspend_requested" event on each, in one
// transaction that locks the run, then the descendants by name (the lock
// order: a parent before its children). The scheduler acts on it when it
// next advances each: no new step starts, and the run is PAUSED once
// nothing runs. It returns the run and the descendants' keys, whose
// advances the caller pushes. Errors: ErrNotFound, ErrTerminal (the run
// ended).
func (s Runs) RequestSuspend(ctx context.Context, key domain.RunKey) (Run, []domain.RunKey, error) {
	return s.signalRun(ctx, key, "run.suspend_requested", func(run *Run, now time.Time) map[string]any {
		if run.SuspendRequestedAt == nil {
			run.SuspendRequestedAt = &now
		}
		return map[string]any{"suspend_requested_at": run.SuspendRequestedAt}
	}, func(now time.Time) map[string]any {
		return map[string]any{"suspend_requested_at": gorm.Expr("coalesce(suspend_requested_at, ?)", now)}
	})
}

// RequestResume records a resume of a run and of every live descendant
// run: it clears suspend_requested_at, sets resume_requested_at to now (it
// resumes the steps paused before it: suspend steps without a duration, a
// step paused under on_failure suspend) and writes a
// "run.resume_requested" event on each, in one transaction that locks them
// as RequestSuspend does. It returns the run and the descendants' keys.
// Errors: ErrNotFound, ErrTerminal.
func (s Runs) RequestResume(ctx context.Context, key domain.RunKey) (Run, []domain.RunKey, error) {
	return s.signalRun(ctx, key, "run.resume_requested", func(run *Run, now time.Time) map[string]any {
		run.SuspendRequestedAt, run.ResumeRequestedAt = nil, &now
		return map[string]any{"suspend_requested_at": nil, "resume_requested_at": now}
	}, func(now time.Time) map[string]any {
		return map[string]any{"suspend_requested_at": nil, "resume_requested_at": now}
	})
}

// signalRun locks a run that has not ended, applies the columns set returns
// (set also updates the returned run), bumps its version and writes an event
// of type typ; then it locks its live descendants and applies down's
// columns and the event to each. Errors: ErrNotFound, ErrTerminal.
func (s *core) signalRun(ctx context.Context, key domain.RunKey, typ string,
	set func(run *Run, now time.Time) map[string]any, down func(now time.Time) map[string]any) (Run, []domain.RunKey, error) {
	var run Run
	var desc []domain.RunKey
	err := s.inTx(ctx, func(tx *Store) error {
		var err error
		if run, err = tx.runs().LockRun(ctx, key); err != nil {
			return err
		}
		if domain.Phase(run.Phase).IsTerminal() {
			return ErrTerminal
		}
		now := dbNow()
		if err := tx.updateRun(ctx, &run, set(&run, now), now, typ, nil); err != nil {
			return err
		}
		if desc, err = tx.lockLiveDescendants(ctx, key); err != nil {
			return err
		}
		for _, d := range desc {
			if err := tx.updateRun(ctx, &Run{Project: d.Project, Domain: d.Domain, Name: d.Run}, down(now), now, typ,
				map[string]any{"from_run": key.Run}); err != nil {
				return err
			}
		}
		return nil
	})
	return run, desc, err
}

// descendantsSQL locks, by name, the runs below @run (its children, theirs…)
// that have not ended.
const descendantsSQL = `WITH RECURSIVE down(name, n) AS (
	SELECT name, 1 FROM runs WHERE project = @p AND domain = @d AND parent_run = @run
	UNION ALL
	SELECT r.name, down.n + 1 FROM runs r JOIN down ON r.parent_run = down.name
	 WHERE r.project = @p AND r.domain = @d AND down.n < @limit)
SELECT name FROM runs WHERE project = @p AND domain = @d AND name IN (SELECT name FROM down) AND ended_at IS NULL
ORDER BY name FOR UPDATE`

// lockLiveDescendants locks the live runs below key, by name, and returns
// their keys.
func (s *core) lockLiveDescendants(ctx context.Context, key domain.RunKey) ([]domain.RunKey, error) {
	var names []string
	if err := s.raw(ctx, descendantsSQL, map[string]any{"p": key.Project, "d": key.Domain, "run": key.Run,
		"limit": domain.MaxDepth}).Scan(&names).Error; err != nil {
		return nil, mapErr(err)
	}
	keys := make([]domain.RunKey, len(names))
	for i, n := range names {
		keys[i] = domain.RunKey{Project: key.Project, Domain: key.Domain, Run: n}
	}
	return keys, nil
}

// updateRun writes up to the run's row with updated_at and version + 1
// (mirrored in run) and an event of type typ with data.
func (s *core) updateRun(ctx context.Context, run *Run, up map[string]any, now time.Time, typ string, data any) error {
	up["updated_at"], up["version"] = now, gorm.Expr("version + 1")
	if err := s.q(ctx).Model(&Run{}).Where("project = ? AND domain = ? AND name = ?", run.Project, run.Domain, run.Name).
		Updates(up).Error; err != nil {
		return mapErr(err)
	}
	run.UpdatedAt, run.Version = now, run.Version+1
	key := domain.RunKey{Project: run.Project, Domain: run.Domain, Run: run.Name}
	return s.event(ctx, key, domain.RootActionName, typ, data)
}

// RequestRestart records a restart of a run that ended in failure (FAILED,
// ABORTED, TIMED_OUT, UNSCHEDULABLE or WORKER_FAILED): it sets
// restart_requested_at to now and restart_from to fromStep (NULL for "":
// every step that did not succeed) and writes a "run.restart_requested"
// event, in one transaction that locks the run; a second request before the
// scheduler acts replaces the first. Errors: ErrNotFound, ErrNotRestartable,
// ErrUnknownStep (fromStep is no step of the spec), ErrAbortPending. A run
// with a concurrency key gives up its slot (admitted_at): its restart is
// admitted as a new run is.
func (s Runs) RequestRestart(ctx context.Context, key domain.RunKey, fromStep string) (Run, error) {
	var run Run
	err := s.inTx(ctx, func(tx *Store) error {
		var err error
		if run, err = tx.runs().LockRun(ctx, key); err != nil {
			return err
		}
		if p := domain.Phase(run.Phase); !p.IsTerminal() || p.IsSuccess() {
			return ErrNotRestartable
		}
		if fromStep != "" && !slices.ContainsFunc(run.Spec.Steps, func(st domain.Step) bool { return st.Name == fromStep }) {
			return ErrUnknownStep
		}
		if err := tx.checkNoAbortPending(ctx, key); err != nil {
			return err
		}
		now := dbNow()
		run.RestartRequestedAt, run.RestartFrom = &now, strPtr(fromStep)
		up := map[string]any{"restart_requested_at": now, "restart_from": run.RestartFrom}
		if run.ConcurrencyKey != nil { // a restart waits for a slot as a new run does
			run.AdmittedAt, up["admitted_at"] = nil, nil
		}
		return tx.updateRun(ctx, &run, up, now, "run.restart_requested", map[string]any{"from_step": fromStep})
	})
	return run, err
}

// dbNow is the current time in UTC at Postgres's precision (microseconds),
// so a time a statement returns equals the one a later read returns.
func dbNow() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// RestartRequestedRuns returns the keys of up to limit runs whose restart
// waits for the scheduler (restart_requested_at set), oldest request first:
// they have ended, so UnfinishedRuns does not list them, and a resync that
// advances them heals a lost run:advance push after RequestRestart.
func (s Runs) RestartRequestedRuns(ctx context.Context, limit int) ([]domain.RunKey, error) {
	var keys []domain.RunKey
	err := s.raw(ctx, `SELECT project, domain, name AS run FROM runs WHERE restart_requested_at IS NOT NULL
		ORDER BY restart_requested_at LIMIT ?`, limit).Scan(&keys).Error
	return keys, mapErr(err)
}
