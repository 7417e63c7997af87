package agent_test

import (
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/services/executor/internal/agent"
	"github.com/stretchr/testify/require"
)

// Reports made while a batch is in flight travel together in the next one,
// each attempt's in order.
func TestReportsTravelInBatches(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	fake.batchLatency = 100 * time.Millisecond
	f := run(t, fake, agent.Config{Slots: 10})
	worker := f.agent.WorkerID()
	for id := int64(31); id <= 40; id++ {
		fake.addAttempt(shell(id, worker, "true"))
		f.enqueue(t, id)
	}
	for id := int64(31); id <= 40; id++ {
		f.awaitState(t, id, api.TaskStateSUCCEEDED)
		require.Equal(t, []api.TaskState{api.TaskStateBUILDING, api.TaskStateRUNNING, api.TaskStateSUCCEEDED},
			fake.states(id), "attempt %d", id)
	}
	sizes, total := fake.batchSizes(), 0
	for _, n := range sizes {
		total += n
	}
	require.Equal(t, 30, total, "every report once: %v", sizes)
	require.Less(t, len(sizes), 30, "fewer requests than reports: %v", sizes)
}

// A heartbeat due while output waits for a batch rides along with it
// instead of making a request of its own; what it lists and the stops it is
// answered work as a heartbeat's alone.
func TestHeartbeatRidesAlongWithABatch(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	fake.batchLatency = 50 * time.Millisecond
	f := run(t, fake, agent.Config{Slots: 4})
	for id := int64(51); id <= 54; id++ {
		fake.addAttempt(shell(id, f.agent.WorkerID(), "while :; do echo tick; sleep 0.005; done"))
		f.enqueue(t, id)
	}
	for id := int64(51); id <= 54; id++ {
		f.awaitState(t, id, api.TaskStateRUNNING)
	}
	require.Eventually(t, func() bool { return fake.ridingBeats() >= 3 }, waitFor, tick,
		"heartbeats every 20ms; four attempts' output waits while a batch is in flight for 50ms")
	require.True(t, fake.sawBeatWith(51, api.TaskStateRUNNING))

	fake.stopOnNextBeat(51)
	killed := f.awaitState(t, 51, api.TaskStateKILLED)
	require.Equal(t, workerapi.Aborted, *killed.Cause)
}

// A heartbeat due while a batch is held in the api does not wait behind
// it: it waits a moment for the next batch to leave, then goes alone, so a
// slow batch never holds a live worker's heartbeats past its grace.
func TestHeartbeatDoesNotWaitBehindAHeldBatch(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	f := run(t, fake, agent.Config{Slots: 2})
	for id := int64(71); id <= 72; id++ {
		fake.addAttempt(shell(id, f.agent.WorkerID(), "while :; do echo tick; sleep 0.005; done"))
		f.enqueue(t, id)
	}
	for id := int64(71); id <= 72; id++ {
		f.awaitState(t, id, api.TaskStateRUNNING)
	}
	release := fake.holdBatches()
	defer release()
	require.Eventually(t, func() bool { return fake.heldBatches() > 0 }, waitFor, tick, "the output's batch is held")
	alone := fake.aloneBeats()
	require.Eventually(t, func() bool { return fake.aloneBeats() >= alone+5 }, waitFor, tick,
		"heartbeats every 20ms go alone while the output waits behind the held batch")
	release()
	fake.stopOnNextBeat(71, 72)
	for id := int64(71); id <= 72; id++ {
		f.awaitState(t, id, api.TaskStateKILLED)
	}
}

// A noop attempt's RUNNING and final reports reach the api in one batch,
// in order, even on an idle executor, whose other reports go at once.
func TestNoopReportsInOneBatch(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	f := run(t, fake, agent.Config{Slots: 2})
	noop := shell(61, f.agent.WorkerID(), "")
	noop.Plugin = "noop"
	fake.addAttempt(noop)
	f.enqueue(t, 61)
	f.awaitState(t, 61, api.TaskStateSUCCEEDED)
	require.Equal(t, []api.TaskState{api.TaskStateRUNNING, api.TaskStateSUCCEEDED}, fake.states(61))
	require.Equal(t, []int{2}, fake.batchSizes())
}

// Reads of the attempts an executor was given while a read is in flight
// travel together in the next one: each attempt is read once, in fewer
// requests than attempts.
func TestAttemptReadsTravelTogether(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	fake.readLatency = 100 * time.Millisecond
	f := run(t, fake, agent.Config{Slots: 10})
	worker := f.agent.WorkerID()
	for id := int64(61); id <= 70; id++ {
		fake.addAttempt(shell(id, worker, "true"))
		f.enqueue(t, id)
	}
	for id := int64(61); id <= 70; id++ {
		f.awaitState(t, id, api.TaskStateSUCCEEDED)
		require.Equal(t, 1, fake.reads(id), "attempt %d read once", id)
	}
	sizes, total := fake.readBatches(), 0
	for _, n := range sizes {
		total += n
	}
	require.Equal(t, 10, total, "every attempt read once: %v", sizes)
	require.Less(t, len(sizes), 10, "fewer requests than attempts: %v", sizes)
}
