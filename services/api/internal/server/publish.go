package server

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	gojson "github.com/goccy/go-json"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/capstan-run/capstan/pkg/store"
)

// maxEventPayloadBytes bounds a published event's payload, as JSON.
const maxEventPayloadBytes = 256 << 10

// PublishEvent records an event and creates one run per trigger of its
// key that matches it, atomically (publish), then asks the scheduler to
// start them: 202 with the event's record. An id published before starts nothing
// new: the answer is the first publication's record (its key, payload,
// runs and deliveries), whatever this one carried. A payload over
// maxEventPayloadBytes is a 422 naming it.
func (h *Handlers) PublishEvent(ctx context.Context, req api.PublishEventRequestObject) (api.PublishEventResponseObject, error) {
	b := req.Body
	ev := store.PublishedEvent{Project: req.Project, Domain: req.Domain, ID: deref(b.Id), Key: b.Key,
		Payload: deref(b.Payload)}
	if ev.ID == "" {
		ev.ID = rand.Text()
	}
	if ev.Payload == nil {
		ev.Payload = map[string]any{}
	}
	if n := payloadSize(ev.Payload); n > maxEventPayloadBytes {
		msg := fmt.Sprintf("is %d bytes as JSON; at most %d", n, maxEventPayloadBytes)
		return asUnprocessable[api.PublishEvent422ApplicationProblemPlusJSONResponse](apiProblem(http.StatusUnprocessableEntity,
			problem.CodeInvalid, "payload: "+msg, domain.FieldError{Field: "payload", Message: msg})), nil
	}
	rec, err := h.publish(ctx, ev)
	if err != nil {
		return nil, fmt.Errorf("publish event %s in %s/%s: %w", ev.ID, ev.Project, ev.Domain, err)
	}
	out := toPublishedEvent(rec)
	keys := make([]domain.RunKey, len(out.Runs))
	for i, name := range out.Runs { // the first publication's too: a start that changes nothing is harmless
		keys[i] = domain.RunKey{Project: rec.Project, Domain: rec.Domain, Run: name}
	}
	if err := h.starts.send(ctx, keys...); err != nil {
		// The runs are recorded; the scheduler's resync starts them.
		h.log.Warn("enqueue run start failed", "event", ev.ID, "runs", len(keys), "err", err)
	}
	return api.PublishEvent202JSONResponse(out), nil
}

// payloadSize is the size in bytes of payload as JSON (0 when it does not
// encode, which a decoded request body always does).
func payloadSize(payload map[string]any) int {
	raw, err := gojson.Marshal(payload)
	if err != nil {
		return 0
	}
	return len(raw)
}

// publish stores ev with its deliveries and creates the runs they start,
// in one statement (store's PublishEvent), and returns the record; when
// ev's id was published before (or is, concurrently, and commits first),
// it writes nothing and returns that publication's record. The triggers
// of ev's key and their template versions are one read before it: what
// they do with ev is domain.DeliverEvent's decision. A run whose name is
// taken by a run this event did not start fails its delivery: the
// publication is written again without it. Errors: the store's.
func (h *Handlers) publish(ctx context.Context, ev store.PublishedEvent) (store.PublishedEvent, error) {
	keyed, err := h.store.Triggers().KeyTriggers(ctx, ev.Project, ev.Domain, ev.Key)
	if err != nil {
		return ev, err
	}
	deliveries := domain.DeliverEvent(domain.TriggerEvent{Key: ev.Key, ID: ev.ID, Payload: ev.Payload},
		triggerTargets(keyed))
	runs, at := triggeredRuns(ev, keyed, deliveries)
	ev.Deliveries = storedDeliveries(deliveries)
	for range maxPublishTries {
		rec, created, err := h.store.Triggers().PublishEvent(ctx, ev, runs)
		switch {
		case err == nil && created:
			return rec, nil
		case err == nil:
			return h.store.Triggers().GetPublishedEvent(ctx, store.PublishedEventKey{Project: ev.Project,
				Domain: ev.Domain, ID: ev.ID})
		case !errors.Is(err, store.ErrConflict):
			return ev, err
		}
		names := make([]string, len(runs))
		for i, nr := range runs {
			names[i] = nr.Key.Run
		}
		taken, err := h.store.Triggers().TakenRunNames(ctx, ev.Project, ev.Domain, names)
		if err != nil {
			return ev, err
		}
		runs, at = withoutTaken(ev, runs, at, taken)
	}
	return ev, errors.New("run names taken while publishing")
}

// maxPublishTries bounds how many times publish writes an event whose
// runs' names are taken meanwhile.
const maxPublishTries = 3

// withoutTaken fails, in place, the deliveries of ev whose runs' names
// are taken, and returns the other runs, with the index of each one's
// delivery.
func withoutTaken(ev store.PublishedEvent, runs []store.NewRun, at []int, taken []string) ([]store.NewRun, []int) {
	var keep []store.NewRun
	var keepAt []int
	for j, nr := range runs {
		if !slices.Contains(taken, nr.Key.Run) {
			keep, keepAt = append(keep, nr), append(keepAt, at[j])
			continue
		}
		ev.Deliveries[at[j]] = store.EventDelivery{Trigger: ev.Deliveries[at[j]].Trigger,
			Error: "run name " + nr.Key.Run + " is taken by a run this event did not start"}
	}
	return keep, keepAt
}

// triggerTargets is what domain.DeliverEvent reads of each trigger.
func triggerTargets(keyed []store.KeyTrigger) []domain.TriggerTarget {
	out := make([]domain.TriggerTarget, len(keyed))
	for i, k := range keyed {
		t := k.Trigger
		out[i] = domain.TriggerTarget{Name: t.Name, Filter: t.Filter, Params: t.Params}
		switch {
		case k.Template != nil:
			out[i].Spec = k.Template.Spec
		case t.WorkflowVersion != nil:
			out[i].Missing = fmt.Sprintf("workflow template %s has no version %d", t.WorkflowName, *t.WorkflowVersion)
		default:
			out[i].Missing = "workflow template " + t.WorkflowName + " does not exist"
		}
	}
	return out
}

// triggeredRuns are the runs deliveries start (deliveries[i] is keyed[i]'s),
// each of its trigger's template version, and the index of each one's
// delivery.
func triggeredRuns(ev store.PublishedEvent, keyed []store.KeyTrigger, deliveries []domain.EventDelivery) ([]store.NewRun, []int) {
	var runs []store.NewRun
	var at []int
	for i, d := range deliveries {
		if d.Run == "" {
			continue
		}
		t := keyed[i].Template
		runs = append(runs, store.NewRun{Key: domain.RunKey{Project: ev.Project, Domain: ev.Domain, Run: d.Run},
			Spec: t.Spec, Params: d.Params, Keys: d.Keys, Origin: store.RunOrigin{WorkflowName: t.Name,
				WorkflowVersion: t.Version, TriggerName: d.Trigger, EventID: ev.ID}})
		at = append(at, i)
	}
	return runs, at
}

// storedDeliveries is deliveries as the event's record holds them.
func storedDeliveries(deliveries []domain.EventDelivery) []store.EventDelivery {
	out := make([]store.EventDelivery, len(deliveries))
	for i, d := range deliveries {
		out[i] = store.EventDelivery{Trigger: d.Trigger, Run: d.Run, Error: d.Error}
	}
	return out
}

// GetPublishedEvent returns a published event's record; 404 for an id
// never published (one holding NUL or bytes that are not UTF-8 never is).
func (h *Handlers) GetPublishedEvent(ctx context.Context, req api.GetPublishedEventRequestObject) (api.GetPublishedEventResponseObject, error) {
	rec, err := store.PublishedEvent{}, store.ErrNotFound
	if utf8.ValidString(req.Event) && !strings.ContainsRune(req.Event, 0) {
		rec, err = h.store.Triggers().GetPublishedEvent(ctx, store.PublishedEventKey{Project: req.Project,
			Domain: req.Domain, ID: req.Event})
	}
	if p, ok := problemFor(err, subject{kind: "event", name: req.Event}); ok && p.Status == http.StatusNotFound {
		return asNotFound[api.GetPublishedEvent404ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read event %s: %w", req.Event, err)
	}
	return api.GetPublishedEvent200JSONResponse(toPublishedEvent(rec)), nil
}

// toPublishedEvent is rec as the API shows it: its runs are its
// deliveries' runs, in trigger order.
func toPublishedEvent(rec store.PublishedEvent) api.PublishedEvent {
	out := api.PublishedEvent{Id: rec.ID, Key: rec.Key, Payload: rec.Payload, CreatedAt: rec.CreatedAt,
		Runs: []string{}, Deliveries: make([]api.EventDelivery, len(rec.Deliveries))}
	if out.Payload == nil {
		out.Payload = map[string]any{}
	}
	for i, d := range rec.Deliveries {
		out.Deliveries[i] = api.EventDelivery{Trigger: d.Trigger}
		if d.Run != "" {
			out.Runs = append(out.Runs, d.Run)
			out.Deliveries[i].Run = &d.Run
		}
		if d.Error != "" {
			out.Deliveries[i].Error = &d.Error
		}
	}
	return out
}
