package agent

import (
	"context"
	"errors"
	"time"

	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/google/uuid"
)

// heartbeat tells the control plane every HeartbeatInterval (and at once
// when Drain asks) which attempts the worker holds and whether it is
// draining, and stops those it names. It returns nil when ctx ends
// and ErrUnknownWorker when the control plane does not know the worker;
// other failures are logged and the next beat is tried.
func (a *Agent) heartbeat(ctx context.Context, id uuid.UUID) error {
	t := time.NewTicker(a.cfg.HeartbeatInterval)
	defer t.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-a.beatNow:
		}
		stop, err := a.client.Heartbeat(ctx, id, a.sup.Held(), a.isDraining())
		switch {
		case errors.Is(err, ErrUnknownWorker):
			return err
		case err != nil && ctx.Err() == nil:
			failures++
			a.log.Warn("heartbeat failed", "worker_id", id, "consecutive_failures", failures, "err", err)
			continue
		case err != nil:
			return nil
		}
		failures = 0
		for _, attemptID := range stop {
			if a.sup.Stop(attemptID, workerapi.Aborted, "the control plane asked the worker to stop it") {
				a.log.Info("stopping attempt on heartbeat reply", "attempt_id", attemptID)
			}
		}
	}
}
