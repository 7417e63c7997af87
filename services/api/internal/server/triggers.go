package server

import (
	"context"
	"errors"

	"github.com/capstan-run/capstan/pkg/api"
)

// errNotBuilt answers the operations whose handlers are not written yet.
var errNotBuiltTriggers = errors.New("not implemented")

// PublishEvent is not implemented yet.
func (h *Handlers) PublishEvent(ctx context.Context, req api.PublishEventRequestObject) (api.PublishEventResponseObject, error) {
	return nil, errNotBuiltTriggers
}

// GetPublishedEvent is not implemented yet.
func (h *Handlers) GetPublishedEvent(ctx context.Context, req api.GetPublishedEventRequestObject) (api.GetPublishedEventResponseObject, error) {
	return nil, errNotBuiltTriggers
}

// ListTriggers is not implemented yet.
func (h *Handlers) ListTriggers(ctx context.Context, req api.ListTriggersRequestObject) (api.ListTriggersResponseObject, error) {
	return nil, errNotBuiltTriggers
}

// CreateTrigger is not implemented yet.
func (h *Handlers) CreateTrigger(ctx context.Context, req api.CreateTriggerRequestObject) (api.CreateTriggerResponseObject, error) {
	return nil, errNotBuiltTriggers
}

// DeleteTrigger is not implemented yet.
func (h *Handlers) DeleteTrigger(ctx context.Context, req api.DeleteTriggerRequestObject) (api.DeleteTriggerResponseObject, error) {
	return nil, errNotBuiltTriggers
}

// GetTrigger is not implemented yet.
func (h *Handlers) GetTrigger(ctx context.Context, req api.GetTriggerRequestObject) (api.GetTriggerResponseObject, error) {
	return nil, errNotBuiltTriggers
}
