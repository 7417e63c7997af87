package server

import (
	"context"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/buildinfo"
)

// GetVersion answers the server's build (any valid token, by the spec's
// x-capstan-role).
func (h *Handlers) GetVersion(context.Context, api.GetVersionRequestObject) (api.GetVersionResponseObject, error) {
	b := buildinfo.Read()
	return api.GetVersion200JSONResponse{Version: b.Version, Commit: b.Commit, GoVersion: b.GoVersion}, nil
}
