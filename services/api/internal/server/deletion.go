package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
)

// DeleteRun deletes an ended run with its descendant runs and every row
// they own (store.Runs.DeleteRun), then tells the executors that ran their
// attempts to remove their run directories (removeRunDirs). With the
// archive on, it first writes each of those runs to it
// (archive.Archive.Put): 503 archive_unavailable, deleting nothing, when
// one cannot be written. 409 not_terminal, naming the run that has not
// ended, or abort_pending, while an abort is being delivered or an attempt
// is live, changes nothing (but leaves the documents already written,
// which a later delete rewrites).
func (h *Handlers) DeleteRun(ctx context.Context, req api.DeleteRunRequestObject) (api.DeleteRunResponseObject, error) {
	key := domain.RunKey{Project: req.Project, Domain: req.Domain, Run: req.Run}
	if refused := h.archiveTree(ctx, key); refused != nil {
		return refused, nil
	}
	deleted, err := h.store.Runs().DeleteRun(ctx, key)
	if refused, ok := deleteRefusal(err, key); ok {
		return refused, nil
	}
	if err != nil {
		return nil, fmt.Errorf("delete run %s: %w", key, err)
	}
	h.log.Info("run deleted", "run", key.String(), "runs", len(deleted.Runs), "workers", len(deleted.Workers))
	h.removeRunDirs(ctx, key, deleted)
	return api.DeleteRun200JSONResponse{Deleted: deleted.Runs}, nil
}

// archiveTree writes key's run and its descendants (store.Runs.RunTree) to
// the archive, when it is on; it returns the answer of a delete it
// refuses (the run's 404 or 409, or 503 when the archive fails), nil when
// the delete may go on.
func (h *Handlers) archiveTree(ctx context.Context, key domain.RunKey) api.DeleteRunResponseObject {
	if h.archive == nil {
		return nil
	}
	keys, err := h.store.Runs().RunTree(ctx, key)
	if err == nil {
		err = h.archive.Put(ctx, h.store, keys...)
	}
	if refused, ok := deleteRefusal(err, key); ok {
		return refused
	}
	if err != nil {
		h.log.Error("archive before delete failed", "run", key.String(), "err", err)
		return asUnavailable[api.DeleteRun503ApplicationProblemPlusJSONResponse](apiProblem(http.StatusServiceUnavailable,
			problem.CodeArchiveUnavailable, "run "+key.String()+" was not deleted: it could not be archived first "+
				"(CAPSTAN_ARCHIVE_URL; the api's log has the cause); try again later"))
	}
	return nil
}

// deleteRefusal is the answer of a delete of key's run that err refuses:
// 404, or 409 not_terminal or abort_pending; false for any other err.
func deleteRefusal(err error, key domain.RunKey) (api.DeleteRunResponseObject, bool) {
	s := subject{kind: "run", name: key.String(), op: "delete"}
	var nt *store.NotTerminalError
	if errors.As(err, &nt) {
		s.blocker = fmt.Sprintf("run %s is %s", nt.Run, nt.Phase)
	}
	p, ok := problemFor(err, s)
	switch {
	case ok && p.Status == http.StatusNotFound:
		return asNotFound[api.DeleteRun404ApplicationProblemPlusJSONResponse](p), true
	case ok && p.Status == http.StatusConflict:
		return asConflict[api.DeleteRun409ApplicationProblemPlusJSONResponse](p), true
	}
	return nil, false
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
