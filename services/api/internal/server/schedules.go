package server

import (
	"context"
	"errors"

	"github.com/capstan-run/capstan/pkg/api"
)

// errNotBuilt answers the operations whose handlers are not written yet.
var errNotBuiltSchedules = errors.New("not implemented")

// ListSchedules is not implemented yet.
func (h *Handlers) ListSchedules(ctx context.Context, req api.ListSchedulesRequestObject) (api.ListSchedulesResponseObject, error) {
	return nil, errNotBuiltSchedules
}

// CreateSchedule is not implemented yet.
func (h *Handlers) CreateSchedule(ctx context.Context, req api.CreateScheduleRequestObject) (api.CreateScheduleResponseObject, error) {
	return nil, errNotBuiltSchedules
}

// DeleteSchedule is not implemented yet.
func (h *Handlers) DeleteSchedule(ctx context.Context, req api.DeleteScheduleRequestObject) (api.DeleteScheduleResponseObject, error) {
	return nil, errNotBuiltSchedules
}

// GetSchedule is not implemented yet.
func (h *Handlers) GetSchedule(ctx context.Context, req api.GetScheduleRequestObject) (api.GetScheduleResponseObject, error) {
	return nil, errNotBuiltSchedules
}

// UpdateSchedule is not implemented yet.
func (h *Handlers) UpdateSchedule(ctx context.Context, req api.UpdateScheduleRequestObject) (api.UpdateScheduleResponseObject, error) {
	return nil, errNotBuiltSchedules
}

// BackfillSchedule is not implemented yet.
func (h *Handlers) BackfillSchedule(ctx context.Context, req api.BackfillScheduleRequestObject) (api.BackfillScheduleResponseObject, error) {
	return nil, errNotBuiltSchedules
}

// PauseSchedule is not implemented yet.
func (h *Handlers) PauseSchedule(ctx context.Context, req api.PauseScheduleRequestObject) (api.PauseScheduleResponseObject, error) {
	return nil, errNotBuiltSchedules
}

// TriggerSchedule is not implemented yet.
func (h *Handlers) TriggerSchedule(ctx context.Context, req api.TriggerScheduleRequestObject) (api.TriggerScheduleResponseObject, error) {
	return nil, errNotBuiltSchedules
}

// UnpauseSchedule is not implemented yet.
func (h *Handlers) UnpauseSchedule(ctx context.Context, req api.UnpauseScheduleRequestObject) (api.UnpauseScheduleResponseObject, error) {
	return nil, errNotBuiltSchedules
}
