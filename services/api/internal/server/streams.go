package server

import (
	"errors"
	"sync"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
)

// streamRetryAfter is the Retry-After of a stream refused for a full
// count: a slot frees when another stream of the token or the process
// ends, which the api cannot foresee.
const streamRetryAfter = 5 * time.Second

// Errors of a full stream count, answered 429.
var (
	errProcessStreams = errors.New("too many event streams open on this api; retry later or on another replica")
	errTokenStreams   = errors.New("too many event streams open for this token; close one first")
)

// streamSlots counts the server-sent event streams open on this process,
// in all and per token id, against Config.MaxStreams and
// MaxStreamsPerToken.
type streamSlots struct {
	most, mostPerToken int
	gauge              prometheus.Gauge // the streams open
	mu                 sync.Mutex
	open               int
	byToken            map[string]int
}

// newStreamSlots allows most streams, mostPerToken per token (both
// positive); gauge follows the count.
func newStreamSlots(most, mostPerToken int, gauge prometheus.Gauge) *streamSlots {
	return &streamSlots{most: most, mostPerToken: mostPerToken, gauge: gauge, byToken: map[string]int{}}
}

// acquire takes a slot for token and returns release, which gives it back
// (once, however often it is called). Errors: errTokenStreams when the
// token holds mostPerToken, errProcessStreams when the process holds most.
func (s *streamSlots) acquire(token string) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.byToken[token] >= s.mostPerToken:
		return nil, errTokenStreams
	case s.open >= s.most:
		return nil, errProcessStreams
	}
	s.open++
	s.byToken[token]++
	s.gauge.Inc()
	var once sync.Once
	return func() { once.Do(func() { s.release(token) }) }, nil
}

func (s *streamSlots) release(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open--
	if s.byToken[token]--; s.byToken[token] == 0 {
		delete(s.byToken, token)
	}
	s.gauge.Dec()
}

// streamGate is the generated server with a stream slot held around every
// operation that answers server-sent events (a project's events, a run's
// events, an attempt's logs with follow=true), from before its handler
// reads anything until the stream ended: past a count, 429 with
// Retry-After. The principal is the validator's (the request's context).
type streamGate struct {
	api.ServerInterface
	slots *streamSlots
}

// WatchEvents holds a slot for the project/domain's event stream.
func (g streamGate) WatchEvents(c echo.Context, project api.Project, domain api.Domain, params api.WatchEventsParams) error {
	return g.hold(c, func() error { return g.ServerInterface.WatchEvents(c, project, domain, params) })
}

// WatchRunEvents holds a slot for the run's event stream.
func (g streamGate) WatchRunEvents(c echo.Context, project api.Project, domain api.Domain, run api.RunName,
	params api.WatchRunEventsParams) error {
	return g.hold(c, func() error { return g.ServerInterface.WatchRunEvents(c, project, domain, run, params) })
}

// GetAttemptLogs holds a slot when it follows (follow=true).
func (g streamGate) GetAttemptLogs(c echo.Context, project api.Project, domain api.Domain, run api.RunName,
	action api.ActionName, task int, attempt int, params api.GetAttemptLogsParams) error {
	serve := func() error {
		return g.ServerInterface.GetAttemptLogs(c, project, domain, run, action, task, attempt, params)
	}
	if params.Follow == nil || !*params.Follow {
		return serve()
	}
	return g.hold(c, serve)
}

// hold runs serve with a slot of the request's token.
func (g streamGate) hold(c echo.Context, serve func() error) error {
	p, _ := principalFrom(c.Request().Context()) // set: every operation needs a token
	release, err := g.slots.acquire(p.tokenID)
	if err != nil {
		return tooManyRequests(c, streamRetryAfter, err.Error())
	}
	defer release()
	return serve()
}
