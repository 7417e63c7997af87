package agent_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/services/executor/internal/agent"
	"github.com/capstan-run/capstan/services/executor/internal/supervisor"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestOutputIsShippedBeforeTheFinalReport(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	f := run(t, fake, agent.Config{})
	fake.addAttempt(shell(9, f.agent.WorkerID(), `echo one; echo two >&2; printf 'no newline'`))
	f.enqueue(t, 9)
	f.awaitState(t, 9, api.TaskStateSUCCEEDED)
	logs, after := fake.logsOf(9)
	require.Equal(t, map[string]string{"stdout": "one\nno newline", "stderr": "two\n"}, logs)
	require.NotEmpty(t, after)
	require.Less(t, after[len(after)-1], len(fake.reportsOf(9)), "the last append arrived before the final report")
}

// TestUnregisteredClientIsRefused: before a registration the client has no
// bound token, and the api refuses its calls (401: rejected, not retried).
func TestUnregisteredClientIsRefused(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	t.Cleanup(fake.Close)
	c, err := agent.NewClient(fake.URL, agent.ClientConfig{Token: fakeWorkerToken}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	_, err = c.Attempt(context.Background(), uuid.New(), 1)
	require.ErrorIs(t, err, agent.ErrRejected)
	require.ErrorContains(t, err, "401")
}

func TestAppendLogsToAGoneAttemptIsRejected(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	t.Cleanup(fake.Close)
	c, err := agent.NewClient(fake.URL, agent.ClientConfig{Token: fakeWorkerToken}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	slots := 1
	_, err = c.Register(context.Background(), workerapi.RegisterWorkerRequest{Name: "w", Address: "http://127.0.0.1:1", Slots: &slots})
	require.NoError(t, err)
	err = c.AppendLogs(context.Background(), 404, []workerapi.LogChunk{{Stream: workerapi.Stdout, Data: "x"}})
	require.ErrorIs(t, err, supervisor.ErrLogsRejected)
	require.ErrorIs(t, err, agent.ErrRejected)
}
