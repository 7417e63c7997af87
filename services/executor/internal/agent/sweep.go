package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/google/uuid"
	"github.com/hibiken/asynq"
)

// The sweep of the data directory: at the start of each session and every
// SweepInterval, the executor removes the run directories of runs the
// control plane no longer knows (deleted while their runs:remove message
// was lost, or while the executor was down) and the work directories of
// attempts no executor runs (left by an executor killed mid-attempt). It
// asks the api, since executors may share the data directory: a directory
// goes only when no run, and no live attempt of any worker, owns it, and
// never while an attempt this executor holds uses it (the supervisor's
// check).

// SweepResult counts what one sweep removed.
type SweepResult struct {
	// RunDirs and WorkDirs are the run and work directories removed.
	RunDirs, WorkDirs int
}

// sweepLoop sweeps at once and then every SweepInterval, until ctx ends; a
// failed sweep is logged and tried again at the next.
func (a *Agent) sweepLoop(ctx context.Context, worker uuid.UUID) {
	t := time.NewTicker(a.cfg.SweepInterval)
	defer t.Stop()
	for {
		res, err := a.Sweep(ctx, worker)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			a.log.Warn("sweep of the data directory failed; tried again later", "err", err,
				"run_dirs", res.RunDirs, "work_dirs", res.WorkDirs)
		case res.RunDirs+res.WorkDirs > 0:
			a.log.Info("leftover directories removed", "run_dirs", res.RunDirs, "work_dirs", res.WorkDirs)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sweep removes, asking the api as worker, the run directories of the
// runs it does not know and the work directories of the attempts that are
// not live, but for those of the attempts held here. Errors: the api's
// (what was removed before is counted).
func (a *Agent) Sweep(ctx context.Context, worker uuid.UUID) (SweepResult, error) {
	var res SweepResult
	keys, err := a.sup.RunDirs()
	if err != nil {
		a.log.Warn("some run directories could not be listed", "err", err)
	}
	if res.RunDirs, err = a.removeGoneRuns(ctx, worker, keys); err != nil {
		return res, err
	}
	ids, err := a.sup.WorkDirs()
	if err != nil || len(ids) == 0 {
		return res, err
	}
	live, err := a.client.LiveAttempts(ctx, worker, ids)
	if err != nil {
		return res, err
	}
	var ended []int64
	for _, id := range ids {
		if !live[id] {
			ended = append(ended, id)
		}
	}
	res.WorkDirs = len(a.sup.RemoveWorkDirs(ended))
	return res, nil
}

// removeGoneRuns removes the run directories of those of keys that the api
// says are not runs, but for those of attempts held here, and returns how
// many it removed. Errors: the api's.
func (a *Agent) removeGoneRuns(ctx context.Context, worker uuid.UUID, keys []domain.RunKey) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	found, err := a.client.ExistingRuns(ctx, worker, keys)
	if err != nil {
		return 0, err
	}
	var gone []domain.RunKey
	for _, k := range keys {
		if !found[k] {
			gone = append(gone, k)
		}
	}
	return len(a.sup.RemoveRunDirs(gone)), nil
}

// handleRunsRemove takes runs:remove (queue.NewRunsRemoveTask): it removes
// the run directories of the runs it names that the api no longer knows
// (a name may be a new run's by now), but for those of attempts held here.
// Errors: the api's, retried; a rejection wraps asynq.SkipRetry.
func (a *Agent) handleRunsRemove(ctx context.Context, worker uuid.UUID, t *asynq.Task) error {
	var p queue.RunsPayload
	if err := queue.Decode(t, &p); err != nil {
		return err
	}
	n, err := a.removeGoneRuns(ctx, worker, p.Keys())
	if errors.Is(err, ErrRejected) {
		return fmt.Errorf("remove the directories of %d runs of %s/%s: %w (%w)", len(p.Runs), p.Project, p.Domain,
			err, asynq.SkipRetry)
	}
	if err != nil {
		return fmt.Errorf("remove the directories of %d runs of %s/%s: %w", len(p.Runs), p.Project, p.Domain, err)
	}
	a.log.Info("run directories removed", "project", p.Project, "domain", p.Domain, "runs", len(p.Runs), "removed", n)
	return nil
}
