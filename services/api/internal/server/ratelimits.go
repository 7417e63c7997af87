package server

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
)

// PutRateLimit creates or replaces a project's rate limit (Hatchet's): 201
// created, 200 replaced (its buckets keep their tokens, refilled at the
// new rate); 422 naming limit or per when either is missing or out of
// range.
func (h *Handlers) PutRateLimit(ctx context.Context, req api.PutRateLimitRequestObject) (api.PutRateLimitResponseObject, error) {
	var fieldErrs []domain.FieldError
	b := deref(req.Body)
	if b.Limit == nil {
		fieldErrs = append(fieldErrs, domain.FieldError{Field: "limit", Message: "is required: tokens per period"})
	}
	if b.Per == nil {
		fieldErrs = append(fieldErrs, domain.FieldError{Field: "per", Message: "is required: 1s, 1m or 1h"})
	}
	if len(fieldErrs) == 0 {
		var rate domain.TokenRate
		if rate, fieldErrs = domain.ValidateRateLimit(*b.Limit, *b.Per); len(fieldErrs) == 0 {
			r, created, err := h.store.RateLimits().PutRateLimit(ctx, req.Project, req.RateLimit, rate)
			if err != nil {
				return nil, fmt.Errorf("put rate limit %s/%s: %w", req.Project, req.RateLimit, err)
			}
			if created {
				return api.PutRateLimit201JSONResponse(toRateLimit(r)), nil
			}
			return api.PutRateLimit200JSONResponse(toRateLimit(r)), nil
		}
	}
	return asUnprocessable[api.PutRateLimit422ApplicationProblemPlusJSONResponse](invalidProblem(fieldErrs)), nil
}

// ListRateLimits returns a page of the project's rate limits by name.
func (h *Handlers) ListRateLimits(ctx context.Context, req api.ListRateLimitsRequestObject) (api.ListRateLimitsResponseObject, error) {
	rs, next, err := h.store.RateLimits().ListRateLimits(ctx, req.Project, deref(req.Params.Cursor), deref(req.Params.Limit))
	if p, ok := problemFor(err, subject{}); ok && p.Status == http.StatusBadRequest {
		return asBadRequest[api.ListRateLimits400ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("list rate limits of %s: %w", req.Project, err)
	}
	out := api.RateLimitList{RateLimits: make([]api.RateLimit, len(rs))}
	for i, r := range rs {
		out.RateLimits[i] = toRateLimit(r)
	}
	if next != "" {
		out.NextCursor = &next
	}
	return api.ListRateLimits200JSONResponse(out), nil
}

// GetRateLimit returns one rate limit.
func (h *Handlers) GetRateLimit(ctx context.Context, req api.GetRateLimitRequestObject) (api.GetRateLimitResponseObject, error) {
	r, err := h.store.RateLimits().GetRateLimit(ctx, req.Project, req.RateLimit)
	if p, ok := problemFor(err, subject{kind: "rate limit", name: req.RateLimit}); ok && p.Status == http.StatusNotFound {
		return asNotFound[api.GetRateLimit404ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read rate limit %s: %w", req.RateLimit, err)
	}
	return api.GetRateLimit200JSONResponse(toRateLimit(r)), nil
}

// DeleteRateLimit deletes a rate limit and its buckets; a task that takes
// it waits PENDING until it is put again, and new runs naming it are 422.
func (h *Handlers) DeleteRateLimit(ctx context.Context, req api.DeleteRateLimitRequestObject) (api.DeleteRateLimitResponseObject, error) {
	err := h.store.RateLimits().DeleteRateLimit(ctx, req.Project, req.RateLimit)
	if p, ok := problemFor(err, subject{kind: "rate limit", name: req.RateLimit}); ok && p.Status == http.StatusNotFound {
		return asNotFound[api.DeleteRateLimit404ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("delete rate limit %s: %w", req.RateLimit, err)
	}
	return api.DeleteRateLimit204Response{}, nil
}

// toRateLimit is r as the API shows it.
func toRateLimit(r store.RateLimit) api.RateLimit {
	per := time.Duration(r.PerMs) * time.Millisecond
	name := per.String()
	for n, d := range domain.RatePeriods {
		if d == per {
			name = n
		}
	}
	return api.RateLimit{Name: r.Name, Limit: r.LimitCount, Per: name, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

// rateLimitNames reads a project's rate limit names at most once per
// request (a batch's runs share it), and only for a run whose steps take
// a rate limit. The zero value is ready; nil reads every time.
type rateLimitNames struct {
	names map[string]bool
	read  bool
}

// get returns the names, reading them on first use.
func (r *rateLimitNames) get(ctx context.Context, h *Handlers, project string) (map[string]bool, error) {
	if r != nil && r.read {
		return r.names, nil
	}
	names, err := h.store.RateLimits().RateLimitNames(ctx, project)
	if err != nil {
		return nil, fmt.Errorf("read rate limits of %s: %w", project, err)
	}
	if r != nil {
		r.names, r.read = names, true
	}
	return names, nil
}

// stepAdmissionProblems checks a run's step admission fields against the
// project and its params: each rate limit a step takes must be the
// project's (FieldError naming prefix.steps[i].rate_limits[j].name), and
// each step's keys must evaluate for every task index (0 to replicas-1,
// ITEM nil), naming the key's field. A spec whose steps take no rate limit
// and have no concurrency costs nothing. Errors: reading the names.
func (h *Handlers) stepAdmissionProblems(ctx context.Context, project string, spec domain.WorkflowSpec,
	params map[string]any, prefix string, limits *rateLimitNames) ([]domain.FieldError, error) {
	var errs []domain.FieldError
	for i, st := range spec.Steps {
		if !st.HasAdmission() {
			continue
		}
		at := prefix + ".steps[" + strconv.Itoa(i) + "]"
		if len(st.RateLimits) > 0 {
			names, err := limits.get(ctx, h, project)
			if err != nil {
				return nil, err
			}
			for j, r := range st.RateLimits {
				if !names[r.Name] {
					errs = append(errs, domain.FieldError{Field: at + ".rate_limits[" + strconv.Itoa(j) + "].name",
						Message: fmt.Sprintf("no rate limit named %s in project %s", r.Name, project)})
				}
			}
		}
		_, keyErrs := st.TaskAdmissions(params, st.ReplicaCount(), at)
		errs = append(errs, keyErrs...)
	}
	return errs, nil
}
