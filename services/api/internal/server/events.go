package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/services/api/internal/feed"
)

// eventPage is how many run_events rows a stream reads at most at once.
const eventPage = 500

// WatchRunEvents streams one run's run_events as server-sent events until
// the run ended (eventStream); 404 for an unknown run.
func (h *Handlers) WatchRunEvents(ctx context.Context, req api.WatchRunEventsRequestObject) (api.WatchRunEventsResponseObject, error) {
	key := domain.RunKey{Project: req.Project, Domain: req.Domain, Run: req.Run}
	_, err := h.store.Runs().RunPhase(ctx, key)
	if p, ok := problemFor(err, subject{kind: "run", name: req.Run}); ok && p.Status == http.StatusNotFound {
		return asNotFound[api.WatchRunEvents404ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read phase of run %s: %w", key, err)
	}
	return h.newEventStream(ctx, key, resumeAfter(req.Params.LastEventID, req.Params.LastEventId)), nil
}

// WatchEvents streams the run_events of every run of a project/domain,
// after Last-Event-ID, else from the oldest (start=first) or after the
// newest stored (start=now); it ends only when the client goes, after
// LogFollowMax or at shutdown.
func (h *Handlers) WatchEvents(ctx context.Context, req api.WatchEventsRequestObject) (api.WatchEventsResponseObject, error) {
	key := domain.RunKey{Project: req.Project, Domain: req.Domain}
	after := resumeAfter(req.Params.LastEventID, req.Params.LastEventId)
	if resumed := req.Params.LastEventID != nil || req.Params.LastEventId != nil; !resumed &&
		deref(req.Params.Start) == api.EventsStartNow {
		// Read before the stream's headers go out: what commits after a
		// client saw them is sent.
		newest, err := h.store.Events().NewestEventID(ctx)
		if err != nil {
			return nil, fmt.Errorf("newest event: %w", err)
		}
		after = newest
	}
	return h.newEventStream(ctx, key, after), nil
}

// resumeAfter is the id a stream starts after: the Last-Event-ID header when
// it is a number, else the last_event_id query parameter, else 0.
func resumeAfter(header *string, query *int64) int64 {
	if header != nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(*header), 10, 64); err == nil && n >= 0 {
			return n
		}
	}
	if query != nil {
		return *query
	}
	return 0
}

// eventStream is the answer of WatchRunEvents (run set) and WatchEvents
// (run ""): an event per run_events row after `after`, in id order (`id:`
// the row's id, `event:` its type, `data:` the RunEvent as one line of
// JSON), then the new rows as they commit, read when the hub signals; a
// `: keep-alive` comment every logHeartbeat. A run's stream ends with
// `event: end` (data {"phase": …}) once the run is terminal and its rows
// were all sent.
type eventStream struct {
	ctx      context.Context
	store    *store.Store
	hub      *feed.Hub
	log      *slog.Logger
	filter   store.EventFilter
	after    int64
	maxFor   time.Duration
	stopping <-chan struct{}
}

var (
	_ api.WatchRunEventsResponseObject = (*eventStream)(nil)
	_ api.WatchEventsResponseObject    = (*eventStream)(nil)
)

func (h *Handlers) newEventStream(ctx context.Context, key domain.RunKey, after int64) *eventStream {
	return &eventStream{ctx: ctx, store: h.store, hub: h.feed, log: h.log, after: after,
		filter: store.EventFilter{Project: key.Project, Domain: key.Domain, Run: key.Run},
		maxFor: h.cfg.LogFollowMax, stopping: h.stopping}
}

// VisitWatchRunEventsResponse writes the stream; nil once it ended.
func (s *eventStream) VisitWatchRunEventsResponse(w http.ResponseWriter) error { return s.write(w) }

// VisitWatchEventsResponse writes the stream; nil once it ended.
func (s *eventStream) VisitWatchEventsResponse(w http.ResponseWriter) error { return s.write(w) }

func (s *eventStream) write(w http.ResponseWriter) error {
	send, done := startEventStream(w)
	defer done()
	if err := s.follow(send); err != nil && s.ctx.Err() == nil {
		s.log.Warn("event stream ended", "project", s.filter.Project, "domain", s.filter.Domain,
			"run", s.filter.Run, "err", err)
	}
	return nil
}

// follow sends the rows, then waits for a signal and sends the new ones,
// until the run ended (a run's stream), the client went, maxFor passed or
// the api stops. It subscribes before its first read: a commit between the
// two is then signalled.
func (s *eventStream) follow(send func(string) error) error {
	watcher := s.hub.Watch(s.filter)
	defer s.hub.Stop(watcher)
	keepAlive := time.NewTicker(logHeartbeat)
	defer keepAlive.Stop()
	deadline := time.NewTimer(s.maxFor)
	defer deadline.Stop()
	if err := send(": watching events\n\n"); err != nil {
		return err
	}
	for {
		ended, err := s.sendNew(send)
		if err != nil || ended {
			return err
		}
		select {
		case <-watcher.C:
		case <-keepAlive.C:
			// Also a re-read: a stream outlives a hub that cannot listen.
			if err := send(": keep-alive\n\n"); err != nil {
				return err
			}
		case <-s.ctx.Done():
			return nil
		case <-deadline.C:
			return nil
		case <-s.stopping:
			return nil
		}
	}
}

// sendNew sends every row after s.after; for a run's stream whose run is
// terminal (read in the same statement as the rows: they hold its terminal
// event) and has no restart pending it then sends `end` and reports true.
func (s *eventStream) sendNew(send func(string) error) (ended bool, err error) {
	for {
		var phase domain.Phase
		var restarting bool
		var rows []store.RunEvent
		if s.filter.Run == "" {
			rows, err = s.store.Events().EventsAfter(s.ctx, s.filter, s.after, eventPage)
		} else {
			phase, restarting, rows, err = s.store.Events().RunEventsAfter(s.ctx, domain.RunKey{Project: s.filter.Project,
				Domain: s.filter.Domain, Run: s.filter.Run}, s.after, eventPage)
		}
		if err != nil {
			return false, fmt.Errorf("read events: %w", err)
		}
		if len(rows) > 0 {
			if err := s.sendRows(send, rows); err != nil {
				return false, err
			}
		}
		if len(rows) == eventPage {
			continue
		}
		if !phase.IsTerminal() || restarting { // a pending restart makes it run again
			return false, nil
		}
		end, _ := json.Marshal(map[string]string{"phase": string(phase)})
		return true, send("event: end\ndata: " + string(end) + "\n\n")
	}
}

// sendRows sends rows as one write and moves s.after past them.
func (s *eventStream) sendRows(send func(string) error, rows []store.RunEvent) error {
	var b strings.Builder
	for _, r := range rows {
		data, err := json.Marshal(toRunEvent(r))
		if err != nil {
			return fmt.Errorf("encode event %d: %w", r.ID, err)
		}
		fmt.Fprintf(&b, "id: %d\nevent: %s\ndata: %s\n\n", r.ID, sseField(r.Type), data)
		s.after = r.ID
	}
	return send(b.String())
}

// runEvent is api.RunEvent with its data kept as the stored JSON.
type runEvent struct {
	ID        int64           `json:"id"`
	Project   string          `json:"project"`
	Domain    string          `json:"domain"`
	Run       string          `json:"run"`
	Action    *string         `json:"action,omitempty"`
	TaskID    *int64          `json:"task_id,omitempty"`
	AttemptID *int64          `json:"attempt_id,omitempty"`
	Type      string          `json:"type"`
	Data      json.RawMessage `json:"data"`
	CreatedAt time.Time       `json:"created_at"`
}

func toRunEvent(r store.RunEvent) runEvent {
	data := json.RawMessage(r.Data)
	if len(data) == 0 {
		data = json.RawMessage("{}")
	}
	return runEvent{ID: r.ID, Project: r.Project, Domain: r.Domain, Run: r.RunName, Action: r.ActionName,
		TaskID: r.TaskID, AttemptID: r.AttemptID, Type: r.Type, Data: data, CreatedAt: r.CreatedAt.UTC()}
}

// sseField keeps a field value on one line.
func sseField(v string) string { return strings.NewReplacer("\r", " ", "\n", " ").Replace(v) }
