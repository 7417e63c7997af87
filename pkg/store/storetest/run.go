package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
)

// StartSteps sets a test run up as if its steps had started: it creates the
// run's step actions and the tasks of the named steps (every step when none
// is named), and marks a0 and the run RUNNING; a terminal run is left
// alone. It applies no progression
// rule: the scheduler's tests drive the real one.
func StartSteps(t testing.TB, st *store.Store, key domain.RunKey, names ...string) {
	t.Helper()
	ctx := context.Background()
	err := st.InTx(ctx, func(tx *store.Store) error {
		run, err := tx.Runs().LockRun(ctx, key)
		if err != nil || domain.Phase(run.Phase).IsTerminal() {
			return err
		}
		if _, err := tx.Runs().ExpandSteps(ctx, key, run.Spec.Steps); err != nil {
			return err
		}
		now := time.Now().UTC()
		var steps []store.StartedStep
		for _, step := range run.Spec.Steps {
			if len(names) == 0 || slices.Contains(names, step.Name) {
				rows := store.NewTaskRows(key.Action(step.Name), 0, domain.StepTasks(step, domain.DefaultMaxSystemFailures, now))
				adm, _ := step.TaskAdmissions(run.Params, len(rows), "")
				steps = append(steps, store.StartedStep{Action: step.Name, Tasks: store.WithAdmission(rows, adm)})
			}
		}
		if err := tx.Tasks().CreateTasks(ctx, key, now, steps...); err != nil {
			return err
		}
		if !domain.CanMovePhase(domain.Phase(run.Phase), domain.PhaseRunning) {
			return nil
		}
		return tx.Actions().SetRootPhase(ctx, key, domain.Phase(run.Phase), domain.PhaseRunning, now)
	})
	if err != nil {
		t.Fatalf("storetest: start steps of %s: %v", key, err)
	}
}

// AssignTask binds a PENDING task to a worker with a new ASSIGNED attempt
// (store.AssignTasks for one task); ok is false when the task is no longer
// PENDING.
func AssignTask(ctx context.Context, st *store.Store, taskID int64, workerID string) (a store.Attempt, ok bool, err error) {
	as, err := st.Placement().AssignTasks(ctx, []store.Assignment{{TaskID: taskID, WorkerID: workerID}})
	if err != nil || len(as) == 0 {
		return store.Attempt{}, false, err
	}
	return as[0].Attempt, true, nil
}

// AllTasks returns every task of action key with its attempts, page after
// page (store.Actions.GetActionPage), in the pages' order: the current
// generation first, each generation in index order.
func AllTasks(t testing.TB, st *store.Store, key domain.ActionKey) []store.TaskDetail {
	t.Helper()
	var out []store.TaskDetail
	page := store.TaskPage{Limit: store.MaxTaskPageSize}
	for {
		d, err := st.Actions().GetActionPage(context.Background(), key, page)
		if err != nil {
			t.Fatalf("storetest: tasks of %s: %v", key, err)
		}
		out = append(out, d.Tasks...)
		if d.NextCursor == "" {
			return out
		}
		page.Cursor = d.NextCursor
	}
}
