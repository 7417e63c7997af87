package scheduler

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/hibiken/asynq"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/prometheus/client_golang/prometheus"
)

// passSlots is how many tasks each measured pass places: the free slots of
// the one worker.
const passSlots = 100

// BenchmarkPassCost measures a scheduling pass's cost per placed task
// (runOnce: deadlines, timeouts, the placeable workers, a batch of pending
// tasks, placing passSlots of them on the one worker's free slots, each
// assignment's transaction and its dispatch push to Redis, the waiting
// tasks' reasons) with 1,000 and with 100,000 PENDING tasks waiting. Between
// passes, untimed, the placed tasks go back to PENDING, so every pass sees
// the same queue. A third case adds 200,000 finished tasks (a database's
// history) to the 1,000 pending: outside the target, it shows what the pass
// pays for the rows it should never read. Run it with -benchtime Nx
// (scripts/bench uses 20x); it prints the ratio of the first two per-task
// costs and, when CAPSTAN_BENCH_OUT names a directory, writes scale.json
// there. Target ratio ≤ 1.5.
func BenchmarkPassCost(b *testing.B) {
	cases := []struct{ pending, finished int }{{1000, 0}, {100000, 0}, {1000, 200000}}
	perTask := make([]time.Duration, len(cases))
	passes := 0
	for i, c := range cases {
		name := fmt.Sprintf("pending=%d", c.pending)
		if c.finished > 0 {
			name += fmt.Sprintf("/finished=%d", c.finished)
		}
		b.Run(name, func(b *testing.B) {
			f := newPassFixture(b, c.pending, c.finished)
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				f.reset(b)
				b.StartTimer()
				res, err := f.s.runOnce(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if res.Placed != passSlots {
					b.Fatalf("placed %d, want %d", res.Placed, passSlots)
				}
			}
			perTask[i] = b.Elapsed() / time.Duration(b.N*passSlots)
			passes = b.N
			b.ReportMetric(float64(perTask[i].Microseconds()), "µs/task")
		})
	}
	if perTask[0] == 0 || perTask[1] == 0 {
		return
	}
	writeScale(b, perTask, passes)
}

// writeScale prints the scale scenario's summary and writes it as
// $CAPSTAN_BENCH_OUT/scale.json (the shape of e2e's benchmark summaries).
func writeScale(b *testing.B, perTask []time.Duration, passes int) {
	small, large := perTask[0], perTask[1]
	ratio := float64(large) / float64(small)
	figures := map[string]any{"pending_1000_us_per_task": us(small), "pending_100000_us_per_task": us(large),
		"ratio": float64(int(ratio*1000+0.5)) / 1000, "tasks_per_pass": passSlots, "passes_each": passes}
	if perTask[2] > 0 {
		figures["pending_1000_finished_200000_us_per_task"] = us(perTask[2])
	}
	r := map[string]any{"title": "Scale (scheduling pass cost per placed task)",
		"result": fmt.Sprintf("%.0f µs/task at 1,000 pending, %.0f µs/task at 100,000; ratio %.2f",
			us(small), us(large), ratio),
		"target": "ratio ≤ 1.5", "met": ratio <= 1.5, "figures": figures}
	line, err := json.Marshal(map[string]any{"benchmark": "scale", "result": r})
	if err != nil {
		b.Fatal(err)
	}
	fmt.Printf("%s: %s (target %s, met %t)\n%s\n", r["title"], r["result"], r["target"], r["met"], line)
	dir := os.Getenv("CAPSTAN_BENCH_OUT")
	if dir == "" {
		return
	}
	out, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "scale.json"), append(out, '\n'), 0o644); err != nil {
		b.Fatal(err)
	}
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// passFixture is a scheduler on a fresh database holding one run whose step
// has pending PENDING tasks (and finished SUCCEEDED ones, each with its
// attempt), and one worker with passSlots free slots.
type passFixture struct {
	s      *Scheduler
	st     *store.Store
	db     *sql.DB
	worker store.Worker
}

func newPassFixture(b *testing.B, pending, finished int) *passFixture {
	b.Helper()
	ctx := context.Background()
	st, db := storetest.NewWithDB(b, store.Config{})
	redis := redistest.New(b)
	client, insp := asynq.NewClient(redis), asynq.NewInspector(redis)
	b.Cleanup(func() { client.Close(); insp.Close() })
	log := slog.New(slog.DiscardHandler)
	f := &passFixture{st: st, db: db, s: New(st, queue.NewEnqueuer(client, log), log, prometheus.NewRegistry(),
		Config{WorkerGrace: time.Hour})}

	key := domain.RunKey{Project: "bench", Domain: "scale", Run: "queue"}
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Plugin: domain.PluginNoop}}}
	spec.Normalize()
	if _, _, err := st.Runs().CreateRun(ctx, store.NewRun{Key: key, Spec: spec}); err != nil {
		b.Fatal(err)
	}
	if _, err := f.s.advance(ctx, key); err != nil { // the step's action and its task 0
		b.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO tasks (project, domain, run_name, action_name, idx)
		SELECT 'bench', 'scale', 'queue', 's', g FROM generate_series(1, $1 - 1) g`, pending); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO tasks (project, domain, run_name, action_name, idx, state, attempt_count, ended_at)
		SELECT 'bench', 'scale', 'queue', 's', g, 4, 1, now() FROM generate_series($1::int, $1::int + $2::int - 1) g`,
		pending, finished); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO attempts (task_id, number, state, started_at, finished_at, evaluated_at)
		SELECT id, 1, 4, now(), now(), now() FROM tasks WHERE state = 4`); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Exec(`ANALYZE`); err != nil {
		b.Fatal(err)
	}
	var err error
	if f.worker, err = st.Workers().RegisterWorker(ctx, store.NewWorker{Name: "bench", Address: "http://127.0.0.1:1", Slots: passSlots}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = insp.DeleteQueue(queue.WorkerQueue(f.worker.ID), true) })
	return f
}

// reset puts the tasks the last pass placed back to PENDING, without their
// attempts and events, so that the next pass sees the same queue.
func (f *passFixture) reset(b *testing.B) {
	b.Helper()
	for _, q := range []string{`DELETE FROM run_events`, `DELETE FROM attempts WHERE state = 9`,
		`UPDATE tasks SET state = 1, worker_id = NULL, attempt_count = 0 WHERE state = 9`} {
		if _, err := f.db.Exec(q); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := storetest.Heartbeat(context.Background(), f.st, f.worker.ID, storetest.Beat{}); err != nil {
		b.Fatal(err)
	}
}
