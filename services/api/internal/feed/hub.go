// Package feed fans the run_events notifications of Postgres out to the
// api's event-stream watchers: one LISTEN connection per api process
// (store.ListenEvents), however many watchers, each woken by a signal and
// then reading its new rows by id from the store's pool.
package feed

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/capstan-run/capstan/pkg/store"
)

// Hub holds the watchers and wakes those a notification concerns. The zero
// Hub is not usable: build it with New. Its methods are safe for concurrent
// use.
type Hub struct {
	dsn string
	log *slog.Logger
	// retry is the pause before the listener dials again (default 1 s).
	retry time.Duration

	mu sync.Mutex
	// byScope holds the watchers by "project/domain" and by
	// "project/domain/run".
	byScope map[scope]map[*Watcher]struct{}
}

// scope is what a watcher follows: a project/domain, or one run of it when
// run is not "".
type scope struct{ project, domain, run string }

// Watcher is one subscription. C receives a value (coalesced: it holds at
// most one) whenever the watcher's rows may have grown; the watcher then
// reads after the last id it sent.
type Watcher struct {
	C     <-chan struct{}
	c     chan struct{}
	scope scope
}

// New returns a hub whose listener (Run) connects to the Postgres at dsn;
// retry is the pause before a lost listener connection is dialled again
// (0: 1 s).
func New(dsn string, retry time.Duration, log *slog.Logger) *Hub {
	if retry <= 0 {
		retry = time.Second
	}
	return &Hub{dsn: dsn, log: log, retry: retry, byScope: map[scope]map[*Watcher]struct{}{}}
}

// Watch subscribes to the events of f (a project/domain, or one run when
// f.Run is set). Subscribe before the first read, so that no commit between
// the read and the subscription goes unnoticed; Stop when done.
func (h *Hub) Watch(f store.EventFilter) *Watcher {
	c := make(chan struct{}, 1)
	w := &Watcher{C: c, c: c, scope: scope{f.Project, f.Domain, f.Run}}
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.byScope[w.scope]
	if set == nil {
		set = map[*Watcher]struct{}{}
		h.byScope[w.scope] = set
	}
	set[w] = struct{}{}
	return w
}

// Stop unsubscribes w.
func (h *Hub) Stop(w *Watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.byScope[w.scope], w)
	if len(h.byScope[w.scope]) == 0 {
		delete(h.byScope, w.scope)
	}
}

// Watchers returns how many watchers are subscribed.
func (h *Hub) Watchers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, set := range h.byScope {
		n += len(set)
	}
	return n
}

// Run listens until ctx ends and returns nil then. Every (re)connection
// wakes every watcher: notifications sent while the listener was away are
// lost, a re-read finds their rows.
func (h *Hub) Run(ctx context.Context) error {
	first := true
	err := store.ListenEvents(ctx, h.dsn, h.retry, func() {
		if !first {
			h.log.Info("event listener reconnected")
		}
		first = false
		h.wakeAll()
	}, func(err error) {
		h.log.Warn("event listener lost its connection", "err", err, "retry_in", h.retry)
	}, func(n store.EventNotice) {
		h.wake(scope{n.Project, n.Domain, ""}, scope{n.Project, n.Domain, n.Run})
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// wake signals the watchers of the scopes.
func (h *Hub) wake(scopes ...scope) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range scopes {
		signal(h.byScope[s])
	}
}

// wakeAll signals every watcher.
func (h *Hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, set := range h.byScope {
		signal(set)
	}
}

// signal gives each watcher of set a signal, unless it holds one already.
func signal(set map[*Watcher]struct{}) {
	for w := range set {
		select {
		case w.c <- struct{}{}:
		default:
		}
	}
}
