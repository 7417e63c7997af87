package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
)

// The benchmarks below time the store's side of Capstan's hot paths, one
// goroutine, against the dev Postgres: they compare one change of a query
// with the next (`go test -bench . ./pkg/store/`). The whole stack's figures
// are `make bench`'s.

// BenchmarkGetRun times reading a finished run of two steps (2 replicas,
// then 1), each task with one attempt: the api's GET of a run.
func BenchmarkGetRun(b *testing.B) {
	st := storetest.New(b)
	ctx := context.Background()
	w, err := st.Workers().RegisterWorker(ctx, store.NewWorker{Name: "w", Address: "http://127.0.0.1:1", Slots: 8})
	if err != nil {
		b.Fatal(err)
	}
	spec := domain.WorkflowSpec{Mode: domain.ModeStepByStep, Steps: []domain.Step{
		{Name: "a", Plugin: domain.PluginNoop, Replicas: intp(2)}, {Name: "b", Plugin: domain.PluginNoop}}}
	spec.Normalize()
	key := domain.RunKey{Project: "p", Domain: "d", Run: "r"}
	must(b, func() error { _, _, err := st.Runs().CreateRun(ctx, store.NewRun{Key: key, Spec: spec}); return err })
	storetest.StartSteps(b, st, key)
	succeed(b, st, key, w)
	d, err := st.Runs().GetRun(ctx, key)
	if err != nil || domain.Phase(d.Run.Phase) != domain.PhaseSucceeded || len(d.Actions) != 3 {
		b.Fatalf("run %s: %v, phase %s, %d actions", key, err, d.Run.Phase, len(d.Actions))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := st.Runs().GetRun(ctx, key); err != nil {
			b.Fatal(err)
		}
	}
}

// succeed runs every task of a started run on w to SUCCEEDED, then ends its
// actions, a0 and the run SUCCEEDED: the rows a finished run leaves, written
// with the store's statements (the scheduler's evaluation decides them in
// production).
func succeed(b *testing.B, st *store.Store, key domain.RunKey, w store.Worker) {
	b.Helper()
	ctx := context.Background()
	d, err := st.Runs().GetRun(ctx, key)
	if err != nil {
		b.Fatal(err)
	}
	for _, ad := range d.Actions {
		for _, td := range ad.Tasks {
			a, ok, err := storetest.AssignTask(ctx, st, td.Task.ID, w.ID)
			if err != nil || !ok {
				b.Fatalf("assign: %v %t", err, ok)
			}
			reportSucceeded(b, st, a.ID)
			applyOutcome(b, st, a.ID, store.TaskOutcome{State: domain.TaskSucceeded, Result: domain.NoRetry.String()})
		}
	}
	must(b, func() error {
		return st.InTx(ctx, func(tx *store.Store) error {
			now := time.Now().UTC()
			for _, ad := range d.Actions {
				if _, err := tx.Actions().SetActionPhase(ctx, key.Action(ad.Action.Name), domain.PhaseRunning, domain.PhaseSucceeded,
					now); err != nil {
					return err
				}
			}
			return tx.Runs().SetRunPhase(ctx, key, domain.PhaseSucceeded, now)
		})
	})
}

// reportSucceeded reports attempt id RUNNING, then SUCCEEDED with exit code 0.
func reportSucceeded(b *testing.B, st *store.Store, id int64) {
	b.Helper()
	exit := 0
	for _, r := range []store.Report{{State: domain.TaskRunning}, {State: domain.TaskSucceeded, ExitCode: &exit}} {
		if _, err := storetest.ReportAttempt(context.Background(), st, id, r); err != nil {
			b.Fatal(err)
		}
	}
}

func must(b *testing.B, f func() error) {
	b.Helper()
	if err := f(); err != nil {
		b.Fatal(err)
	}
}
