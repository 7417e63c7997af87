package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
)

// The benchmarks below time the store's side of Capstan's hot paths, one
// goroutine, against the dev Postgres: they compare one change of a query
// with the next (`go test -bench . ./pkg/store/`). The whole stack's figures
// are `make bench`'s.

// BenchmarkSingleTaskRun times every store call of one single-task noop run,
// in the order the services make them: create and read back (api), expand
// and start (scheduler), bind (leader's pass), the executor's read, RUNNING
// and SUCCEEDED reports (api), evaluation and the final advance (scheduler).
func BenchmarkSingleTaskRun(b *testing.B) {
	st := storetest.New(b)
	ctx := context.Background()
	w, err := st.RegisterWorker(ctx, store.NewWorker{Name: "w", Address: "http://127.0.0.1:1", Slots: 8})
	if err != nil {
		b.Fatal(err)
	}
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Plugin: domain.PluginNoop}}}
	spec.Normalize()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		key := domain.RunKey{Project: "p", Domain: "d", Run: fmt.Sprintf("r%d", i)}
		must(b, func() error { _, _, err := st.CreateRun(ctx, store.NewRun{Key: key, Spec: spec}); return err })
		must(b, func() error { _, err := st.GetRun(ctx, key); return err })
		must(b, func() error { _, err := st.AdvanceRun(ctx, key); return err })
		d, err := st.GetAction(ctx, key.Action("s"))
		if err != nil || len(d.Tasks) != 1 {
			b.Fatalf("tasks of %s: %v (%d)", key, err, len(d.Tasks))
		}
		a, ok, err := st.AssignTask(ctx, d.Tasks[0].Task.ID, w.ID)
		if err != nil || !ok {
			b.Fatalf("assign: %v %t", err, ok)
		}
		must(b, func() error { _, err := st.GetAttemptRun(ctx, a.ID); return err })
		reportSucceeded(b, st, a.ID)
		must(b, func() error { _, err := st.RecordWorkerFailure(ctx, a.ID, domain.Table{0}); return err })
		ev, err := st.EvaluateAttempt(ctx, a.ID, noDelay)
		if err != nil || ev.ActionPhase != domain.PhaseSucceeded {
			b.Fatalf("evaluate: %v %s", err, ev.ActionPhase)
		}
		adv, err := st.AdvanceRun(ctx, key)
		if err != nil || adv.Phase != domain.PhaseSucceeded {
			b.Fatalf("advance: %v %s", err, adv.Phase)
		}
	}
}

// BenchmarkGetRun times reading a finished run of two steps (2 replicas,
// then 1), each task with one attempt: the api's GET of a run.
func BenchmarkGetRun(b *testing.B) {
	st := storetest.New(b)
	ctx := context.Background()
	w, err := st.RegisterWorker(ctx, store.NewWorker{Name: "w", Address: "http://127.0.0.1:1", Slots: 8})
	if err != nil {
		b.Fatal(err)
	}
	spec := domain.WorkflowSpec{Mode: domain.ModeStepByStep, Steps: []domain.Step{
		{Name: "a", Plugin: domain.PluginNoop, Replicas: intp(2)}, {Name: "b", Plugin: domain.PluginNoop}}}
	spec.Normalize()
	key := domain.RunKey{Project: "p", Domain: "d", Run: "r"}
	must(b, func() error { _, _, err := st.CreateRun(ctx, store.NewRun{Key: key, Spec: spec}); return err })
	for range 3 {
		adv, err := st.AdvanceRun(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		if adv.Phase.IsTerminal() {
			break
		}
		for _, step := range adv.Started {
			d, err := st.GetAction(ctx, key.Action(step))
			if err != nil {
				b.Fatal(err)
			}
			for _, t := range d.Tasks {
				a, _, err := st.AssignTask(ctx, t.Task.ID, w.ID)
				if err != nil {
					b.Fatal(err)
				}
				reportSucceeded(b, st, a.ID)
				must(b, func() error { _, err := st.EvaluateAttempt(ctx, a.ID, noDelay); return err })
			}
		}
	}
	d, err := st.GetRun(ctx, key)
	if err != nil || domain.Phase(d.Run.Phase) != domain.PhaseSucceeded || len(d.Actions) != 3 {
		b.Fatalf("run %s: %v, phase %s, %d actions", key, err, d.Run.Phase, len(d.Actions))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := st.GetRun(ctx, key); err != nil {
			b.Fatal(err)
		}
	}
}

// reportSucceeded reports attempt id RUNNING, then SUCCEEDED with exit code 0.
func reportSucceeded(b *testing.B, st *store.Store, id int64) {
	b.Helper()
	exit := 0
	for _, r := range []store.Report{{State: domain.TaskRunning}, {State: domain.TaskSucceeded, ExitCode: &exit}} {
		if _, err := st.ReportAttempt(context.Background(), id, r); err != nil {
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
