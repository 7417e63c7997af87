package server

import (
	"context"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
)

// GetProjectSettings returns a project's settings, empty until set (any
// reader of the project).
func (h *Handlers) GetProjectSettings(ctx context.Context, req api.GetProjectSettingsRequestObject) (api.GetProjectSettingsResponseObject, error) {
	set, err := h.store.Runs().Settings(ctx, req.Project)
	if err != nil {
		return nil, fmt.Errorf("read settings of %s: %w", req.Project, err)
	}
	return api.GetProjectSettings200JSONResponse(toSettings(set)), nil
}

// SetProjectSettings replaces a project's settings (admin, by the spec's
// x-capstan-role); 422 naming the retention field that is not a duration
// from 0 to domain.MaxRetention.
func (h *Handlers) SetProjectSettings(ctx context.Context, req api.SetProjectSettingsRequestObject) (api.SetProjectSettingsResponseObject, error) {
	var set store.ProjectSettings
	if r := req.Body.Retention; r != nil {
		set.Retention = &domain.TTL{AfterSuccess: deref(r.AfterSuccess), AfterFailure: deref(r.AfterFailure),
			AfterCompletion: deref(r.AfterCompletion)}
		if *set.Retention == (domain.TTL{}) {
			set.Retention = nil
		}
	}
	if errs := set.Retention.Validate("retention"); len(errs) > 0 {
		return asUnprocessable[api.SetProjectSettings422ApplicationProblemPlusJSONResponse](invalidProblem(errs)), nil
	}
	if err := h.store.Runs().SetSettings(ctx, req.Project, set, time.Now()); err != nil {
		return nil, fmt.Errorf("set settings of %s: %w", req.Project, err)
	}
	h.log.Info("project settings set", "project", req.Project)
	return api.SetProjectSettings200JSONResponse(toSettings(set)), nil
}

func toSettings(set store.ProjectSettings) api.ProjectSettings {
	var out api.ProjectSettings
	if r := set.Retention; r != nil {
		out.Retention = &api.TTL{AfterSuccess: nonEmpty(r.AfterSuccess), AfterFailure: nonEmpty(r.AfterFailure),
			AfterCompletion: nonEmpty(r.AfterCompletion)}
	}
	return out
}
