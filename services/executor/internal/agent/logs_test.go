package agent_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/services/executor/internal/agent"
	"github.com/capstan-run/capstan/services/executor/internal/supervisor"
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

func TestAppendLogsToAGoneAttemptIsRejected(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	t.Cleanup(fake.Close)
	c, err := agent.NewClient(fake.URL, agent.ClientConfig{Token: fakeWorkerToken}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	err = c.AppendLogs(context.Background(), 404, []api.LogChunk{{Stream: api.Stdout, Data: "x"}})
	require.ErrorIs(t, err, supervisor.ErrLogsRejected)
	require.ErrorIs(t, err, agent.ErrRejected)
}
