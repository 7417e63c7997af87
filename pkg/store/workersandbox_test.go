package store_test

import (
	"context"
	"testing"

	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

// TestWorkerSandboxAsRegistered: a worker lists the sandbox it registered
// with; one registered without is "none".
func TestWorkerSandboxAsRegistered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	_, err := st.Workers().RegisterWorker(ctx, store.NewWorker{Name: "boxed", Address: "http://127.0.0.1:1", Slots: 1,
		Sandbox: "uid+pidns+netns+rlimit"})
	require.NoError(t, err)
	_, err = st.Workers().RegisterWorker(ctx, store.NewWorker{Name: "bare", Address: "http://127.0.0.1:2", Slots: 1})
	require.NoError(t, err)
	ws, err := st.Workers().ListWorkers(ctx)
	require.NoError(t, err)
	got := map[string]string{}
	for _, w := range ws {
		got[w.Name] = w.Sandbox
	}
	require.Equal(t, map[string]string{"boxed": "uid+pidns+netns+rlimit", "bare": "none"}, got)
}
