package scheduler

import (
	"context"
	"strings"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
)

// A handler's permanent failure says what it was doing and on what, and
// still matches asynq.SkipRetry (asynq archives the task) and the store's
// ErrNotFound beneath it.
func TestHandlerErrorsNameTheOperation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRunFixture(t, domain.ARCTable)
	mux := asynq.NewServeMux()
	f.s.Register(mux)
	missing := domain.RunKey{Project: "p", Domain: "d", Run: "missing"}
	for name, tc := range map[string]struct {
		task *asynq.Task
		want string
	}{
		"run:advance":   {queue.NewRunAdvanceTask(missing), "advance run p/d/missing: lock run: not found"},
		"task:evaluate": {queue.NewTaskEvaluateTask(1 << 40), "evaluate attempt 1099511627776: read attempt: not found"},
	} {
		err := mux.ProcessTask(ctx, tc.task)
		require.ErrorIs(t, err, asynq.SkipRetry, name)
		require.ErrorIs(t, err, store.ErrNotFound, name)
		require.ErrorContains(t, err, tc.want, name)
	}
}

// A leader pass that fails names the step that failed, and its cause stays
// comparable with errors.Is: here the context, ended before the pass.
func TestPassErrorsNameTheStep(t *testing.T) {
	t.Parallel()
	f := newRunFixture(t, domain.ARCTable)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for name, tc := range map[string]struct {
		pass func() error
		want string
	}{
		"scheduling": {func() error { _, err := f.s.runOnce(ctx); return err }, "expiry pass: read expiries due: "},
		"placement":  {func() error { _, err := f.s.placeOnce(ctx); return err }, "take the placement lock: "},
		"liveness":   {func() error { _, err := f.s.livenessOnce(ctx); return err }, "mark silent workers dead: "},
		"resync":     {func() error { _, err := f.s.resyncOnce(ctx); return err }, "list unfinished runs: "},
	} {
		err := tc.pass()
		require.ErrorIs(t, err, context.Canceled, name)
		require.True(t, strings.HasPrefix(err.Error(), tc.want), "%s: %v", name, err)
	}
}
