package supervisor_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/services/executor/internal/plugin"
	"github.com/capstan-run/capstan/services/executor/internal/proctest"
	"github.com/capstan-run/capstan/services/executor/internal/supervisor"
	"github.com/stretchr/testify/require"
)

// lossyShell is the real shell plugin whose observation of a running
// process fails (the platform lost it: a system failure, not the user's
// code). It records its calls in order, with whether the attempt's plugin
// state was set, and keeps the Task it was given.
type lossyShell struct {
	plugin.Shell
	mu    sync.Mutex
	calls []string
	task  *plugin.Task
}

func (l *lossyShell) record(call string, t *plugin.Task) {
	l.mu.Lock()
	defer l.mu.Unlock()
	state := "no state"
	if t.State != nil {
		state = "state"
	}
	l.calls = append(l.calls, call+" with "+state)
	l.task = t
}

func (l *lossyShell) Handle(ctx context.Context, t *plugin.Task) (plugin.Transition, error) {
	l.record("handle", t)
	if t.State != nil {
		return plugin.Transition{}, errors.New("lost track of the process")
	}
	return l.Shell.Handle(ctx, t)
}

func (l *lossyShell) Abort(ctx context.Context, t *plugin.Task) error {
	l.record("abort", t)
	return l.Shell.Abort(ctx, t)
}

func (l *lossyShell) Finalize(ctx context.Context, t *plugin.Task) error {
	l.record("finalize", t)
	return l.Shell.Finalize(ctx, t)
}

// Flyte's executor: "If a system error occurs, the reconciler calls
// resetPluginResource, which invokes the plugin's Abort method and clears
// the PluginState to ensure the next attempt starts fresh." The process the
// attempt started is killed by the plugin's own Abort, before Finalize, and
// the plugin's state is nil once the attempt is reported FAILED with cause
// system.
func TestSystemFailureResetAbortsThePluginAndClearsItsState(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	lossy := &lossyShell{}
	s := newSupervisor(t, rec, supervisor.Config{Plugins: plugin.NewRegistry(map[string]plugin.Plugin{"shell": lossy})})
	require.NoError(t, s.Start(spec(12, "sleep 600")))
	pid := *rec.await(t, 12, api.TaskStateRUNNING).Pid
	final := rec.await(t, 12, api.TaskStateFAILED)
	require.Equal(t, workerapi.System, *final.Cause)
	require.Equal(t, plugin.CodeSystemError, *final.Code)
	require.True(t, proctest.Gone(pid), "the plugin's Abort killed the process")
	lossy.mu.Lock()
	defer lossy.mu.Unlock()
	require.Equal(t, []string{"handle with no state", "handle with state", "abort with state", "finalize with state"},
		lossy.calls, "Abort (resetPluginResource) first, then Finalize")
	require.Nil(t, lossy.task.State, "the plugin's state is cleared")
}
