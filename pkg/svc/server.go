package svc

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// serverTimeout bounds reading a request's headers, and the graceful
// shutdown of a Server once its context ends.
const serverTimeout = 10 * time.Second

// Timeouts of every Server: reading a whole request (headers and body), and
// an idle keep-alive connection. Writes have no listener-wide bound, so that
// streams (logs follow, events) last; a handler bounds its own (the api
// does, per request, but for streams).
const (
	readTimeout = time.Minute
	idleTimeout = 2 * time.Minute
)

// Server is an HTTP server that holds its port from Listen on and serves
// until the context given to Run ends.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// Listen listens on addr (host:port; port 0 picks one) at once, so the
// caller knows the port is held, and returns a Server for h. Errors: the
// address is invalid or taken.
func Listen(addr string, h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &Server{srv: &http.Server{Handler: h, ReadHeaderTimeout: serverTimeout, ReadTimeout: readTimeout,
		IdleTimeout: idleTimeout}, ln: ln}, nil
}

// NewHealthServer listens on addr, as Listen, and serves /healthz (the
// process is up), /readyz (ready returns nil within 2s; else 503 with its
// error) and /metrics (reg).
func NewHealthServer(addr string, reg *prometheus.Registry, ready func(context.Context) error) (*Server, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return Listen(addr, mux)
}

// Addr is the listening address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Run serves until ctx ends, then shuts down gracefully: it returns nil
// once the requests in flight have finished or 10s have passed. It returns
// at once with the error when serving fails.
func (s *Server) Run(ctx context.Context) error {
	shutDown := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(shutDown)
		sctx, cancel := context.WithTimeout(context.Background(), serverTimeout)
		defer cancel()
		_ = s.srv.Shutdown(sctx)
	})
	if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
		stop()
		return err
	}
	<-shutDown // ErrServerClosed: only Shutdown, above, closes the server
	return nil
}
