package reconciler

import (
	"net/http"
	"testing"

	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/workerkey"
	"github.com/stretchr/testify/require"
)

// TestEachExecutorGetsItsWorkersCredential: the aborts of attempts on two
// workers reach each executor with its own worker's credential, never the
// other's.
func TestEachExecutorGetsItsWorkersCredential(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig(), nil)
	one, two := newFakeExecutor(t, always(http.StatusOK)), newFakeExecutor(t, always(http.StatusOK))
	h.start()
	s1 := h.seedAbort(one.URL(), 2)
	s2 := h.seedAbort(two.URL(), 1)
	require.NotEqual(t, s1.workerID, s2.workerID)
	require.NoError(t, h.push(s1.key))
	require.NoError(t, h.push(s2.key))
	require.Equal(t, store.AbortDelivered, *h.waitOutcome(s1.key).AbortOutcome)
	require.Equal(t, store.AbortDelivered, *h.waitOutcome(s2.key).AbortOutcome)

	for exe, worker := range map[*fakeExecutor]string{one: s1.workerID, two: s2.workerID} {
		require.NotEmpty(t, exe.Calls())
		for _, c := range exe.Calls() {
			require.Equal(t, "Bearer "+testControlPlaneKey.Credential(worker), c.Auth)
		}
	}
}

// TestNoCallWithoutTheWorkersCredential: a worker whose stored digest is
// missing, or is of a credential another key derives (the reconciler's key
// is not the api's), is never called: its abort fails every round, to
// needs_intervention, and no secret leaves the reconciler.
func TestNoCallWithoutTheWorkersCredential(t *testing.T) {
	t.Parallel()
	for name, register := range map[string]func(h *harness, addr string) store.Worker{
		"no digest": func(h *harness, addr string) store.Worker {
			w, err := h.st.Workers().RegisterWorker(h.ctx, store.NewWorker{Name: "w1", Address: addr, Slots: 1})
			require.NoError(t, err)
			return w
		},
		"another key": func(h *harness, addr string) store.Worker {
			return h.registerWorker(addr, 1, workerkey.New("another-control-plane-key-0123456789abcdef"))
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			cfg.MaxAttempts = 2
			h := newHarness(t, cfg, nil)
			exe := newFakeExecutor(t, always(http.StatusOK))
			h.start()
			s := h.seedRunningOn(register(h, exe.URL()), 1)
			_, err := h.st.Aborts().AbortAction(h.ctx, s.key, "user asked", "")
			require.NoError(t, err)
			require.NoError(t, h.push(s.key))
			a := h.waitOutcome(s.key)
			require.Equal(t, store.AbortNeedsIntervention, *a.AbortOutcome)
			require.Empty(t, exe.Calls(), "no call carries a credential the executor does not expect")
		})
	}
}
