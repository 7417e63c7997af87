package reconciler

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/stretchr/testify/require"
)

// callLog is the order in which a test's doubles saw their calls.
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *callLog) add(call string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, call)
}

// first returns the first n calls (fewer when fewer were made).
func (l *callLog) first(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.calls[:min(n, len(l.calls))]...)
}

// loggedStore is the real Store, recording each delivery round it counts
// ("mark") and each startup or resync scan ("scan") in log. With
// scanNeedsWorker set, a scan first waits (at most scanWait) until a round
// was counted, as a scan whose pushes block until a worker takes them
// (Flyte: started before its workers, the startup scan would block on a
// full queue).
type loggedStore struct {
	Store
	log             *callLog
	scanNeedsWorker bool
	marked          chan struct{}
	once            sync.Once
}

// scanWait bounds how long a scan waits for a worker.
const scanWait = 5 * time.Second

func (s *loggedStore) MarkAbortAttempt(ctx context.Context, key domain.ActionKey) (int, error) {
	s.log.add("mark")
	s.once.Do(func() { close(s.marked) })
	return s.Store.MarkAbortAttempt(ctx, key)
}

func (s *loggedStore) ListPendingAborts(ctx context.Context) ([]domain.ActionKey, error) {
	if s.scanNeedsWorker {
		select {
		case <-s.marked:
		case <-time.After(scanWait):
		}
	}
	s.log.add("scan")
	return s.Store.ListPendingAborts(ctx)
}

// newLoggedHarness is a harness whose store is the real one wrapped in a
// loggedStore on log.
func newLoggedHarness(t *testing.T, log *callLog, scanNeedsWorker bool) *harness {
	t.Helper()
	return newHarness(t, testConfig(), func(d *Deps) {
		d.Store = &loggedStore{Store: d.Store, log: log, scanNeedsWorker: scanNeedsWorker, marked: make(chan struct{})}
	})
}

// Flyte's processTask: "attemptCount, err := MarkAbortAttempt(...)" comes
// before "r.actionsClient.Abort(...)": the round is counted in Postgres
// before the executor is called, so a crash during the call keeps the
// count.
func TestMarkAbortAttemptBeforeTheExecutorIsCalled(t *testing.T) {
	t.Parallel()
	log := &callLog{}
	h := newLoggedHarness(t, log, false)
	exe := newFakeExecutor(t, always(http.StatusOK))
	exe.onCall = func(id int64) { log.add(fmt.Sprintf("call %d", id)) }
	h.start()
	s := h.seedAbort(exe.URL(), 1)
	require.NoError(t, h.push(s.key))
	a := h.waitOutcome(s.key)
	require.Equal(t, store.AbortDelivered, *a.AbortOutcome)
	require.Equal(t, []string{"scan", "mark", fmt.Sprintf("call %d", s.attempts[0])}, log.first(3),
		"the startup scan, then the round counted, then the executor called")
}

// Flyte: "The system starts the workers before performing the startup
// scan." A scan that needs a worker to take what is queued (here, an abort
// the api pushed before the reconciler started) finds one at once; were
// the scan first, it would wait for a worker that is not there yet.
func TestWorkersStartBeforeTheStartupScan(t *testing.T) {
	t.Parallel()
	log := &callLog{}
	h := newLoggedHarness(t, log, true)
	exe := newFakeExecutor(t, always(http.StatusOK))
	s := h.seedAbort(exe.URL(), 1)
	require.NoError(t, h.push(s.key))
	h.start()
	require.Equal(t, []string{"mark", "scan"}, log.first(2),
		"a worker counted the queued abort's round while the startup scan waited for one")
	require.Equal(t, store.AbortDelivered, *h.waitOutcome(s.key).AbortOutcome)
}
