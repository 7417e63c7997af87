package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
)

// DeleteRun deletes an ended run with its descendant runs and every row
// they own (store.Runs.DeleteRun), then tells the executors that ran their
// attempts to remove their run directories (removeRunDirs). 409
// not_terminal, naming the run that has not ended, or abort_pending, while
// an abort is being delivered or an attempt is live, changes nothing.
func (h *Handlers) DeleteRun(ctx context.Context, req api.DeleteRunRequestObject) (api.DeleteRunResponseObject, error) {
	key := domain.RunKey{Project: req.Project, Domain: req.Domain, Run: req.Run}
	deleted, err := h.store.Runs().DeleteRun(ctx, key)
	s := subject{kind: "run", name: key.String(), op: "delete"}
	var nt *store.NotTerminalError
	if errors.As(err, &nt) {
		s.blocker = fmt.Sprintf("run %s is %s", nt.Run, nt.Phase)
	}
	p, ok := problemFor(err, s)
	switch {
	case ok && p.Status == http.StatusNotFound:
		return embedded[api.DeleteRun404ApplicationProblemPlusJSONResponse](p), nil
	case ok && p.Status == http.StatusConflict:
		return api.DeleteRun409ApplicationProblemPlusJSONResponse(p), nil
	case err != nil:
		return nil, fmt.Errorf("delete run %s: %w", key, err)
	}
	h.log.Info("run deleted", "run", key.String(), "runs", len(deleted.Runs), "workers", len(deleted.Workers))
	h.removeRunDirs(ctx, key, deleted)
	return api.DeleteRun200JSONResponse{Deleted: deleted.Runs}, nil
}

// removeRunDirs sends runs:remove, for the runs deleted under key, to the
// queue of each worker that ran an attempt of them. A push that fails is
// logged: the executor's own sweep removes the directories.
func (h *Handlers) removeRunDirs(ctx context.Context, key domain.RunKey, deleted store.DeletedRuns) {
	for _, w := range deleted.Workers {
		t := queue.NewRunsRemoveTask(w, key.Project, key.Domain, deleted.Runs)
		if err := h.queue.Enqueue(ctx, t); err != nil {
			h.log.Warn("enqueue run directory removal failed; the executor's sweep removes them",
				"run", key.String(), "worker_id", w, "err", err)
		}
	}
}
