package scheduler

import (
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/workerkey"
	"github.com/stretchr/testify/require"
)

// TestDispatchesSignEachSpecForItsWorker: each message's specs verify
// under the dispatch key of the worker it goes to, and under no other
// worker's; without a control-plane key the messages carry ids alone.
func TestDispatchesSignEachSpecForItsWorker(t *testing.T) {
	t.Parallel()
	a, b := "8f14e45f-ceea-467f-a0e6-6c2b4d5b1e3c", "0b4e7a0e-5fe8-4c0e-9f1a-2a3e4b5c6d7e"
	assigned := func(id int64, worker *string) store.Assigned {
		return store.Assigned{Attempt: store.Attempt{ID: id, Number: 1, TaskID: id, WorkerID: worker},
			Project: "p", Domain: "d", RunName: "r", ActionName: "s", Step: domain.Step{Name: "s", Command: "true"}}
	}
	attempts := []store.Assigned{assigned(1, &a), assigned(2, &b), assigned(3, &a)}

	ds := dispatches(attempts, nil, testControlPlaneKey)
	require.Len(t, ds, 2)
	for _, d := range ds {
		other := map[string]string{a: b, b: a}[d.worker]
		require.Len(t, d.specs, len(d.ids))
		for i, s := range d.specs {
			spec, err := s.Verify(testControlPlaneKey.DispatchKey(d.worker))
			require.NoError(t, err)
			require.Equal(t, d.ids[i], spec.Id)
			require.Equal(t, d.worker, *spec.WorkerId)
			_, err = s.Verify(testControlPlaneKey.DispatchKey(other))
			require.ErrorIs(t, err, queue.ErrBadSpecMAC, "not another worker's")
		}
	}
	for _, d := range dispatches(attempts, nil, workerkey.Key{}) {
		require.NotEmpty(t, d.ids)
		require.Empty(t, d.specs, "no key: ids alone")
	}
}
