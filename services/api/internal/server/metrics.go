package server

import (
	"strconv"
	"strings"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/obs"
	"github.com/capstan-run/capstan/pkg/store"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	// payloads observes specs, outputs and log chunks.
	payloads *obs.PayloadSizes
	// dispatch is capstan_dispatch_latency_seconds: see observeDispatch.
	dispatch prometheus.Histogram
	// tokenLookups counts the statements reading a token by its secret's
	// hash, by result: what the authenticator's caches did not spare.
	tokenLookups *prometheus.CounterVec
	// streams is the server-sent event streams open.
	streams prometheus.Gauge
}

func newMetrics(reg *prometheus.Registry) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capstan_api_requests_total", Help: "HTTP requests by route and status code.",
		}, []string{"method", "route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "capstan_api_request_seconds", Help: "HTTP request latency by route.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"method", "route"}),
	}
	m.dispatch = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "capstan_dispatch_latency_seconds",
		Help:    "Time in seconds from a task becoming PENDING to its attempt reporting RUNNING.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 16)})
	m.tokenLookups = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "capstan_api_token_lookups_total",
		Help: "Statements reading an API token by its secret's hash (token cache misses), by result: found, unknown, error."},
		[]string{"result"})
	m.streams = prometheus.NewGauge(prometheus.GaugeOpts{Name: "capstan_api_streams_open",
		Help: "Server-sent event streams open (events, logs?follow=true)."})
	reg.MustRegister(m.requests, m.latency, m.dispatch, m.tokenLookups, m.streams)
	payloads, err := obs.NewPayloadSizes(reg)
	if err != nil {
		panic(err) // a second server on one registry: the caller's bug
	}
	m.payloads = payloads
	return m
}

// observeDispatch records the dispatch latency of an attempt that reports
// RUNNING for the first time (prev is its state before the report): from
// the moment its task became PENDING — the end of its retry backoff
// (not_before) when it has one, else the task's creation for a first
// attempt, else (a retry without backoff) the attempt's creation, a lower
// bound — to now.
func (m *metrics) observeDispatch(t store.Task, prev store.Attempt, now time.Time) {
	if prev.State == domain.TaskRunning || prev.State.IsTerminal() {
		return
	}
	since := prev.CreatedAt
	switch {
	case t.NotBefore != nil:
		since = *t.NotBefore
	case prev.Number <= 1:
		since = t.CreatedAt
	}
	if d := now.Sub(since); d >= 0 {
		m.dispatch.Observe(d.Seconds())
	}
}

// untraced reports whether a request gets no span: the probes, /metrics,
// the profiler, the dashboard's and queue UI's assets, and the executors'
// heartbeats (a new trace every second from every executor, about no run).
func untraced(c echo.Context) bool {
	p := c.Request().URL.Path
	return c.Path() == "/v1/workers/:id/heartbeat" || p == "/healthz" || p == "/readyz" || p == "/metrics" || p == "/" ||
		strings.HasPrefix(p, "/ui") || strings.HasPrefix(p, QueuesPath) || strings.HasPrefix(p, PprofPath)
}

func (m *metrics) middleware() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			err := next(c)
			if err != nil {
				c.Error(err)
			}
			route := c.Path()
			if route == "" {
				route = "unmatched"
			}
			m.requests.WithLabelValues(c.Request().Method, route, strconv.Itoa(c.Response().Status)).Inc()
			m.latency.WithLabelValues(c.Request().Method, route).Observe(time.Since(start).Seconds())
			return nil
		}
	}
}
