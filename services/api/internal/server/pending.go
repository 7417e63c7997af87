package server

import (
	"context"
	"errors"

	"github.com/capstan-run/capstan/pkg/api"
)

// errPending answers the routes whose handlers are being written.
var errPending = errors.New("not implemented yet")

// ListCacheEntries is not implemented yet.
func (h *Handlers) ListCacheEntries(context.Context, api.ListCacheEntriesRequestObject) (api.ListCacheEntriesResponseObject, error) {
	return nil, errPending
}

// DeleteCacheEntry is not implemented yet.
func (h *Handlers) DeleteCacheEntry(context.Context, api.DeleteCacheEntryRequestObject) (api.DeleteCacheEntryResponseObject, error) {
	return nil, errPending
}
