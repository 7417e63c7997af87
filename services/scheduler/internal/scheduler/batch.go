package scheduler

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/hibiken/asynq"
)

// handleRuns applies runs:start, a batch create's one message: it starts
// the named runs as run:start would, in transactions of up to
// maxStartBatch runs (startRuns), BatchWorkers at a time. A run that does
// not exist is skipped; any other failure fails the task, which asynq
// retries whole (advancing a started run again changes nothing).
func (s *Scheduler) handleRuns(ctx context.Context, t *asynq.Task) error {
	var p queue.RunsPayload
	if err := queue.Decode(t, &p); err != nil {
		return err
	}
	chunks := make(chan []domain.RunKey)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	keys := p.Keys()
	for range min(s.cfg.BatchWorkers, (len(keys)+maxStartBatch-1)/maxStartBatch) {
		wg.Go(func() {
			for chunk := range chunks {
				for i, err := range s.startRuns(ctx, chunk) {
					if errors.Is(err, asynq.SkipRetry) {
						s.log.Warn("batch run not found", "run", chunk[i].String())
						continue
					}
					if err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				}
			}
		})
	}
	for chunk := range slices.Chunk(keys, maxStartBatch) {
		chunks <- chunk
	}
	close(chunks)
	wg.Wait()
	return errors.Join(errs...)
}
