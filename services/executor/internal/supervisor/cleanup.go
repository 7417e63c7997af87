package supervisor

import (
	"context"
	"errors"
	"time"

	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/services/executor/internal/plugin"
	"github.com/capstan-run/capstan/services/executor/internal/runner"
)

// Backoff between the tries of a cleanup step: doubled from the first up to
// the cap.
const (
	cleanupFirstDelay = 100 * time.Millisecond
	cleanupMaxDelay   = 5 * time.Second
)

// retry runs a stopped attempt's cleanup step (the plugin's Abort or
// Finalize) until it succeeds, with backoff; it gives up only when the
// supervisor shuts down (Close's deadline passed). It returns the step as
// the final report records it: when it ended, and the last error when a
// try failed. An Abort that leaves a process that would not die
// (runner.ErrStuck) also wakes the Abort calls waiting for the attempt, with
// its error.
func (s *Supervisor) retry(a *attempt, step workerapi.CleanupStepStep,
	do func(context.Context, *plugin.Task) error, t *plugin.Task) workerapi.CleanupStep {
	delay := cleanupFirstDelay
	var last error
	for try := 1; ; try++ {
		err := do(s.ctx, t)
		if err == nil {
			break
		}
		last = err
		s.log.Warn("cleanup step failed; retrying", "attempt_id", t.ID, "step", step, "try", try,
			"retry_in", delay.String(), "err", err)
		if step == workerapi.Abort && errors.Is(err, runner.ErrStuck) {
			a.markStuck(err)
		}
		timer := time.NewTimer(delay)
		select {
		case <-s.ctx.Done():
			timer.Stop()
			s.log.Error("cleanup step given up on shutdown", "attempt_id", t.ID, "step", step, "err", err)
			return cleanupStep(step, last)
		case <-timer.C:
		}
		delay = min(2*delay, cleanupMaxDelay)
	}
	return cleanupStep(step, last)
}

func cleanupStep(step workerapi.CleanupStepStep, err error) workerapi.CleanupStep {
	cs := workerapi.CleanupStep{Step: step, At: time.Now().UTC()}
	if err != nil {
		cs.Error = ptr(clip(err.Error()))
	}
	return cs
}
