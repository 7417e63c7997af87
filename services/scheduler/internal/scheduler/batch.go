package scheduler

import (
	"context"
	"errors"
	"sync"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/hibiken/asynq"
)

// handleRuns applies runs:start, a batch create's one message: it advances
// each named run as run:start would, BatchWorkers at a time. A run that does
// not exist is skipped; any other failure fails the task, which asynq
// retries whole (advancing a started run again changes nothing).
func (s *Scheduler) handleRuns(ctx context.Context, t *asynq.Task) error {
	var p queue.RunsPayload
	if err := queue.Decode(t, &p); err != nil {
		return err
	}
	keys := make(chan domain.RunKey)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range min(s.cfg.BatchWorkers, len(p.Runs)) {
		wg.Go(func() {
			for key := range keys {
				_, err := s.advance(ctx, key)
				if errors.Is(err, asynq.SkipRetry) {
					s.log.Warn("batch run not found", "run", key.String())
					continue
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, key := range p.Keys() {
		keys <- key
	}
	close(keys)
	wg.Wait()
	return errors.Join(errs...)
}
