package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/capstan-run/capstan/pkg/store"
)

// PauseSchedule stops a schedule's automatic times; times triggered or
// backfilled still start.
func (h *Handlers) PauseSchedule(ctx context.Context, req api.PauseScheduleRequestObject) (api.PauseScheduleResponseObject, error) {
	out, err := h.pause(ctx, store.ScheduleKey{Project: req.Project, Domain: req.Domain, Name: req.Schedule}, true)
	if p, ok := problemFor(err, subject{kind: "schedule", name: req.Schedule}); ok && p.Status == http.StatusNotFound {
		return asNotFound[api.PauseSchedule404ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, err
	}
	return api.PauseSchedule200JSONResponse(out), nil
}

// UnpauseSchedule starts a paused schedule's times again from now: the
// times while it was paused are not caught up.
func (h *Handlers) UnpauseSchedule(ctx context.Context, req api.UnpauseScheduleRequestObject) (api.UnpauseScheduleResponseObject, error) {
	out, err := h.pause(ctx, store.ScheduleKey{Project: req.Project, Domain: req.Domain, Name: req.Schedule}, false)
	if p, ok := problemFor(err, subject{kind: "schedule", name: req.Schedule}); ok && p.Status == http.StatusNotFound {
		return asNotFound[api.UnpauseSchedule404ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, err
	}
	return api.UnpauseSchedule200JSONResponse(out), nil
}

// pause sets the schedule's pause (setPaused) and returns it as the API
// shows it. Errors: ErrNotFound, the store's.
func (h *Handlers) pause(ctx context.Context, key store.ScheduleKey, paused bool) (api.Schedule, error) {
	sc, _, err := h.changeSchedule(ctx, key, func(sc *store.Schedule, now time.Time) ([]domain.FieldError, error) {
		setPaused(sc, paused, now)
		return nil, nil
	})
	if err != nil {
		return api.Schedule{}, err
	}
	return h.withRuns(ctx, sc)
}

// errPendingFull: a schedule already holds as many times waiting to be
// decided as it may (domain.MaxBackfillTimes).
var errPendingFull = errors.New("too many times pending")

// TriggerSchedule records a time now (this second), to start at the
// schedule's next firing under the overlap policy given (the schedule's
// when none); 409 when the schedule already holds 10,000 times waiting.
func (h *Handlers) TriggerSchedule(ctx context.Context, req api.TriggerScheduleRequestObject) (api.TriggerScheduleResponseObject, error) {
	key := store.ScheduleKey{Project: req.Project, Domain: req.Domain, Name: req.Schedule}
	var overlap string
	if req.Body != nil {
		overlap = string(deref(req.Body.Overlap))
	}
	var at time.Time
	_, _, err := h.changeSchedule(ctx, key, func(sc *store.Schedule, now time.Time) ([]domain.FieldError, error) {
		at = now.Truncate(time.Second)
		var ok bool
		if sc.Pending, ok = domain.AddPending(sc.Pending, []time.Time{at}, overlap); !ok {
			return nil, errPendingFull
		}
		return nil, nil
	})
	if p, ok := problemFor(err, subject{kind: "schedule", name: req.Schedule}); ok && p.Status == http.StatusNotFound {
		return asNotFound[api.TriggerSchedule404ApplicationProblemPlusJSONResponse](p), nil
	}
	if errors.Is(err, errPendingFull) {
		return asConflict[api.TriggerSchedule409ApplicationProblemPlusJSONResponse](apiProblem(http.StatusConflict, problem.CodeConflict,
			fmt.Sprintf("schedule %s already holds %d times waiting to start; try again once they started",
				req.Schedule, domain.MaxBackfillTimes))), nil
	}
	if err != nil {
		return nil, err
	}
	return api.TriggerSchedule202JSONResponse(api.ScheduleAction{ScheduledTimes: []time.Time{at}}), nil
}

// BackfillSchedule records the schedule's times in [start, end] (at most
// 10,000), to start at its next firing under the overlap policy given (the
// schedule's when none), whatever the catch-up window; a time that already
// started a run starts none. 422 on "end" when it precedes start, or the
// range (with the times already waiting) holds more than 10,000.
func (h *Handlers) BackfillSchedule(ctx context.Context, req api.BackfillScheduleRequestObject) (api.BackfillScheduleResponseObject, error) {
	key := store.ScheduleKey{Project: req.Project, Domain: req.Domain, Name: req.Schedule}
	b := req.Body
	var times []time.Time
	_, fieldErrs, err := h.changeSchedule(ctx, key, func(sc *store.Schedule, _ time.Time) ([]domain.FieldError, error) {
		cal, err := sc.Spec.Calendar()
		if err != nil {
			return nil, fmt.Errorf("compile the spec of schedule %s: %w", key, err)
		}
		var errs []domain.FieldError
		if times, errs = domain.BackfillTimes(cal, b.Start, b.End); len(errs) > 0 {
			return errs, nil
		}
		var ok bool
		if sc.Pending, ok = domain.AddPending(sc.Pending, times, string(deref(b.Overlap))); !ok {
			return []domain.FieldError{{Field: "end", Message: fmt.Sprintf(
				"with the %d times already waiting to start, the range makes more than %d; choose an earlier end",
				len(sc.Pending), domain.MaxBackfillTimes)}}, nil
		}
		return nil, nil
	})
	if p, ok := problemFor(err, subject{kind: "schedule", name: req.Schedule}); ok && p.Status == http.StatusNotFound {
		return asNotFound[api.BackfillSchedule404ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, err
	}
	if len(fieldErrs) > 0 {
		return asUnprocessable[api.BackfillSchedule422ApplicationProblemPlusJSONResponse](scheduleProblem(fieldErrs)), nil
	}
	if times == nil {
		times = []time.Time{}
	}
	return api.BackfillSchedule202JSONResponse(api.ScheduleAction{ScheduledTimes: times}), nil
}
