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

// The catalog's routes (Flyte's catalog): list a project's and domain's
// cache entries with their reservations, evict one, or evict every entry
// a filter selects.

// ListCacheEntries returns a page of the cache entries its filters select,
// newest first, each with its key's reservation when one is held. A cursor
// this API did not hand out is a 400.
func (h *Handlers) ListCacheEntries(ctx context.Context, req api.ListCacheEntriesRequestObject) (api.ListCacheEntriesResponseObject, error) {
	f := cacheFilter(req.Project, req.Domain, req.Params.Version, req.Params.Run, req.Params.Step, req.Params.CreatedBefore)
	if req.Params.Cursor != nil {
		f.Cursor = *req.Params.Cursor
	}
	if req.Params.Limit != nil {
		f.Limit = *req.Params.Limit
	}
	entries, next, err := h.store.Cache().ListCacheEntries(ctx, f)
	if p, ok := problemFor(err, subject{}); ok && p.Status == http.StatusBadRequest {
		return asBadRequest[api.ListCacheEntries400ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("list cache entries of %s/%s: %w", req.Project, req.Domain, err)
	}
	out := api.CacheEntryList{Entries: make([]api.CacheEntry, len(entries))}
	for i, e := range entries {
		out.Entries[i] = toCacheEntry(e)
	}
	if next != "" {
		out.NextCursor = &next
	}
	return api.ListCacheEntries200JSONResponse(out), nil
}

// DeleteCacheEntry evicts one cache entry: the next run of its key misses.
// An unknown key is a 404.
func (h *Handlers) DeleteCacheEntry(ctx context.Context, req api.DeleteCacheEntryRequestObject) (api.DeleteCacheEntryResponseObject, error) {
	err := h.store.Cache().DeleteCacheEntry(ctx, req.Project, req.Domain, req.Key)
	if p, ok := problemFor(err, subject{kind: "cache entry", name: req.Key}); ok && p.Status == http.StatusNotFound {
		return asNotFound[api.DeleteCacheEntry404ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("delete cache entry %q of %s/%s: %w", req.Key, req.Project, req.Domain, err)
	}
	return api.DeleteCacheEntry204Response{}, nil
}

// cacheDeleteBatch is how many entries one transaction of
// DeleteCacheEntries deletes: a batch of 1,000 of 100,000 entries takes
// about 4 ms on 2 cores (under 10 ms at worst), all that a write of one of
// its keys may wait.
const cacheDeleteBatch = 1000

// DeleteCacheEntries evicts every entry its filters select, batch after
// batch (store.DeleteCacheEntries, each its own transaction), and answers
// how many it deleted. With no filter it needs all=true, and all=true
// takes no filter: either way a 400 naming all, so that a bare DELETE
// never empties a domain. A request cut short keeps what it deleted.
func (h *Handlers) DeleteCacheEntries(ctx context.Context, req api.DeleteCacheEntriesRequestObject) (api.DeleteCacheEntriesResponseObject, error) {
	prm := req.Params
	f := cacheFilter(req.Project, req.Domain, prm.Version, prm.Run, prm.Step, prm.CreatedBefore)
	filtered := prm.Version != nil || prm.Run != nil || prm.Step != nil || prm.CreatedBefore != nil
	all := prm.All != nil && *prm.All
	if msg := cacheDeletionProblem(filtered, all); msg != "" {
		return asBadRequest[api.DeleteCacheEntries400ApplicationProblemPlusJSONResponse](apiProblem(http.StatusBadRequest,
			problem.CodeInvalid, "all: "+msg, domain.FieldError{Field: "all", Message: msg})), nil
	}
	var total int64
	var mark store.CacheMark
	for {
		n, next, err := h.store.Cache().DeleteCacheEntries(ctx, f, mark, cacheDeleteBatch)
		if err != nil {
			return nil, fmt.Errorf("delete cache entries of %s/%s after %d: %w", req.Project, req.Domain, total, err)
		}
		total, mark = total+n, next
		if n < cacheDeleteBatch {
			return api.DeleteCacheEntries200JSONResponse{Deleted: total}, nil
		}
	}
}

// cacheDeletionProblem is why a bulk delete with (filtered) or without a
// filter, and all set or not, is refused; "" when it is not.
func cacheDeletionProblem(filtered, all bool) string {
	switch {
	case !filtered && !all:
		return "set a filter (version, run, step, created_before), or all=true to delete every entry of the domain"
	case filtered && all:
		return "all=true deletes every entry: drop it to delete only what the filters select"
	}
	return ""
}

// cacheFilter is the store's filter of the cache routes' query parameters
// (nil: not set).
func cacheFilter(project, dom string, version, run, step *string, before *time.Time) store.CacheFilter {
	f := store.CacheFilter{Project: project, Domain: dom}
	for _, p := range []struct{ from, to *string }{{version, &f.Version}, {run, &f.Run}, {step, &f.Step}} {
		if p.from != nil {
			*p.to = *p.from
		}
	}
	if before != nil {
		f.CreatedBefore = *before
	}
	return f
}

// toCacheEntry is an entry as the API shows it; its reservation's owner is
// run/action.
func toCacheEntry(e store.CacheEntryDetail) api.CacheEntry {
	out := api.CacheEntry{Key: e.Key, Version: e.Version, Outputs: e.Outputs, CreatedAt: e.CreatedAt,
		ExpiresAt: e.ExpiresAt, Run: &e.RunName, Step: &e.ActionName}
	if out.Outputs == nil {
		out.Outputs = map[string]string{}
	}
	if r := e.Reservation; r != nil {
		out.Reservation = &api.CacheReservation{Owner: r.RunName + "/" + r.ActionName, ExpiresAt: r.ExpiresAt}
	}
	return out
}
