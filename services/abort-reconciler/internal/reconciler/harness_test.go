package reconciler

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/executorapi"
	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/capstan-run/capstan/pkg/workerkey"
	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitFor is how long a test waits for a condition.
const waitFor = 15 * time.Second

// testConfig is a Config with millisecond delays and randomly named queues.
func testConfig() Config {
	return Config{
		Queue:                    "abort-test-" + uuid.NewString()[:13],
		SchedulerQueue:           "scheduler-test-" + uuid.NewString()[:13],
		MaxAttempts:              10,
		InitialDelay:             10 * time.Millisecond,
		MaxDelay:                 200 * time.Millisecond,
		ResyncPeriod:             time.Hour,
		CallTimeout:              2 * time.Second,
		DelayedTaskCheckInterval: 5 * time.Millisecond,
		TaskCheckInterval:        5 * time.Millisecond,
		ControlPlaneKey:          testControlPlaneKey,
	}
}

// testControlPlaneKey is testConfig's ControlPlaneKey, the api's in the
// harness: registerWorker derives each worker's credential from it.
var testControlPlaneKey = workerkey.New("test-control-plane-key-0123456789abcdef")

// registerWorker registers a worker at addr as the api does: under a new
// id, with the digest of its executor credential under key.
func (h *harness) registerWorker(addr string, slots int, key workerkey.Key) store.Worker {
	h.t.Helper()
	id := uuid.NewString()
	w, err := h.st.Workers().RegisterWorker(h.ctx, store.NewWorker{ID: id, Name: "w1", Address: addr, Slots: slots,
		CredentialSHA256: workerkey.Digest(key.Credential(id))})
	require.NoError(h.t, err)
	return w
}

// harness is one reconciler on a fresh database, its own Redis database and
// its own queue.
type harness struct {
	t    *testing.T
	st   *store.Store
	rec  *Reconciler
	cfg  Config
	enq  *queue.Enqueuer
	insp *asynq.Inspector
	ctx  context.Context
}

// newHarness builds (but does not start) a reconciler. edit may change the
// deps before New.
func newHarness(t *testing.T, cfg Config, edit func(*Deps)) *harness {
	t.Helper()
	h := &harness{t: t, st: storetest.New(t), cfg: cfg, ctx: t.Context()}
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	rdb := redistest.New(t)
	client := asynq.NewClient(rdb)
	h.insp = asynq.NewInspector(rdb)
	t.Cleanup(func() {
		h.insp.Close()
		client.Close()
	})
	h.enq = queue.NewEnqueuer(client, log)
	deps := Deps{Store: StoreOf(h.st), Redis: rdb, Log: log, Registry: prometheus.NewRegistry()}
	if edit != nil {
		edit(&deps)
	}
	rec, err := New(deps, cfg)
	require.NoError(t, err)
	t.Cleanup(rec.Stop)
	h.rec = rec
	return h
}

// start starts the reconciler.
func (h *harness) start() {
	h.t.Helper()
	require.NoError(h.t, h.rec.Start(context.Background()))
}

// push enqueues key's abort as the api does.
func (h *harness) push(key domain.ActionKey) error {
	return h.enq.Enqueue(context.Background(), queue.NewActionAbortTask(key, h.cfg.TaskMaxRetry()),
		asynq.Queue(h.cfg.Queue))
}

// pushKill enqueues attempt id's kill as the scheduler does.
func (h *harness) pushKill(id int64) error {
	return h.enq.Enqueue(context.Background(), queue.NewAttemptKillTask(id, h.cfg.TaskMaxRetry()),
		asynq.Queue(h.cfg.Queue))
}

// waitKillOutcome waits until attempt id's kill is cleared and returns the row.
func (h *harness) waitKillOutcome(key domain.ActionKey, id int64) store.Attempt {
	h.t.Helper()
	var a store.Attempt
	require.Eventually(h.t, func() bool {
		a = h.attempt(key, id)
		return a.KillOutcome != nil
	}, waitFor, 2*time.Millisecond, "kill of attempt %d never cleared", id)
	require.Nil(h.t, a.KillRequestedAt)
	// The handler counts its metrics after the clear: wait until it has
	// returned, so a test reads settled counters.
	h.waitQueueIdle()
	return a
}

// seeded is a run whose step "s1" has running attempts, with an abort
// recorded on a0.
type seeded struct {
	key      domain.ActionKey
	attempts []int64
	workerID string
}

// seedAbort creates a one-step run with replicas tasks, registers a worker
// at addr, assigns every task to it, reports them RUNNING, and records an
// abort of a0 with reason "user asked" (the api's part).
func (h *harness) seedAbort(addr string, replicas int) seeded {
	h.t.Helper()
	return h.seedAbortCause(addr, replicas, "")
}

// seedAbortCause is seedAbort with the abort's cause.
func (h *harness) seedAbortCause(addr string, replicas int, cause string) seeded {
	h.t.Helper()
	s := h.seedRunning(addr, replicas)
	_, err := h.st.Aborts().AbortAction(h.ctx, s.key, "user asked", cause)
	require.NoError(h.t, err)
	return s
}

// seedKill seeds one running attempt on a worker at addr and requests its
// kill with cause (the scheduler's part); it returns the attempt's id.
func (h *harness) seedKill(addr, cause string) seeded {
	h.t.Helper()
	s := h.seedRunning(addr, 1)
	require.NoError(h.t, h.st.Aborts().RequestAttemptKill(h.ctx, s.attempts[0], cause))
	return s
}

// seedRunning creates a one-step run with replicas tasks, registers a worker
// at addr, assigns every task to it and reports them RUNNING.
func (h *harness) seedRunning(addr string, replicas int) seeded {
	h.t.Helper()
	return h.seedRunningOn(h.registerWorker(addr, replicas, testControlPlaneKey), replicas)
}

// seedRunningOn is seedRunning on worker w.
func (h *harness) seedRunningOn(w store.Worker, replicas int) seeded {
	h.t.Helper()
	t, ctx, st := h.t, h.ctx, h.st
	rk := domain.RunKey{Project: "proj", Domain: "dev", Run: "r-" + uuid.NewString()[:8]}
	spec := domain.WorkflowSpec{Steps: []domain.Step{{Name: "s1", Command: "sleep 600", Replicas: &replicas}}}
	spec.Normalize()
	_, _, err := st.Runs().CreateRun(ctx, store.NewRun{Key: rk, Spec: spec})
	require.NoError(t, err)
	storetest.StartSteps(t, st, rk)
	step, err := st.Actions().GetAction(ctx, rk.Action("s1"))
	require.NoError(t, err)
	require.Len(t, step.Tasks, replicas)
	s := seeded{key: rk.Action(domain.RootActionName), workerID: w.ID}
	for _, task := range step.Tasks {
		at, ok, err := storetest.AssignTask(ctx, st, task.Task.ID, w.ID)
		require.NoError(t, err)
		require.True(t, ok)
		_, err = storetest.ReportAttempt(ctx, st, at.ID, store.Report{State: domain.TaskRunning})
		require.NoError(t, err)
		s.attempts = append(s.attempts, at.ID)
	}
	return s
}

// action reads the aborted action's row.
func (h *harness) action(key domain.ActionKey) store.Action {
	h.t.Helper()
	d, err := h.st.Actions().GetAction(h.ctx, key)
	require.NoError(h.t, err)
	return d.Action
}

// waitOutcome waits until key's abort is cleared and returns the row.
func (h *harness) waitOutcome(key domain.ActionKey) store.Action {
	h.t.Helper()
	var a store.Action
	require.Eventually(h.t, func() bool {
		a = h.action(key)
		return a.AbortOutcome != nil
	}, waitFor, 2*time.Millisecond, "abort of %s never cleared", key)
	require.Nil(h.t, a.AbortRequestedAt)
	// The handler counts its metrics after the clear: wait until it has
	// returned, so a test reads settled counters.
	h.waitQueueIdle()
	return a
}

// attempt reads one attempt of the run.
func (h *harness) attempt(key domain.ActionKey, id int64) store.Attempt {
	h.t.Helper()
	run, err := h.st.Runs().GetRun(h.ctx, key.RunKey)
	require.NoError(h.t, err)
	for _, a := range run.Actions {
		for _, task := range a.Tasks {
			for _, at := range task.Attempts {
				if at.ID == id {
					return at
				}
			}
		}
	}
	h.t.Fatalf("attempt %d not found", id)
	return store.Attempt{}
}

// waitQueueIdle waits until the test's queue holds no task in any state.
func (h *harness) waitQueueIdle() {
	h.t.Helper()
	require.Eventually(h.t, func() bool {
		info, err := h.insp.GetQueueInfo(h.cfg.Queue)
		return err == nil && info.Size == 0 && info.Active == 0
	}, waitFor, 2*time.Millisecond, "queue %s never drained", h.cfg.Queue)
}

// fakeCall is one call the fake executor received.
type fakeCall struct {
	At        time.Time
	AttemptID int64
	Reason    string
	Cause     string
	// Auth is the call's Authorization header.
	Auth string
}

// fakeExecutor stands in for the executor API (outside this service): it
// answers each POST /v1/attempts/{id}/abort with the status respond gives
// for that attempt's n-th call (n from 1), and records every call.
type fakeExecutor struct {
	srv     *httptest.Server
	respond func(attemptID int64, n int) int
	// detail500 is the problem detail of a 500 answer.
	detail500 string
	// latency is how long each kill takes.
	latency time.Duration
	// onCall, when set, sees each call's attempt as it arrives.
	onCall func(attemptID int64)

	mu          sync.Mutex
	calls       []fakeCall
	perAttempt  map[int64]int
	inFlight    atomic.Int32
	maxInFlight atomic.Int32
}

func newFakeExecutor(t *testing.T, respond func(attemptID int64, n int) int) *fakeExecutor {
	f := &fakeExecutor{respond: respond, perAttempt: map[int64]int{}, detail500: "kill failed: permission denied"}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/attempts/{id}/abort", f.serve)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeExecutor) serve(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	n := f.inFlight.Add(1)
	defer f.inFlight.Add(-1) // before the response is flushed
	for {
		m := f.maxInFlight.Load()
		if n <= m || f.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		http.Error(w, "bad id", http.StatusBadRequest)
		return
	}
	var body executorapi.AbortAttemptJSONBody
	_ = json.NewDecoder(r.Body).Decode(&body)
	if f.onCall != nil {
		f.onCall(id)
	}
	if f.latency > 0 {
		select {
		case <-time.After(f.latency):
		case <-r.Context().Done():
		}
	}
	f.mu.Lock()
	f.perAttempt[id]++
	status := f.respond(id, f.perAttempt[id])
	f.calls = append(f.calls, fakeCall{At: at, AttemptID: id, Reason: deref(body.Reason), Cause: deref(body.Cause),
		Auth: r.Header.Get("Authorization")})
	f.mu.Unlock()
	switch status {
	case http.StatusOK:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":%d,"killed":true}`, id)
	default: // as the executor answers (its server's abort.go)
		detail, code := "no live attempt "+strconv.FormatInt(id, 10), problem.CodeAttemptNotFound
		if status != http.StatusNotFound {
			detail, code = f.detail500, problem.CodeInternal
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(executorapi.Problem{Type: "about:blank", Title: http.StatusText(status),
			Status: status, Code: code, Detail: &detail})
	}
}

// URL is the executor's base URL, the worker's address.
func (f *fakeExecutor) URL() string { return f.srv.URL }

// Calls returns a copy of the calls so far.
func (f *fakeExecutor) Calls() []fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeCall(nil), f.calls...)
}

// callsTo counts the calls for one attempt.
func (f *fakeExecutor) callsTo(id int64) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.perAttempt[id]
}

// failThenOK answers 500 to the first n calls of each attempt, then 200.
func failThenOK(n int) func(int64, int) int {
	return func(_ int64, call int) int {
		if call <= n {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	}
}

// always answers status to every call.
func always(status int) func(int64, int) int {
	return func(int64, int) int { return status }
}
