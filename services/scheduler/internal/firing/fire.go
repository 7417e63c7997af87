package firing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
)

// maxStartMessage is the most run names one runs:start message carries.
const maxStartMessage = 1000

// batch is what one firing transaction decided: the schedules' records,
// the runs to create, the runs to abort.
type batch struct {
	firings []store.ScheduleFiring
	runs    []store.NewRun
	cancel  []cancel
	res     Result
}

// cancel is a run cancel_other aborts, and why.
type cancel struct {
	key    domain.RunKey
	reason string
}

// fireBatch fires up to BatchSize due schedules in one transaction: it
// locks them (LockDueSchedules, SKIP LOCKED: another replica's firing
// takes others), reads their runs not yet ended and their templates,
// decides each (domain.FireSchedule, see decide), aborts the running runs
// cancel_other cancels (AbortAction, in key order), creates the runs
// (CreateRuns: a name already taken is a time that already started a run,
// which starts nothing), and records the firings. After the commit it
// pushes the aborts, and returns the runs it created, whose starts the
// round pushes (pushStarts); the scheduler's resync and the reconciler's
// scan deliver what a lost push leaves. A crash before the commit leaves
// nothing; after it, the names make any replay create nothing.
func (l *Loop) fireBatch(ctx context.Context) (Result, []store.Run, error) {
	var created []store.Run
	var aborted []domain.ActionKey
	var res Result
	err := l.store.InTx(ctx, func(tx *store.Store) error {
		created, aborted = nil, nil
		now := l.cfg.Now().UTC()
		rows, err := tx.Schedules().LockDueSchedules(ctx, now, l.cfg.BatchSize)
		if err != nil || len(rows) == 0 {
			return err
		}
		b, err := l.load(ctx, tx, rows, now)
		if err != nil {
			return err
		}
		res = b.res
		if aborted, err = abortRunning(ctx, tx, b.cancel); err != nil {
			return err
		}
		res.Cancelled = len(aborted)
		if created, err = createRuns(ctx, tx, b.runs); err != nil {
			return err
		}
		res.Started = len(created)
		return tx.Schedules().RecordFirings(ctx, b.firings)
	})
	if err != nil {
		return Result{}, nil, fmt.Errorf("fire schedules: %w", err)
	}
	l.observe(res, created)
	for _, k := range aborted {
		if err := l.queue.Enqueue(ctx, queue.NewActionAbortTask(k, l.cfg.AbortMaxRetry)); err != nil {
			l.log.Warn("enqueue abort failed; the reconciler's scan delivers it", "action", k.String(), "err", err)
		}
	}
	return res, created, nil
}

// load reads what the locked schedules' decisions need (their live runs,
// their templates) and decides each.
func (l *Loop) load(ctx context.Context, tx *store.Store, rows []store.Schedule, now time.Time) (batch, error) {
	keys := make([]store.ScheduleKey, len(rows))
	refs := make([]store.TemplateRef, 0, len(rows))
	for i, sc := range rows {
		keys[i] = sc.Key()
		refs = append(refs, templateRef(sc))
	}
	live, err := tx.Schedules().LiveScheduledRuns(ctx, keys)
	if err != nil {
		return batch{}, fmt.Errorf("read live runs: %w", err)
	}
	templates, err := tx.Templates().TemplateVersions(ctx, slices.Compact(sortedRefs(refs)))
	if err != nil {
		return batch{}, fmt.Errorf("read templates: %w", err)
	}
	var b batch
	for _, sc := range rows {
		l.decide(&b, sc, live[sc.Key()], templates, now)
	}
	return b, nil
}

// decide decides one schedule's firing into b: its record, the runs it
// starts (none when its template or params cannot make a run: the times
// are decided all the same, and logged), and, for cancel_other, the live
// runs to abort.
func (l *Loop) decide(b *batch, sc store.Schedule, live []string, templates map[store.TemplateRef]store.Template,
	now time.Time) {
	key := sc.Key()
	cal, err := sc.Spec.Calendar()
	if err != nil { // validated when stored: only a zone database without its zone
		l.log.Error("schedule spec does not compile; the schedule is not fired until changed", "schedule", key.String(), "err", err)
		b.firings = append(b.firings, store.ScheduleFiring{Key: key, CursorAt: sc.CursorAt, Pending: sc.Pending,
			Buffered: sc.Buffered})
		b.res.Schedules++
		return
	}
	f := domain.FireSchedule(domain.ScheduleState{ID: key.String(), Calendar: cal, Paused: sc.Paused, Cursor: sc.CursorAt,
		Pending: sc.Pending, Buffered: sc.Buffered, Running: len(live)}, now, l.cfg.Tick)
	rec := store.ScheduleFiring{Key: key, CursorAt: f.Cursor, Buffered: f.Buffered, Missed: int64(f.Missed),
		Skipped: int64(f.Skipped)}
	if !f.CheckAt.IsZero() {
		rec.CheckAt = &f.CheckAt
	}
	b.firings = append(b.firings, rec)
	b.res.Schedules++
	b.res.Skipped += f.Skipped
	b.res.Missed += f.Missed
	if len(f.Start) == 0 {
		return
	}
	runs, why := scheduledRuns(sc, templates[templateRef(sc)], f.Start)
	if why != "" {
		l.log.Warn("schedule cannot start its runs; its times pass unstarted", "schedule", key.String(),
			"times", len(f.Start), "reason", why)
		return
	}
	b.runs = append(b.runs, runs...)
	if f.CancelRunning {
		newest := runs[len(runs)-1].Key.Run
		for _, name := range live {
			b.cancel = append(b.cancel, cancel{key: domain.RunKey{Project: sc.Project, Domain: sc.Domain, Run: name},
				reason: "overlap policy cancel_other of schedule " + sc.Name + " started " + newest})
		}
	}
}

// scheduledRuns returns the runs sc starts from template t for times, or
// why it cannot: t is the zero Template (the template or its version does
// not exist, or is deleted), or sc's params do not fit t's.
func scheduledRuns(sc store.Schedule, t store.Template, times []time.Time) ([]store.NewRun, string) {
	if t.Name == "" {
		what := "no workflow template named " + sc.WorkflowName
		if sc.WorkflowVersion != nil {
			what = fmt.Sprintf("workflow template %s has no version %d", sc.WorkflowName, *sc.WorkflowVersion)
		}
		return nil, what
	}
	params, errs := domain.ResolveParams(t.Spec.Params, sc.Params, "params")
	if len(errs) > 0 {
		return nil, fmt.Sprintf("params do not fit version %d of workflow template %s: %v", t.Version, t.Name, errs[0])
	}
	keys, errs := t.Spec.AdmissionKeys(params, "workflow")
	if len(errs) > 0 {
		return nil, fmt.Sprintf("version %d of workflow template %s: %v", t.Version, t.Name, errs[0])
	}
	runs := make([]store.NewRun, len(times))
	for i, at := range times {
		runs[i] = store.NewRun{Key: domain.RunKey{Project: sc.Project, Domain: sc.Domain, Run: domain.ScheduledRunName(sc.Name, at)},
			Spec: t.Spec, Params: params, Keys: keys, Origin: store.RunOrigin{WorkflowName: t.Name, WorkflowVersion: t.Version,
				ScheduleName: sc.Name, ScheduledAt: at}}
	}
	return runs, ""
}

// templateRef is the template version sc's runs are of.
func templateRef(sc store.Schedule) store.TemplateRef {
	ref := store.TemplateRef{TemplateKey: store.TemplateKey{Project: sc.Project, Domain: sc.Domain, Name: sc.WorkflowName}}
	if sc.WorkflowVersion != nil {
		ref.Version = *sc.WorkflowVersion
	}
	return ref
}

// sortedRefs sorts refs in place and returns them.
func sortedRefs(refs []store.TemplateRef) []store.TemplateRef {
	slices.SortFunc(refs, func(a, b store.TemplateRef) int {
		return cmp.Or(cmp.Compare(a.Project, b.Project), cmp.Compare(a.Domain, b.Domain), cmp.Compare(a.Name, b.Name),
			cmp.Compare(a.Version, b.Version))
	})
	return refs
}

// abortRunning aborts the root of each run of cancels, in key order (the
// lock order's runs level, as AbortAction locks them), and returns the
// roots it aborted; a run that ended meanwhile, or is gone, needs none.
func abortRunning(ctx context.Context, tx *store.Store, cancels []cancel) ([]domain.ActionKey, error) {
	slices.SortFunc(cancels, func(a, b cancel) int {
		return cmp.Or(cmp.Compare(a.key.Project, b.key.Project), cmp.Compare(a.key.Domain, b.key.Domain),
			cmp.Compare(a.key.Run, b.key.Run))
	})
	var out []domain.ActionKey
	for _, c := range cancels {
		root := c.key.Action(domain.RootActionName)
		_, err := tx.Aborts().AbortAction(ctx, root, c.reason, store.CauseAborted)
		switch {
		case errors.Is(err, store.ErrTerminal), errors.Is(err, store.ErrNotFound):
			continue
		case err != nil:
			return nil, fmt.Errorf("abort run %s: %w", c.key, err)
		}
		out = append(out, root)
	}
	return out, nil
}

// createRuns creates runs (CreateRuns) and returns the rows of those it
// created; a name already taken is a scheduled time that already started
// its run.
func createRuns(ctx context.Context, tx *store.Store, runs []store.NewRun) ([]store.Run, error) {
	if len(runs) == 0 {
		return nil, nil
	}
	results, err := tx.Runs().CreateRuns(ctx, runs)
	if err != nil {
		return nil, fmt.Errorf("create %d scheduled runs: %w", len(runs), err)
	}
	var out []store.Run
	for i, r := range results {
		switch {
		case errors.Is(r.Err, store.ErrConflict):
		case r.Err != nil:
			return nil, fmt.Errorf("create run %s: %w", runs[i].Key, r.Err)
		case r.Created:
			out = append(out, r.Detail.Run)
		}
	}
	return out, nil
}

// pushStarts pushes runs:start for runs, one message per project/domain
// and maxStartMessage names; a failed push is logged, and the scheduler's
// resync starts those runs.
func (l *Loop) pushStarts(ctx context.Context, runs []store.Run) {
	byScope := map[[2]string][]string{}
	var scopes [][2]string
	for _, r := range runs {
		s := [2]string{r.Project, r.Domain}
		if _, ok := byScope[s]; !ok {
			scopes = append(scopes, s)
		}
		byScope[s] = append(byScope[s], r.Name)
	}
	for _, s := range scopes {
		for names := range slices.Chunk(byScope[s], maxStartMessage) {
			if err := l.queue.Enqueue(ctx, queue.NewRunsStartTask(s[0], s[1], names)); err != nil {
				l.log.Warn("enqueue scheduled runs' start failed; the resync starts them", "project", s[0], "domain", s[1],
					"runs", len(names), "err", err)
			}
		}
	}
}
