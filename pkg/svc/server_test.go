package svc

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// get returns the status and body of GET url.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

func TestHealthServer(t *testing.T) {
	t.Parallel()
	notReady := errors.New("postgres: down")
	ready := make(chan error, 1)
	h, err := NewHealthServer("127.0.0.1:0", prometheus.NewRegistry(), func(context.Context) error { return <-ready })
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- h.Run(ctx) }()
	base := "http://" + h.Addr()

	code, body := get(t, base+"/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)
	ready <- nil
	code, _ = get(t, base+"/readyz")
	require.Equal(t, http.StatusOK, code)
	ready <- notReady
	code, body = get(t, base+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "not ready: postgres: down")
	code, _ = get(t, base+"/metrics")
	require.Equal(t, http.StatusOK, code)

	cancel()
	require.NoError(t, <-ran)
}

func TestListenHoldsThePort(t *testing.T) {
	t.Parallel()
	s, err := Listen("127.0.0.1:0", http.NotFoundHandler())
	require.NoError(t, err)
	_, err = Listen(s.Addr(), http.NotFoundHandler())
	require.Error(t, err, "the port is taken from Listen on")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.NoError(t, s.Run(ctx), "a context already ended shuts down at once")
}

// TestRunWaitsForRequestsInFlight checks that Run returns only once the
// requests in flight at shutdown have been answered: the dependencies a
// main closes after Run are still there for them.
func TestRunWaitsForRequestsInFlight(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	s, err := Listen("127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(entered)
		<-release
		_, _ = w.Write([]byte("done"))
	}))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()
	answered := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + s.Addr())
		if err != nil {
			answered <- err.Error()
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		answered <- string(body)
	}()
	<-entered
	cancel()
	require.Eventually(t, func() bool { // shutdown has begun: the listener is closed
		c, err := net.Dial("tcp", s.Addr())
		if err == nil {
			_ = c.Close()
		}
		return err != nil
	}, 5*time.Second, 5*time.Millisecond)
	select {
	case err := <-ran:
		t.Fatalf("Run returned (%v) with a request in flight", err)
	default:
	}
	close(release)
	require.Equal(t, "done", <-answered)
	require.NoError(t, <-ran)
}
