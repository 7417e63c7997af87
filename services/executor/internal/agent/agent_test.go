package agent_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/services/executor/internal/agent"
	"github.com/capstan-run/capstan/services/executor/internal/proctest"
	"github.com/capstan-run/capstan/services/executor/internal/supervisor"
	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { proctest.Main(m) }

const waitFor, tick = 15 * time.Second, 5 * time.Millisecond

type fixture struct {
	api    *fakeAPI
	client *agent.Client
	agent  *agent.Agent
	sup    *supervisor.Supervisor
	queue  *asynq.Client
	insp   *asynq.Inspector
	rdb    asynq.RedisClientOpt
	// data is the supervisor's data directory.
	data string
	// logs holds what the agent logged at warn and above.
	logs *logBuffer
}

// logBuffer is a log destination that tests read while the agent writes.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// sign signs spec for worker as the scheduler does: under the worker's
// dispatch key, which the fake api's registration answered.
func sign(t *testing.T, worker string, spec workerapi.AttemptSpec) queue.SignedSpec {
	t.Helper()
	s, err := queue.SignSpec(fakeControlPlaneKey.DispatchKey(worker), spec)
	require.NoError(t, err)
	return s
}

// run starts an executor's agent and supervisor against the fake api and
// the test's own database of the real Redis, and waits for its registration.
func run(t *testing.T, fake *fakeAPI, cfg agent.Config) *fixture {
	t.Helper()
	return runIn(t, fake, cfg, t.TempDir())
}

// runIn is run with the data directory data.
func runIn(t *testing.T, fake *fakeAPI, cfg agent.Config, data string) *fixture {
	t.Helper()
	rdb := redistest.New(t)
	logs := &logBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	client, err := agent.NewClient(fake.URL, agent.ClientConfig{ReportBackoff: 10 * time.Millisecond, Token: fakeWorkerToken}, log)
	require.NoError(t, err)
	sup, err := supervisor.New(client, supervisor.Config{DataDir: data, KillGrace: 500 * time.Millisecond,
		Slots: cfg.Slots}, log)
	require.NoError(t, err)
	cfg.Name, cfg.Address = "test-executor", "http://127.0.0.1:1"
	cfg.HeartbeatInterval = cmp.Or(cfg.HeartbeatInterval, 20*time.Millisecond)
	cfg.PollInterval, cfg.RegisterBackoff = 10*time.Millisecond, 10*time.Millisecond
	ag, err := agent.New(client, sup, rdb, cfg, log)
	require.NoError(t, err)

	f := &fixture{api: fake, client: client, agent: ag, sup: sup, queue: asynq.NewClient(rdb), insp: asynq.NewInspector(rdb),
		rdb: rdb, data: data, logs: logs}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ag.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, sup.Close(context.Background()))
		require.NoError(t, f.queue.Close())
		require.NoError(t, f.insp.Close())
		fake.Close()
	})
	require.Eventually(t, func() bool { return ag.WorkerID() != "" }, waitFor, tick, "no registration")
	return f
}

func shell(id int64, worker, command string) workerapi.AttemptSpec {
	return workerapi.AttemptSpec{Id: id, Number: 1, Project: "proj", Domain: "dev", Run: "run-1", Action: "step",
		Replicas: 1, Plugin: "shell", Command: command, State: api.TaskStateASSIGNED, WorkerId: &worker, Proceed: true}
}

// enqueue dispatches attempt:run as the scheduler does: queued, and
// announced on the worker's wake list.
func (f *fixture) enqueue(t *testing.T, attemptID int64) {
	t.Helper()
	enq := queue.NewEnqueuer(f.queue, slog.New(slog.DiscardHandler))
	enq.Wake = f.redis(t)
	require.NoError(t, enq.Enqueue(context.Background(), queue.NewAttemptRunTask(f.agent.WorkerID(), attemptID, nil)))
}

// awaitState waits for a report of st about attempt id and returns it.
func (f *fixture) awaitState(t *testing.T, id int64, st api.TaskState) workerapi.AttemptReport {
	t.Helper()
	var rep workerapi.AttemptReport
	require.Eventually(t, func() bool {
		for _, r := range f.api.reportsOf(id) {
			if r.State == st {
				rep = r
				return true
			}
		}
		return false
	}, waitFor, tick, "no %s report for attempt %d; got %v", st, id, f.api.states(id))
	return rep
}

// awaitHandled waits until the attempt:run task of id left the queue and
// its handler read the attempt: asynq deletes a completed task that has no
// retention, and the wake list's consumer deletes the task it claims before
// its handler runs.
func (f *fixture) awaitHandled(t *testing.T, worker string, id int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, err := f.insp.GetTaskInfo(queue.WorkerQueue(worker), fmt.Sprintf("attempt:%d", id))
		return (errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound)) && f.api.fetched(id)
	}, waitFor, tick)
}

func TestRunsAnAttemptAndReportsInOrder(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	idFile := filepath.Join(t.TempDir(), "worker-id")
	f := run(t, fake, agent.Config{IDFile: idFile})
	worker := f.agent.WorkerID()
	b, err := os.ReadFile(idFile)
	require.NoError(t, err)
	require.Equal(t, worker+"\n", string(b))

	fake.addAttempt(shell(7, worker, `echo "hello from $CAPSTAN_ATTEMPT_ID"; echo warn >&2`))
	f.enqueue(t, 7)
	final := f.awaitState(t, 7, api.TaskStateSUCCEEDED)

	reps := fake.reportsOf(7)
	require.Equal(t, []api.TaskState{api.TaskStateBUILDING, api.TaskStateRUNNING, api.TaskStateSUCCEEDED}, fake.states(7))
	require.NotNil(t, reps[1].Pid)
	require.Positive(t, *reps[1].Pid)
	require.Equal(t, "hello from 7\n", *final.Stdout)
	require.Equal(t, "warn\n", *final.Stderr)
	require.Equal(t, 0, *final.ExitCode)
	require.False(t, *final.Truncated)
	require.Eventually(t, func() bool { return !f.sup.Holds(7) }, waitFor, tick)
}

func TestDropsAttemptsThatMustNotRun(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	f := run(t, fake, agent.Config{})
	worker := f.agent.WorkerID()
	notProceed := shell(8, worker, "touch ran")
	notProceed.Proceed, notProceed.State = false, api.TaskStateKILLED
	fake.addAttempt(notProceed)
	fake.addAttempt(shell(9, "8d3c6a59-1f0e-4c38-9f0a-8a2b8e6f0c11", "touch ran")) // another worker's
	// attempt 10 is unknown to the control plane

	for _, id := range []int64{8, 9, 10} {
		f.enqueue(t, id)
	}
	for _, id := range []int64{8, 9, 10} {
		f.awaitHandled(t, worker, id)
		require.True(t, fake.fetched(id))
		require.Empty(t, fake.reportsOf(id), "attempt %d", id)
		require.False(t, f.sup.Holds(id))
	}
}

// One attempts:run message starts each of its attempts and drops the one
// that must not run; with one slot, the attempt left out is retried with
// the message until the slot frees, and the one that held it is not
// started again.
func TestRunsTheAttemptsOfOneMessage(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	f := run(t, fake, agent.Config{Slots: 1, FullRetryDelay: 20 * time.Millisecond})
	worker := f.agent.WorkerID()
	enq := queue.NewEnqueuer(f.queue, slog.New(slog.DiscardHandler))
	enq.Wake = f.redis(t)
	ctx := context.Background()

	notProceed := shell(22, worker, "touch ran")
	notProceed.Proceed, notProceed.State = false, api.TaskStateKILLED
	fake.addAttempt(shell(20, worker, "echo twenty"))
	fake.addAttempt(notProceed)
	require.NoError(t, enq.Enqueue(ctx, queue.NewAttemptsRunTask(worker, []int64{22, 20}, nil)))
	f.awaitState(t, 20, api.TaskStateSUCCEEDED)
	require.True(t, fake.fetched(22))
	require.Empty(t, fake.reportsOf(22))
	require.Eventually(t, func() bool { return !f.sup.Holds(20) }, waitFor, tick)

	fake.addAttempt(shell(23, worker, "sleep 600"))
	fake.addAttempt(shell(24, worker, "sleep 600"))
	require.NoError(t, enq.Enqueue(ctx, queue.NewAttemptsRunTask(worker, []int64{23, 24}, nil)))
	var held, waiting int64
	require.Eventually(t, func() bool {
		held, waiting = 23, 24
		if f.sup.Holds(24) {
			held, waiting = 24, 23
		}
		return f.sup.Holds(held) && fake.fetched(waiting)
	}, waitFor, tick)
	f.awaitState(t, held, api.TaskStateRUNNING)
	killed, err := f.sup.Abort(ctx, held, workerapi.Preempted, "")
	require.NoError(t, err)
	require.True(t, killed)
	f.awaitState(t, waiting, api.TaskStateRUNNING)
	require.Eventually(t, func() bool { // the message's last retry returned
		q, err := f.insp.GetQueueInfo(queue.WorkerQueue(worker))
		return err == nil && q.Size == 0 && q.Active == 0
	}, waitFor, tick)
	_, err = f.sup.Abort(ctx, waiting, workerapi.Preempted, "")
	require.NoError(t, err)
	running := 0
	for _, st := range fake.states(held) {
		if st == api.TaskStateRUNNING {
			running++
		}
	}
	require.Equal(t, 1, running, "attempt %d started once: %v", held, fake.states(held))
}

func TestHeartbeatListsAttemptsAndStopsWhatItIsTold(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	f := run(t, fake, agent.Config{})
	fake.addAttempt(shell(11, f.agent.WorkerID(), "sleep 600"))
	f.enqueue(t, 11)
	pid := *f.awaitState(t, 11, api.TaskStateRUNNING).Pid
	require.Eventually(t, func() bool { return fake.sawBeatWith(11, api.TaskStateRUNNING) }, waitFor, tick)

	fake.stopOnNextBeat(11)
	killed := f.awaitState(t, 11, api.TaskStateKILLED)
	require.Equal(t, workerapi.Aborted, *killed.Cause)
	require.True(t, proctest.Gone(pid))
}

func TestHeartbeat404ReRegistersAndConsumesTheNewQueue(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	f := run(t, fake, agent.Config{})
	first := f.agent.WorkerID()
	fake.addAttempt(shell(12, first, "sleep 600"))
	f.enqueue(t, 12)
	pid := *f.awaitState(t, 12, api.TaskStateRUNNING).Pid

	require.Equal(t, fakeControlPlaneKey.Credential(first), f.client.ExecutorCredential())
	fake.forget(first)
	killed := f.awaitState(t, 12, api.TaskStateWORKERFAILED)
	require.Equal(t, workerapi.WorkerLost, *killed.Cause)
	require.True(t, proctest.Gone(pid))
	require.Eventually(t, func() bool { return len(fake.registered()) == 2 }, waitFor, tick)
	require.Eventually(t, func() bool { return f.agent.WorkerID() == fake.registered()[1] }, waitFor, tick)
	second := f.agent.WorkerID()
	require.NotEqual(t, first, second)
	require.Equal(t, fakeControlPlaneKey.Credential(second), f.client.ExecutorCredential(),
		"a new registration rotates the executor credential")
	require.Equal(t, fakeControlPlaneKey.DispatchKey(second), f.client.DispatchKey(uuid.MustParse(second)))
	require.Nil(t, f.client.DispatchKey(uuid.MustParse(first)), "the old registration's key verifies nothing")

	fake.addAttempt(shell(13, second, "echo again"))
	f.enqueue(t, 13)
	require.Equal(t, "again\n", *f.awaitState(t, 13, api.TaskStateSUCCEEDED).Stdout)
}

func TestRetriesRegistrationAndReportsThroughAnOutage(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	fake.failRegistrations, fake.failReports = 3, 3
	f := run(t, fake, agent.Config{})
	require.Len(t, fake.registered(), 1)
	fake.addAttempt(shell(14, f.agent.WorkerID(), "echo ok"))
	f.enqueue(t, 14)
	f.awaitState(t, 14, api.TaskStateSUCCEEDED)
	require.Equal(t, []api.TaskState{api.TaskStateBUILDING, api.TaskStateRUNNING, api.TaskStateSUCCEEDED}, fake.states(14))
}

func TestFullSlotsDelayAnAttemptUntilOneFrees(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	f := run(t, fake, agent.Config{Slots: 1})
	worker := f.agent.WorkerID()
	fake.addAttempt(shell(15, worker, "sleep 600"))
	fake.addAttempt(shell(16, worker, "echo second"))
	f.enqueue(t, 15)
	f.awaitState(t, 15, api.TaskStateRUNNING)
	f.enqueue(t, 16)
	require.Eventually(t, func() bool { return fake.fetched(16) }, waitFor, tick)
	require.Empty(t, fake.reportsOf(16), "no slot: attempt 16 waits")

	killed, err := f.sup.Abort(context.Background(), 15, workerapi.Preempted, "")
	require.NoError(t, err)
	require.True(t, killed)
	f.awaitState(t, 16, api.TaskStateSUCCEEDED)
	require.True(t, slices.Contains(fake.states(15), api.TaskStatePREEMPTED))
}

func TestRegistersItsResources(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	cpu, mem := int64(1500), int64(1<<30)
	run(t, fake, agent.Config{Resources: api.Resources{CpuMillis: &cpu, MemoryBytes: &mem}})
	regs := fake.registrations()
	require.Len(t, regs, 1)
	require.Equal(t, &api.Resources{CpuMillis: &cpu, MemoryBytes: &mem}, regs[0].Resources)
}

// TestAdvertisesItsPlugins: the plugins the executor runs are worker labels
// plugin.<name>=true, merged with the configured labels; a plugin label
// says what the executor really runs, so it wins over a configured one.
func TestAdvertisesItsPlugins(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	run(t, fake, agent.Config{Labels: map[string]string{"zone": "a", "plugin.shell": "false"},
		Plugins: []string{"http", "noop", "shell"}})
	regs := fake.registrations()
	require.Len(t, regs, 1)
	require.Equal(t, &map[string]string{"zone": "a", "plugin.shell": "true", "plugin.http": "true", "plugin.noop": "true"},
		regs[0].Labels)
}

// TestDrainKeepsBeatingAndDeregisters: a draining worker says so at once,
// keeps heartbeating (it must not be declared dead while its attempts
// finish), lets them finish, then deregisters.
func TestDrainKeepsBeatingAndDeregisters(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	f := run(t, fake, agent.Config{HeartbeatInterval: time.Hour}) // only Drain triggers a beat
	worker := f.agent.WorkerID()
	fake.addAttempt(shell(21, worker, "sleep 0.2; echo done"))
	f.enqueue(t, 21)
	f.awaitState(t, 21, api.TaskStateRUNNING)

	f.agent.Drain()
	require.Eventually(t, fake.sawDrainingBeat, waitFor, tick, "the drain is announced at once")
	require.Eventually(t, func() bool { return fake.sawBeatWith(21, api.TaskStateRUNNING) }, waitFor, tick)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, f.sup.Drain(ctx), "the running attempt finishes")
	require.Equal(t, "done\n", *f.awaitState(t, 21, api.TaskStateSUCCEEDED).Stdout)
	require.ErrorIs(t, f.sup.Start(shell(22, worker, "true")), supervisor.ErrClosed, "no new attempt once draining")

	require.NoError(t, f.agent.Deregister(ctx))
	require.Equal(t, []string{worker}, fake.deregistered())
}

// TestHeartbeat401ReRegisters: a worker whose token is refused (its record
// and token were deleted) registers again with the bootstrap token.
func TestHeartbeat401ReRegisters(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	f := run(t, fake, agent.Config{})
	first := f.agent.WorkerID()
	fake.revoke(first)
	require.Eventually(t, func() bool { return len(fake.registered()) == 2 }, waitFor, tick)
	require.Eventually(t, func() bool { return f.agent.WorkerID() == fake.registered()[1] }, waitFor, tick)
}

// TestDrainingWorkerDoesNotRegisterAgain: forgotten while draining, the
// worker kills what it holds but takes no new identity.
func TestDrainingWorkerDoesNotRegisterAgain(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	f := run(t, fake, agent.Config{})
	first := f.agent.WorkerID()
	fake.addAttempt(shell(23, first, "sleep 600"))
	f.enqueue(t, 23)
	pid := *f.awaitState(t, 23, api.TaskStateRUNNING).Pid

	f.agent.Drain()
	fake.forget(first)
	require.Equal(t, workerapi.WorkerLost, *f.awaitState(t, 23, api.TaskStateWORKERFAILED).Cause)
	require.True(t, proctest.Gone(pid))
	require.Never(t, func() bool { return len(fake.registered()) > 1 }, 200*time.Millisecond, tick)
}

// TestRegistrationWithoutSecretsIsRejected: an answer without an executor
// credential and a dispatch key is no registration: the executor could be
// aborted by no one.
func TestRegistrationWithoutSecretsIsRejected(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	t.Cleanup(fake.Close)
	fake.mu.Lock()
	fake.withoutSecrets = true
	fake.mu.Unlock()
	client, err := agent.NewClient(fake.URL, agent.ClientConfig{Token: fakeWorkerToken}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	slots := 1
	_, err = client.Register(context.Background(), workerapi.RegisterWorkerRequest{Name: "w", Address: "http://127.0.0.1:1",
		Slots: &slots})
	require.ErrorIs(t, err, agent.ErrRejected)
	require.ErrorContains(t, err, "no executor credential")
	require.Empty(t, client.ExecutorCredential())
}
