// Package server serves the executor's own API (openapi/executor.yaml) on
// echo: POST /v1/attempts/{id}/abort, GET /healthz (the process answers) and
// GET /readyz (it takes new attempts, and its dependencies answer: see
// SetDependencies), and GET /metrics (ServeMetrics). Errors are
// application/problem+json.
package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/capstan-run/capstan/pkg/executorapi"
	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/contrib/instrumentation/github.com/labstack/echo/otelecho"
)

// Aborter kills attempts; the supervisor is one.
type Aborter interface {
	// Abort kills attempt id and returns once its process is gone; killed
	// is false when it had already exited. Errors: supervisor.ErrNotHeld.
	Abort(ctx context.Context, id int64, cause workerapi.AttemptReportCause, reason string) (killed bool, err error)
}

// Readier is what /readyz asks, when the Aborter given to New is one (the
// supervisor is): nil while the executor takes new attempts. Without it
// /readyz answers like /healthz.
type Readier interface {
	Ready() error
}

// Server is the executor's HTTP API.
type Server struct {
	echo *echo.Echo
	log  *slog.Logger
	ab   Aborter
	// deps, when set, is /readyz's dependency check (SetDependencies).
	deps func(context.Context) error
}

var _ executorapi.StrictServerInterface = (*handlers)(nil)

// New returns the API over ab.
func New(ab Aborter, log *slog.Logger) *Server {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = problem.EchoErrorHandler(log)
	e.Use(otelecho.Middleware("capstan-executor", otelecho.WithSkipper(func(c echo.Context) bool {
		return c.Request().Method == http.MethodGet // the probes and /metrics
	})))
	s := &Server{echo: e, log: log, ab: ab}
	e.GET("/healthz", func(c echo.Context) error { return c.String(http.StatusOK, "ok\n") })
	e.GET("/readyz", s.ready)
	executorapi.RegisterHandlers(e, executorapi.NewStrictHandler(&handlers{ab: ab, log: log}, nil))
	return s
}

// Guard makes the executor's API answer 401 problem+json to a request
// without the bearer secret its route needs, compared as SHA-256 digests in
// constant time:
//   - every route under /v1/ (the abort) needs the worker's executor
//     credential, as credential returns it at the request: the current
//     registration's, which only the control plane also knows (it derives
//     it from the worker id, package workerkey), so that no other worker
//     can call this executor; "" (before the first registration) refuses
//     them all;
//   - /metrics and /debug/ need metricsToken, the operator's
//     (CAPSTAN_EXECUTOR_METRICS_TOKEN); "" refuses them.
//
// /healthz and /readyz stay open.
func (s *Server) Guard(credential func() string, metricsToken string) {
	s.echo.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			path := c.Request().URL.Path
			var want, name string
			switch {
			case strings.HasPrefix(path, "/v1/"):
				want, name = credential(), "the worker's executor credential"
			case strings.HasPrefix(path, "/debug/") || path == "/metrics":
				want, name = metricsToken, "the metrics token (CAPSTAN_EXECUTOR_METRICS_TOKEN)"
			default:
				return next(c)
			}
			if !bearerIs(c.Request().Header.Get("Authorization"), want) {
				c.Response().Header().Set("WWW-Authenticate", `Bearer realm="capstan-executor"`)
				return problem.New(http.StatusUnauthorized, problem.CodeUnauthorized,
					"this route of the executor's API needs "+name+" (Authorization: Bearer)")
			}
			return next(c)
		}
	})
}

// bearerIs reports whether the Authorization header auth is "Bearer
// <want>", want not empty, comparing digests in constant time.
func bearerIs(auth, want string) bool {
	scheme, got, _ := strings.Cut(auth, " ")
	gotSum, wantSum := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return want != "" && strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare(gotSum[:], wantSum[:]) == 1
}

// maxBodyBytes caps a request body of the executor's API: an abort carries
// a reason of at most 1000 characters.
const maxBodyBytes = 64 << 10

// Handler returns the API as an http.Handler.
func (s *Server) Handler() http.Handler { return s.echo }

// Serve serves on ln until ctx ends, then shuts down, letting requests in
// flight finish for up to 5s.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	// An abort answers once the process is gone, after up to its kill
	// grace: the write timeout leaves room for long graces.
	srv := &http.Server{Handler: http.MaxBytesHandler(s.echo, maxBodyBytes), ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout: 30 * time.Second, WriteTimeout: 10 * time.Minute, IdleTimeout: 2 * time.Minute}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	err := srv.Serve(ln)
	<-done
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// handlers implements the generated strict server interface.
type handlers struct {
	ab  Aborter
	log *slog.Logger
}
