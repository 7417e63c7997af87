package scheduler

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

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
// Redis, in the order the services make them: create (api), a read of the
// run, expand, start and bind (the leader's advance, freshPlacement: the
// dispatch message carries the attempt's spec, which the executor does not
// read), RUNNING and SUCCEEDED reports (api), then
// the evaluation (the scheduler: ARC's worker rule, the task's fate, the
// job's phase and the run's final advance, in one transaction). It compares
// one change of a query or a decision with the next (`go test -bench
// SingleTaskRun ./internal/scheduler/`); the whole stack's figures are
// `make bench`'s.
//
// It also reports what a run costs Postgres, without the benchmark's own
// two reads (GetRun, GetAction: one statement and one transaction each):
// statements/run, counted by the store's per-statement callback
// (store.Config.OperationSeconds), and xacts/run, the transactions
// pg_stat_database counted for the benchmark's own database (read from
// another database, so that reading costs it nothing), see runXacts.
func BenchmarkSingleTaskRun(b *testing.B) {
	ctx := context.Background()
	url := storetest.NewURL(b)
	admin, err := sql.Open("pgx", storetest.AdminURL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { admin.Close() })
	x := &xactMeter{db: admin, url: url}
	client := asynq.NewClient(redistest.New(b))
	b.Cleanup(func() { client.Close() })
	log := slog.New(slog.DiscardHandler)
	newScheduler := func(st *store.Store) *Scheduler { // the leader, as a lone replica is
		s := New(st, queue.NewEnqueuer(client, log), log, prometheus.NewRegistry(),
			Config{Retry: domain.Table{0}, WorkerGrace: time.Hour})
		s.setLeader(true)
		return s
	}
	var w store.Worker
	x.phase(b, nil, func(st *store.Store) {
		if w, err = st.Workers().RegisterWorker(ctx, store.NewWorker{Name: "w", Address: "http://127.0.0.1:1", Slots: 8}); err != nil {
			b.Fatal(err)
		}
	})
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "s", Plugin: domain.PluginNoop}}}
	spec.Normalize()
	one := x.phase(b, nil, func(st *store.Store) { singleTaskRun(b, st, newScheduler(st), w, spec, "one") })
	statements := store.NewOperationSeconds()
	n := x.phase(b, statements, func(st *store.Store) {
		s := newScheduler(st)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			singleTaskRun(b, st, s, w, spec, fmt.Sprintf("r%d", i))
		}
	})
	if b.N < 2 {
		return // runXacts needs two runs at least
	}
	counts := statementCounts(b, statements)
	if testing.Verbose() {
		b.Logf("statements by operation over %d runs: %v", b.N, counts)
	}
	own := counts["GetRun"] + counts["GetAction"]
	b.ReportMetric(float64(counts[""]-own)/float64(b.N), "statements/run")
	b.ReportMetric(runXacts(one, n, b.N)-float64(own)/float64(b.N), "xacts/run")
}

// runXacts returns the transactions one run costs from the counts of a
// phase of one run (one) and of a phase of n runs (many), each on a fresh
// pool: their difference leaves out what a phase pays once, the pool's
// ping and each connection's first use of a statement (pgx prepares it in
// a round trip of its own, which Postgres counts as a transaction).
func runXacts(one, many int64, n int) float64 {
	return float64(many-one) / float64(n-1)
}

// xactMeter counts the transactions of the benchmark's database.
type xactMeter struct {
	db  *sql.DB // on another database of the same server
	url string
}

// phase opens a store on the benchmark's database (its statements counted
// into statements when set), runs f, closes the store, waits until its
// connections' backends exited (a backend's counts reach pg_stat_database
// when it exits, and within 1-10 s of going idle before that) and returns
// the transactions pg_stat_database counted meanwhile.
func (x *xactMeter) phase(tb testing.TB, statements *prometheus.HistogramVec, f func(st *store.Store)) int64 {
	tb.Helper()
	before := x.count(tb)
	st, err := store.Open(context.Background(), x.url, store.Config{MaxOpenConns: 10, OperationSeconds: statements})
	if err != nil {
		tb.Fatal(err)
	}
	f(st)
	if err := st.Close(); err != nil {
		tb.Fatal(err)
	}
	x.quiet(tb)
	return x.count(tb) - before
}

// quiet waits until no backend is connected to the benchmark's database,
// so that every count of what they did has reached pg_stat_database and
// pg_stat_user_tables.
func (x *xactMeter) quiet(tb testing.TB) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for x.backends(tb) > 0 {
		if time.Now().After(deadline) {
			tb.Fatal("the database's backends did not exit in 30s")
		}
		<-time.After(10 * time.Millisecond) // the polling interval
	}
}

// count returns xact_commit + xact_rollback of the benchmark's database.
func (x *xactMeter) count(tb testing.TB) int64 {
	tb.Helper()
	var n int64
	if err := x.db.QueryRow(`SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1`,
		x.dbName()).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}

// backends counts the connections open to the benchmark's database.
func (x *xactMeter) backends(tb testing.TB) int {
	tb.Helper()
	var n int
	if err := x.db.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, x.dbName()).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}

func (x *xactMeter) dbName() string {
	u := x.url[strings.LastIndexByte(x.url, '/')+1:]
	name, _, _ := strings.Cut(u, "?")
	return name
}

// statementCounts returns the statements h counted by operation, and their
// sum under "".
func statementCounts(tb testing.TB, h *prometheus.HistogramVec) map[string]int64 {
	tb.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(h)
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]int64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			n := int64(m.GetHistogram().GetSampleCount())
			out[""] += n
			for _, l := range m.GetLabel() {
				out[l.GetValue()] += n
			}
		}
	}
	return out
}

// singleTaskRun makes every store call (st) and scheduler decision (s) of
// single-task run name, with its task bound to worker w.
func singleTaskRun(tb testing.TB, st *store.Store, s *Scheduler, w store.Worker, spec domain.WorkflowSpec, name string) {
	tb.Helper()
	ctx := context.Background()
	key := domain.RunKey{Project: "p", Domain: "d", Run: name}
	benchMust(tb, func() error { _, _, err := st.Runs().CreateRun(ctx, store.NewRun{Key: key, Spec: spec}); return err })
	benchMust(tb, func() error { _, err := st.Runs().GetRun(ctx, key); return err })
	benchMust(tb, func() error { _, err := s.advance(ctx, key); return err })
	d, err := st.Actions().GetAction(ctx, key.Action("s"))
	if err != nil || len(d.Tasks) != 1 || len(d.Tasks[0].Attempts) != 1 || *d.Tasks[0].Attempts[0].WorkerID != w.ID {
		tb.Fatalf("the start did not bind %s's task to %s: %v %+v", key, w.ID, err, d.Tasks)
	}
	a := d.Tasks[0].Attempts[0]
	exit := 0
	// A noop's RUNNING and SUCCEEDED reach the api in one batch.
	benchMust(tb, func() error {
		_, err := storetest.ReportAttempts(ctx, st, w.ID, []store.BatchedReport{
			{AttemptID: a.ID, Report: store.Report{State: domain.TaskRunning}},
			{AttemptID: a.ID, Report: store.Report{State: domain.TaskSucceeded, ExitCode: &exit}}}, 1<<20)
		return err
	})
	ev, err := s.evaluate(ctx, a.ID)
	if err != nil || ev.ActionPhase != domain.PhaseSucceeded {
		tb.Fatalf("evaluate: %v %s", err, ev.ActionPhase)
	}
	if ev.Advance == nil || ev.Advance.Phase != domain.PhaseSucceeded {
		tb.Fatalf("advance: %+v", ev.Advance)
	}
}

func benchMust(tb testing.TB, f func() error) {
	tb.Helper()
	if err := f(); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkDiamondRun is BenchmarkSingleTaskRun for a diamond of noop
// steps (a → b, c → d): per wave, one pass binds the wave's tasks, one
// report batch carries them all, and the api's
// one message has them evaluated (b and c together, and their run
// advanced once).
func BenchmarkDiamondRun(b *testing.B) {
	ctx := context.Background()
	url := storetest.NewURL(b)
	client := asynq.NewClient(redistest.New(b))
	b.Cleanup(func() { client.Close() })
	log := slog.New(slog.DiscardHandler)
	statements := store.NewOperationSeconds()
	st, err := store.Open(ctx, url, store.Config{MaxOpenConns: 10, OperationSeconds: statements})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	s := New(st, queue.NewEnqueuer(client, log), log, prometheus.NewRegistry(), Config{Retry: domain.Table{0}})
	w, err := st.Workers().RegisterWorker(ctx, store.NewWorker{Name: "w", Address: "http://127.0.0.1:1", Slots: 8})
	if err != nil {
		b.Fatal(err)
	}
	spec := domain.WorkflowSpec{Mode: domain.ModeDAG, Steps: []domain.Step{{Name: "a", Plugin: domain.PluginNoop},
		{Name: "b", Plugin: domain.PluginNoop, DependsOn: []string{"a"}},
		{Name: "c", Plugin: domain.PluginNoop, DependsOn: []string{"a"}},
		{Name: "d", Plugin: domain.PluginNoop, DependsOn: []string{"b", "c"}}}}
	spec.Normalize()
	before := statementCounts(b, statements)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		diamondRun(b, st, s, w, spec, fmt.Sprintf("d%d", i))
	}
	counts := statementCounts(b, statements)
	for k, v := range before {
		counts[k] -= v
	}
	if testing.Verbose() {
		b.Logf("statements by operation over %d runs: %v", b.N, counts)
	}
	own := counts["GetRun"] + counts["GetAction"]
	b.ReportMetric(float64(counts[""]-own)/float64(b.N), "statements/run")
}

// diamondRun makes every store call and scheduler decision of diamond run
// name, wave by wave, its tasks bound to worker w.
func diamondRun(b *testing.B, st *store.Store, s *Scheduler, w store.Worker, spec domain.WorkflowSpec, name string) {
	b.Helper()
	ctx := context.Background()
	key := domain.RunKey{Project: "p", Domain: "d", Run: name}
	benchMust(b, func() error { _, _, err := st.Runs().CreateRun(ctx, store.NewRun{Key: key, Spec: spec}); return err })
	benchMust(b, func() error { _, err := s.advance(ctx, key); return err })
	for _, wave := range [][]string{{"a"}, {"b", "c"}, {"d"}} {
		var as []store.Assignment
		for _, step := range wave {
			d, err := st.Actions().GetAction(ctx, key.Action(step))
			if err != nil || len(d.Tasks) != 1 {
				b.Fatalf("tasks of %s/%s: %v (%d)", key, step, err, len(d.Tasks))
			}
			as = append(as, store.Assignment{TaskID: d.Tasks[0].Task.ID, WorkerID: w.ID})
		}
		attempts, err := st.Placement().AssignTasks(ctx, as)
		if err != nil || len(attempts) != len(wave) {
			b.Fatalf("assign %v: %v (%d)", wave, err, len(attempts))
		}
		exit := 0
		var reports []store.BatchedReport
		for _, a := range attempts {
			reports = append(reports, store.BatchedReport{AttemptID: a.ID, Report: store.Report{State: domain.TaskRunning}},
				store.BatchedReport{AttemptID: a.ID, Report: store.Report{State: domain.TaskSucceeded, ExitCode: &exit}})
		}
		benchMust(b, func() error { _, err := storetest.ReportAttempts(ctx, st, w.ID, reports, 1<<20); return err })
		// The api's one message for the attempts the batch ended:
		// task:evaluate for one, tasks:evaluate for several.
		ids := make([]int64, len(attempts))
		for i, a := range attempts {
			ids[i] = a.ID
		}
		task := queue.NewTasksEvaluateTask(ids)
		handle := s.handleEvaluations
		if task.Type() == queue.TypeTaskEvaluate {
			handle = s.handleEvaluate
		}
		benchMust(b, func() error { return handle(ctx, task) })
	}
	r, err := st.Runs().GetRun(ctx, key)
	if err != nil || r.Run.Phase != string(domain.PhaseSucceeded) {
		b.Fatalf("run %s: %v %s", key, err, r.Run.Phase)
	}
}
