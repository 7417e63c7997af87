package server

import (
	"context"
	"fmt"
	"net/http"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/store"
)

// The catalog's routes (Flyte's catalog): list a project's and domain's
// cache entries with their reservations, and evict one.

// ListCacheEntries returns a page of cache entries, newest first, each with
// its key's reservation when one is held. A cursor this API did not hand
// out is a 400.
func (h *Handlers) ListCacheEntries(ctx context.Context, req api.ListCacheEntriesRequestObject) (api.ListCacheEntriesResponseObject, error) {
	f := store.CacheFilter{Project: req.Project, Domain: req.Domain}
	if req.Params.Cursor != nil {
		f.Cursor = *req.Params.Cursor
	}
	if req.Params.Limit != nil {
		f.Limit = *req.Params.Limit
	}
	entries, next, err := h.store.Cache().ListCacheEntries(ctx, f)
	if p, ok := problemFor(err, subject{}); ok && p.Status == http.StatusBadRequest {
		return embedded[api.ListCacheEntries400ApplicationProblemPlusJSONResponse](p), nil
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
		return api.DeleteCacheEntry404ApplicationProblemPlusJSONResponse(p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("delete cache entry %q of %s/%s: %w", req.Key, req.Project, req.Domain, err)
	}
	return api.DeleteCacheEntry204Response{}, nil
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
