package server

import (
	"context"
	"fmt"
	"net/http"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/problem"
)

// GetArchivedRun returns a run DeleteRun archived, as GET run answered
// before the delete (archive.Document.Detail, with its outputs and child
// runs), read from the archive. 404 when the run is not archived, or when
// the archive is off, the detail saying which; 503 when the archive
// cannot be read.
func (h *Handlers) GetArchivedRun(ctx context.Context, req api.GetArchivedRunRequestObject) (api.GetArchivedRunResponseObject, error) {
	key := domain.RunKey{Project: req.Project, Domain: req.Domain, Run: req.Run}
	if h.archive == nil {
		return asNotFound[api.GetArchivedRun404ApplicationProblemPlusJSONResponse](apiProblem(http.StatusNotFound,
			problem.CodeNotFound, "run "+key.String()+" is not archived: the archive is off (CAPSTAN_ARCHIVE_URL is not set)")), nil
	}
	doc, err := h.archive.Get(ctx, key)
	if p, ok := problemFor(err, subject{kind: "run", name: key.String()}); ok && p.Status == http.StatusNotFound {
		return asNotFound[api.GetArchivedRun404ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		h.log.Error("read archived run failed", "run", key.String(), "err", err)
		return asUnavailable[api.GetArchivedRun503ApplicationProblemPlusJSONResponse](apiProblem(http.StatusServiceUnavailable,
			problem.CodeArchiveUnavailable, fmt.Sprintf("run %s could not be read from the archive "+
				"(CAPSTAN_ARCHIVE_URL; the api's log has the cause)", key))), nil
	}
	return api.GetArchivedRun200JSONResponse(withChildren(toRun(doc.Detail(), doc.Outputs), doc.Children)), nil
}
