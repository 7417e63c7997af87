package server

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"golang.org/x/time/rate"
)

// rateLimit answers 429 problem+json past perSecond requests a second (and
// a burst of burst) per bearer token — keyed by the token's SHA-256, never
// the secret — or per client address without one (echo's rate limiter).
func rateLimit(perSecond float64, burst int) echo.MiddlewareFunc {
	store := middleware.NewRateLimiterMemoryStoreWithConfig(middleware.RateLimiterMemoryStoreConfig{
		Rate: rate.Limit(perSecond), Burst: burst, ExpiresIn: 3 * time.Minute})
	return middleware.RateLimiterWithConfig(middleware.RateLimiterConfig{
		Skipper: func(c echo.Context) bool { return isProbe(c.Request().URL.Path) },
		Store:   store,
		IdentifierExtractor: func(c echo.Context) (string, error) {
			if h := c.Request().Header.Get("Authorization"); h != "" {
				sum := sha256.Sum256([]byte(h))
				return "token:" + hex.EncodeToString(sum[:16]), nil
			}
			return "addr:" + c.RealIP(), nil
		},
		ErrorHandler: func(c echo.Context, err error) error { return err },
		DenyHandler: func(c echo.Context, _ string, _ error) error {
			c.Response().Header().Set("Retry-After", "1")
			return problem.New(http.StatusTooManyRequests, problem.CodeRateLimited,
				"too many requests for this token; retry after a second")
		},
	})
}

// isProbe reports whether path is a health probe, never rate limited.
func isProbe(path string) bool { return path == "/healthz" || path == "/readyz" }

// accessLog writes one line per request ("request"): method, path, status,
// latency, bytes out, the request id and, once authenticated, the token's
// id and role — never the secret or the query (it may name a cursor).
func accessLog(log *slog.Logger) echo.MiddlewareFunc {
	return middleware.RequestLoggerWithConfig(middleware.RequestLoggerConfig{
		LogMethod: true, LogURIPath: true, LogStatus: true, LogLatency: true, LogRequestID: true,
		LogResponseSize: true, HandleError: true,
		LogValuesFunc: func(c echo.Context, v middleware.RequestLoggerValues) error {
			attrs := []any{"method", v.Method, "path", v.URIPath, "status", v.Status,
				"latency_ms", float64(v.Latency.Microseconds()) / 1000, "bytes_out", v.ResponseSize,
				"request_id", v.RequestID}
			if p, ok := principalFrom(c.Request().Context()); ok {
				attrs = append(attrs, "token", p.tokenID, "role", p.role)
			}
			log.Info("request", attrs...)
			return nil
		},
	})
}

// writeDeadline bounds writing the answer of every request but a stream
// (logs?follow=true, GET .../events, or Accept: text/event-stream), which
// ends on its own terms (Config.LogFollowMax): the listener has no write
// timeout so that streams can last. A publication (POST .../events) is
// bounded.
func writeDeadline(d time.Duration) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			events := req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/events")
			stream := req.URL.Query().Get("follow") == "true" || events ||
				strings.Contains(req.Header.Get("Accept"), "text/event-stream")
			if !stream {
				_ = http.NewResponseController(c.Response().Writer).SetWriteDeadline(time.Now().Add(d))
			}
			return next(c)
		}
	}
}
