package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkSingleTaskRun times every store call and scheduler decision of
// one single-task noop run, one goroutine, against the dev Postgres and
// Redis, in the order the services make them: create and read back (api),
// expand and start (the scheduler's advance), bind (the leader's pass, one
// task), the executor's read, RUNNING and SUCCEEDED reports (api), then the
// evaluation (the scheduler: ARC's worker rule, the task's fate, the job's
// phase and the run's final advance, in one transaction). It compares one
// change of a query or a decision with the next (`go test -bench
// SingleTaskRun ./internal/scheduler/`); the whole stack's figures are
// `make bench`'s.
func BenchmarkSingleTaskRun(b *testing.B) {
	st := storetest.New(b)
	ctx := context.Background()
	redis := redistest.New(b)
	client := asynq.NewClient(redis)
	b.Cleanup(func() { client.Close() })
	log := slog.New(slog.DiscardHandler)
	s := New(st, queue.NewEnqueuer(client, log), log, prometheus.NewRegistry(), Config{Retry: domain.Table{0}})
	w, err := st.RegisterWorker(ctx, store.NewWorker{Name: "w", Address: "http://127.0.0.1:1", Slots: 8})
	if err != nil {
		b.Fatal(err)
	}
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Plugin: domain.PluginNoop}}}
	spec.Normalize()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		key := domain.RunKey{Project: "p", Domain: "d", Run: fmt.Sprintf("r%d", i)}
		benchMust(b, func() error { _, _, err := st.CreateRun(ctx, store.NewRun{Key: key, Spec: spec}); return err })
		benchMust(b, func() error { _, err := st.GetRun(ctx, key); return err })
		benchMust(b, func() error { _, err := s.advance(ctx, key); return err })
		d, err := st.GetAction(ctx, key.Action("s"))
		if err != nil || len(d.Tasks) != 1 {
			b.Fatalf("tasks of %s: %v (%d)", key, err, len(d.Tasks))
		}
		a, ok, err := storetest.AssignTask(ctx, st, d.Tasks[0].Task.ID, w.ID)
		if err != nil || !ok {
			b.Fatalf("assign: %v %t", err, ok)
		}
		benchMust(b, func() error { _, err := st.GetAttemptRun(ctx, a.ID); return err })
		exit := 0
		for _, r := range []store.Report{{State: domain.TaskRunning}, {State: domain.TaskSucceeded, ExitCode: &exit}} {
			benchMust(b, func() error { _, err := st.ReportAttempt(ctx, a.ID, r); return err })
		}
		ev, err := s.evaluate(ctx, a.ID)
		if err != nil || ev.ActionPhase != domain.PhaseSucceeded {
			b.Fatalf("evaluate: %v %s", err, ev.ActionPhase)
		}
		if ev.Advance == nil || ev.Advance.Phase != domain.PhaseSucceeded {
			b.Fatalf("advance: %+v", ev.Advance)
		}
	}
}

func benchMust(b *testing.B, f func() error) {
	b.Helper()
	if err := f(); err != nil {
		b.Fatal(err)
	}
}
