package server

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// readyTimeout bounds a readiness check's dependencies.
const readyTimeout = 2 * time.Second

// ServeMetrics serves reg at GET /metrics.
func (s *Server) ServeMetrics(reg *prometheus.Registry) {
	s.echo.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
}

// ready is /readyz: 503 with the reason when the supervisor takes no new
// attempt or a dependency check (SetDependencies) fails within 2s.
func (s *Server) ready(c echo.Context) error {
	var errs []error
	if r, ok := s.ab.(Readier); ok {
		errs = append(errs, r.Ready())
	}
	if s.deps != nil {
		ctx, cancel := context.WithTimeout(c.Request().Context(), readyTimeout)
		defer cancel()
		errs = append(errs, s.deps(ctx))
	}
	if err := errors.Join(errs...); err != nil {
		return c.String(http.StatusServiceUnavailable, "not ready: "+err.Error()+"\n")
	}
	return c.String(http.StatusOK, "ok\n")
}

// SetDependencies makes /readyz also require check (the executor's: Redis
// and the api answer) to return nil. Call it before serving.
func (s *Server) SetDependencies(check func(context.Context) error) { s.deps = check }
