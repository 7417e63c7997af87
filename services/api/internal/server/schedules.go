package server

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/capstan-run/capstan/pkg/store"
)

// recentRuns is how many of a schedule's latest runs it shows.
const recentRuns = 10

// CreateSchedule records a schedule of a template version: its times
// start after now (the firing loop decides it at once). 422 names each
// field that cannot be a schedule (a cron that never fires, an unknown
// zone, an interval under 1s, a template that does not exist, params that
// do not fit it); 409 when the name is taken.
func (h *Handlers) CreateSchedule(ctx context.Context, req api.CreateScheduleRequestObject) (api.CreateScheduleResponseObject, error) {
	b := req.Body
	sc := store.Schedule{Project: req.Project, Domain: req.Domain, Name: b.Name, WorkflowName: string(b.Workflow.Name),
		WorkflowVersion: b.Workflow.Version, Params: deref(b.Params), Paused: deref(b.Paused),
		Spec: domain.ScheduleSpec{Cron: deref(b.Cron), Interval: deref(b.Interval), Timezone: deref(b.Timezone),
			Jitter: deref(b.Jitter), Overlap: string(deref(b.Overlap)), CatchupWindow: deref(b.CatchupWindow)}}
	var fieldErrs []domain.FieldError
	if !domain.ValidScheduleName(b.Name) {
		fieldErrs = append(fieldErrs, domain.FieldError{Field: "name", Message: fmt.Sprintf(
			"must be 1-%d characters of [a-z0-9-] starting and ending with a letter or digit", domain.MaxScheduleNameLen)})
	}
	errs, err := h.checkSchedule(ctx, sc, true)
	if err != nil {
		return nil, err
	}
	if fieldErrs = append(fieldErrs, errs...); len(fieldErrs) > 0 {
		return asUnprocessable[api.CreateSchedule422ApplicationProblemPlusJSONResponse](scheduleProblem(fieldErrs)), nil
	}
	now := time.Now().UTC()
	sc.CursorAt, sc.CheckAt = now, &now
	created, err := h.store.Schedules().CreateSchedule(ctx, sc)
	if p, ok := problemFor(err, subject{kind: "schedule", name: b.Name, in: req.Project + "/" + req.Domain}); ok &&
		p.Status == http.StatusConflict {
		return asConflict[api.CreateSchedule409ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("create schedule %s: %w", sc.Key(), err)
	}
	return api.CreateSchedule201JSONResponse(toSchedule(created, nil, now)), nil
}

// checkSchedule returns the problems of sc's spec, and, when withTemplate,
// of its template and params (the template read from the store).
// Errors: the store's.
func (h *Handlers) checkSchedule(ctx context.Context, sc store.Schedule, withTemplate bool) ([]domain.FieldError, error) {
	errs := sc.Spec.Validate("")
	if !withTemplate {
		return errs, nil
	}
	// A read of its own (a batch map), not the api's cache: a schedule
	// outlives the request, and a template deleted meanwhile is a 422.
	t, _, tplErrs, err := h.template(ctx, sc.Project, sc.Domain, api.WorkflowRef{Name: sc.WorkflowName,
		Version: sc.WorkflowVersion}, map[api.WorkflowRef]store.Template{})
	if err != nil || len(tplErrs) > 0 {
		return append(errs, tplErrs...), err
	}
	_, paramErrs := domain.ResolveParams(t.Spec.Params, sc.Params, "params")
	return append(errs, paramErrs...), nil
}

// scheduleProblem is the 422 invalid_request problem naming fieldErrs (at
// least one).
func scheduleProblem(fieldErrs []domain.FieldError) api.Problem {
	return apiProblem(http.StatusUnprocessableEntity, problem.CodeInvalid,
		fieldErrs[0].Field+": "+fieldErrs[0].Message, fieldErrs...)
}

// GetSchedule returns a schedule with its next times and recent runs.
func (h *Handlers) GetSchedule(ctx context.Context, req api.GetScheduleRequestObject) (api.GetScheduleResponseObject, error) {
	key := store.ScheduleKey{Project: req.Project, Domain: req.Domain, Name: req.Schedule}
	sc, err := h.store.Schedules().GetSchedule(ctx, key)
	if p, ok := problemFor(err, subject{kind: "schedule", name: req.Schedule}); ok && p.Status == http.StatusNotFound {
		return asNotFound[api.GetSchedule404ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read schedule %s: %w", key, err)
	}
	out, err := h.withRuns(ctx, sc)
	if err != nil {
		return nil, err
	}
	return api.GetSchedule200JSONResponse(out), nil
}

// ListSchedules returns a page of schedules by name.
func (h *Handlers) ListSchedules(ctx context.Context, req api.ListSchedulesRequestObject) (api.ListSchedulesResponseObject, error) {
	scs, next, err := h.store.Schedules().ListSchedules(ctx, req.Project, req.Domain, deref(req.Params.Cursor),
		deref(req.Params.Limit))
	if p, ok := problemFor(err, subject{}); ok && p.Status == http.StatusBadRequest {
		return asBadRequest[api.ListSchedules400ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("list schedules of %s/%s: %w", req.Project, req.Domain, err)
	}
	keys := make([]store.ScheduleKey, len(scs))
	for i, sc := range scs {
		keys[i] = sc.Key()
	}
	recent, err := h.store.Schedules().RecentScheduledRuns(ctx, keys, recentRuns)
	if err != nil {
		return nil, fmt.Errorf("read the recent runs of schedules of %s/%s: %w", req.Project, req.Domain, err)
	}
	now := time.Now().UTC()
	out := api.ScheduleList{Schedules: make([]api.Schedule, len(scs))}
	for i, sc := range scs {
		out.Schedules[i] = toSchedule(sc, recent[sc.Key()], now)
	}
	if next != "" {
		out.NextCursor = &next
	}
	return api.ListSchedules200JSONResponse(out), nil
}

// DeleteSchedule deletes a schedule; its runs stay.
func (h *Handlers) DeleteSchedule(ctx context.Context, req api.DeleteScheduleRequestObject) (api.DeleteScheduleResponseObject, error) {
	key := store.ScheduleKey{Project: req.Project, Domain: req.Domain, Name: req.Schedule}
	err := h.store.Schedules().DeleteSchedule(ctx, key)
	if p, ok := problemFor(err, subject{kind: "schedule", name: req.Schedule}); ok && p.Status == http.StatusNotFound {
		return asNotFound[api.DeleteSchedule404ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("delete schedule %s: %w", key, err)
	}
	return api.DeleteSchedule204Response{}, nil
}

// UpdateSchedule merges the fields given into the schedule and checks it
// again (its spec; its template and params when either is given): 422
// names each problem, and nothing changes. Times already decided stay as
// they were; `paused` pauses or unpauses as those operations do.
func (h *Handlers) UpdateSchedule(ctx context.Context, req api.UpdateScheduleRequestObject) (api.UpdateScheduleResponseObject, error) {
	key := store.ScheduleKey{Project: req.Project, Domain: req.Domain, Name: req.Schedule}
	b := req.Body
	sc, fieldErrs, err := h.changeSchedule(ctx, key, func(sc *store.Schedule, now time.Time) ([]domain.FieldError, error) {
		mergeSchedule(sc, b, now)
		return h.checkSchedule(ctx, *sc, b.Workflow != nil || b.Params != nil)
	})
	if p, ok := problemFor(err, subject{kind: "schedule", name: req.Schedule}); ok && p.Status == http.StatusNotFound {
		return asNotFound[api.UpdateSchedule404ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, err
	}
	if len(fieldErrs) > 0 {
		return asUnprocessable[api.UpdateSchedule422ApplicationProblemPlusJSONResponse](scheduleProblem(fieldErrs)), nil
	}
	out, err := h.withRuns(ctx, sc)
	if err != nil {
		return nil, err
	}
	return api.UpdateSchedule200JSONResponse(out), nil
}

// mergeSchedule sets the fields of b that are given on sc: cron clears
// interval and the other way round (both given is an error of the spec's);
// paused as setPaused does.
func mergeSchedule(sc *store.Schedule, b *api.UpdateScheduleJSONRequestBody, now time.Time) {
	if b.Workflow != nil {
		sc.WorkflowName, sc.WorkflowVersion = string(b.Workflow.Name), b.Workflow.Version
	}
	if b.Params != nil {
		sc.Params = *b.Params
	}
	spec := &sc.Spec
	if b.Cron != nil {
		spec.Cron, spec.Interval = *b.Cron, ""
	}
	if b.Interval != nil {
		spec.Interval = *b.Interval
		if b.Cron == nil {
			spec.Cron = ""
		}
	}
	for field, v := range map[*string]*string{&spec.Timezone: b.Timezone, &spec.Jitter: b.Jitter,
		&spec.CatchupWindow: b.CatchupWindow} {
		if v != nil {
			*field = *v
		}
	}
	if b.Overlap != nil {
		spec.Overlap = string(*b.Overlap)
	}
	if b.Paused != nil {
		setPaused(sc, *b.Paused, now)
	}
}

// setPaused pauses or unpauses sc at now: an unpaused schedule's times
// start after now (those while it was paused are not caught up).
func setPaused(sc *store.Schedule, paused bool, now time.Time) {
	if sc.Paused && !paused {
		sc.CursorAt = now
	}
	sc.Paused = paused
}

// changeSchedule is a read-modify-write of one schedule in one
// transaction: it locks the row (a firing holding it is waited for), has
// change set its fields at now, and, unless change returns field errors,
// writes it with check_at now, so that the firing loop decides it anew.
// It returns the schedule as written. Errors: ErrNotFound, change's, the
// store's.
func (h *Handlers) changeSchedule(ctx context.Context, key store.ScheduleKey,
	change func(sc *store.Schedule, now time.Time) ([]domain.FieldError, error)) (store.Schedule, []domain.FieldError, error) {
	var out store.Schedule
	var fieldErrs []domain.FieldError
	err := h.store.InTx(ctx, func(tx *store.Store) error {
		sc, err := tx.Schedules().LockSchedule(ctx, key)
		if err != nil {
			return err
		}
		now := time.Now().UTC()
		if fieldErrs, err = change(&sc, now); err != nil || len(fieldErrs) > 0 {
			return err
		}
		sc.CheckAt = &now
		out, err = tx.Schedules().UpdateSchedule(ctx, sc)
		return err
	})
	if err != nil {
		return store.Schedule{}, nil, fmt.Errorf("change schedule %s: %w", key, err)
	}
	return out, fieldErrs, nil
}

// withRuns is sc as the API shows it, with its recent runs read.
func (h *Handlers) withRuns(ctx context.Context, sc store.Schedule) (api.Schedule, error) {
	recent, err := h.store.Schedules().RecentScheduledRuns(ctx, []store.ScheduleKey{sc.Key()}, recentRuns)
	if err != nil {
		return api.Schedule{}, fmt.Errorf("read the recent runs of schedule %s: %w", sc.Key(), err)
	}
	return toSchedule(sc, recent[sc.Key()], time.Now().UTC()), nil
}

// toSchedule is sc as the API shows it at now, with its recent runs: its
// next 5 times from the later of its cursor and now (none while paused),
// its policies with their defaults.
func toSchedule(sc store.Schedule, recent []store.ScheduledRun, now time.Time) api.Schedule {
	spec := sc.Spec
	out := api.Schedule{Name: sc.Name, Workflow: api.WorkflowRef{Name: sc.WorkflowName, Version: sc.WorkflowVersion},
		Params: api.ParamValues(sc.Params), Cron: nonEmpty(spec.Cron), Interval: nonEmpty(spec.Interval),
		Timezone: nonEmpty(spec.Timezone), Jitter: nonEmpty(spec.Jitter), Paused: sc.Paused,
		Overlap: api.OverlapPolicy(spec.Overlap), CatchupWindow: spec.CatchupWindow,
		NextRunTimes: []time.Time{}, RecentRuns: make([]api.ScheduledRun, len(recent)),
		MissedCatchupWindow: sc.MissedCatchupWindow, SkippedOverlap: sc.SkippedOverlap, Buffered: len(sc.Buffered),
		CreatedAt: sc.CreatedAt, UpdatedAt: sc.UpdatedAt}
	if out.Params == nil {
		out.Params = api.ParamValues{}
	}
	if cal, err := spec.Calendar(); err == nil {
		out.Overlap = api.OverlapPolicy(cal.Overlap())
		out.CatchupWindow = cmpDuration(spec.CatchupWindow, cal.CatchupWindow())
		from := sc.CursorAt
		if now.After(from) {
			from = now
		}
		for t := from; !sc.Paused && len(out.NextRunTimes) < 5; {
			if t = cal.Next(t); t.IsZero() {
				break
			}
			out.NextRunTimes = append(out.NextRunTimes, t)
		}
	}
	for i, r := range recent {
		out.RecentRuns[i] = api.ScheduledRun{Name: r.Name, ScheduledAt: r.ScheduledAt, Phase: api.Phase(r.Phase)}
	}
	return out
}

// cmpDuration is set, or d written as a Go duration when set is empty.
func cmpDuration(set string, d time.Duration) string {
	if set != "" {
		return set
	}
	return d.String()
}

// nonEmpty is &s, or nil for "".
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
