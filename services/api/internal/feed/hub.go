// Package feed fans the run_events and attempt notifications of Postgres
// out to the api's event streams and log followers: one LISTEN connection
// per api process (store.ListenFeed), however many watchers, each woken by
// a signal and then reading its new rows from the store's pool. The
// connection is open only while the process has watchers, and for a linger
// after the last one stops: writers notify only while some listener is
// registered (store.ListenFeed), each notifying commit takes Postgres's one
// database-wide NOTIFY lock, and a listener nobody reads from costs its
// backend and the api a wake-up per notification (0.04 of a core at 200
// single-task runs a second).
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
	// linger is how long the listener stays after the last watcher stops
	// (default DefaultLinger).
	linger time.Duration
	// changed holds a signal (coalesced) when watchers came or went.
	changed chan struct{}

	mu sync.Mutex
	// byScope holds the watchers by "project/domain", by
	// "project/domain/run" and by attempt.
	byScope map[scope]map[*Watcher]struct{}
}

// scope is what a watcher follows: a project/domain, or one run of it when
// run is not "", or one attempt's output and state when attempt is not 0.
type scope struct {
	project, domain, run string
	attempt              int64
}

// Watcher is one subscription. C receives a value (coalesced: it holds at
// most one) whenever the watcher's rows may have grown; the watcher then
// reads after the last id it sent.
type Watcher struct {
	C     <-chan struct{}
	c     chan struct{}
	scope scope
}

// DefaultLinger is how long a hub listens after its last watcher stopped
// when New is given 0: event streams opened one after the other (a client
// watching each run it creates) keep one connection.
const DefaultLinger = time.Minute

// New returns a hub whose listener (Run) connects to the Postgres at dsn
// while it has watchers; retry is the pause before a lost listener
// connection is dialled again (0: 1 s), linger how long the listener stays
// once the last watcher stopped (0: DefaultLinger).
func New(dsn string, retry, linger time.Duration, log *slog.Logger) *Hub {
	if retry <= 0 {
		retry = time.Second
	}
	if linger <= 0 {
		linger = DefaultLinger
	}
	return &Hub{dsn: dsn, log: log, retry: retry, linger: linger, changed: make(chan struct{}, 1),
		byScope: map[scope]map[*Watcher]struct{}{}}
}

// Watch subscribes to the events of f (a project/domain, or one run when
// f.Run is set). Subscribe before the first read, so that no commit between
// the read and the subscription goes unnoticed; Stop when done. The first
// watcher of a hub that is not listening has Run connect, and the
// connection signals every watcher once it listens: a commit made before
// that is found by the read that signal starts.
func (h *Hub) Watch(f store.EventFilter) *Watcher {
	return h.watch(scope{project: f.Project, domain: f.Domain, run: f.Run})
}

// WatchAttempt subscribes to attempt id's notifications
// (store.AttemptLogsChannel): its output grew or an event about it was
// written. Subscribe before the first read, as Watch; Stop when done.
func (h *Hub) WatchAttempt(id int64) *Watcher { return h.watch(scope{attempt: id}) }

// watch subscribes a new watcher to sc.
func (h *Hub) watch(sc scope) *Watcher {
	c := make(chan struct{}, 1)
	w := &Watcher{C: c, c: c, scope: sc}
	defer h.change()
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
	defer h.change()
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

// change tells Run that watchers came or went.
func (h *Hub) change() {
	select {
	case h.changed <- struct{}{}:
	default:
	}
}

// Run listens while the hub has watchers, until ctx ends, and returns nil
// then. Every (re)connection wakes every watcher: notifications sent while
// the listener was away are lost, a re-read finds their rows.
func (h *Hub) Run(ctx context.Context) error {
	for h.awaitWatcher(ctx) {
		lctx, cancel := context.WithCancel(ctx)
		idle := make(chan struct{})
		go func() {
			defer close(idle)
			h.cancelWhenIdle(lctx, cancel)
		}()
		h.listen(lctx)
		cancel()
		<-idle // it must not take a change meant for awaitWatcher
	}
	return nil
}

// awaitWatcher waits until the hub has a watcher (true) or ctx ends
// (false).
func (h *Hub) awaitWatcher(ctx context.Context) bool {
	for h.Watchers() == 0 {
		select {
		case <-ctx.Done():
			return false
		case <-h.changed:
		}
	}
	return ctx.Err() == nil
}

// cancelWhenIdle calls cancel once the hub has had no watcher for its
// linger, or returns when ctx ends.
func (h *Hub) cancelWhenIdle(ctx context.Context, cancel context.CancelFunc) {
	var timer *time.Timer
	var expired <-chan time.Time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		switch n := h.Watchers(); {
		case n == 0 && timer == nil:
			timer = time.NewTimer(h.linger)
			expired = timer.C
		case n > 0 && timer != nil:
			timer.Stop()
			timer, expired = nil, nil
		}
		select {
		case <-ctx.Done():
			return
		case <-h.changed:
		case <-expired:
			h.log.Debug("event listener closed: no watcher")
			cancel()
			return
		}
	}
}

// listen holds the LISTEN connection until ctx ends, dialling it again
// after each loss.
func (h *Hub) listen(ctx context.Context) {
	first := true
	_ = store.ListenFeed(ctx, h.dsn, h.retry, store.FeedHandlers{Connected: func() {
		if !first {
			h.log.Info("event listener reconnected")
		}
		first = false
		h.wakeAll()
	}, Lost: func(err error) {
		h.log.Warn("event listener lost its connection", "err", err, "retry_in", h.retry)
	}, Event: func(n store.EventNotice) {
		h.wake(scope{project: n.Project, domain: n.Domain}, scope{project: n.Project, domain: n.Domain, run: n.Run})
	}, Attempt: func(id int64) {
		h.wake(scope{attempt: id})
	}})
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
