// Package firing is the scheduler's firing loop: it starts the runs of
// schedules (Temporal's Schedules) at their scheduled times. Every replica
// runs it; exactly-once comes from Postgres: a firing locks the schedules
// it decides (SKIP LOCKED), creates their runs under names derived from
// the schedule and the scheduled time, and moves their cursors, in one
// transaction.
package firing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/prometheus/client_golang/prometheus"
)

// Config tunes the firing loop.
type Config struct {
	// Tick is how long the loop waits when no schedule is due sooner, and
	// how soon a schedule with buffered times is looked at again. Default
	// 1s.
	Tick time.Duration
	// BatchSize is the most schedules one firing transaction decides.
	// Default 500.
	BatchSize int
	// Workers is how many firing transactions a round runs at once.
	// Default 4.
	Workers int
	// AbortMaxRetry sizes the asynq retries of the aborts cancel_other
	// pushes. Default queue.AbortTaskRetries(10), for the reconciler's
	// default MaxAttempts.
	AbortMaxRetry int
	// Now is the loop's clock. Default time.Now.
	Now func() time.Time
}

// Validate reports the settings that cannot work: a negative duration or
// count. Zero means the default.
func (c Config) Validate() error {
	var errs []error
	if c.Tick < 0 {
		errs = append(errs, fmt.Errorf("%s: %s is negative", "Tick", c.Tick))
	}
	for name, n := range map[string]int{"BatchSize": c.BatchSize, "Workers": c.Workers, "AbortMaxRetry": c.AbortMaxRetry} {
		if n < 0 {
			errs = append(errs, fmt.Errorf("%s: %d is negative", name, n))
		}
	}
	return errors.Join(errs...)
}

func (c *Config) defaults() {
	c.Tick = cmp.Or(c.Tick, time.Second)
	c.BatchSize = cmp.Or(c.BatchSize, 500)
	c.Workers = cmp.Or(c.Workers, 4)
	c.AbortMaxRetry = cmp.Or(c.AbortMaxRetry, queue.AbortTaskRetries(10))
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Loop fires due schedules, round after round (runOnce).
type Loop struct {
	store   *store.Store
	queue   *queue.Enqueuer
	log     *slog.Logger
	cfg     Config
	metrics *metrics
	stopped chan struct{}
}

// New builds a firing loop on st that pushes the starts of the runs it
// creates, and the aborts cancel_other requests, through q; its metrics go
// to reg.
func New(st *store.Store, q *queue.Enqueuer, log *slog.Logger, reg prometheus.Registerer, cfg Config) *Loop {
	cfg.defaults()
	return &Loop{store: st, queue: q, log: log, cfg: cfg, metrics: newMetrics(reg), stopped: make(chan struct{})}
}

// Start runs the loop in a goroutine of its own until ctx ends, then
// closes Stopped. A round starts at once, then whenever the earliest
// check_at of any schedule comes, or after Tick, whichever is sooner.
func (l *Loop) Start(ctx context.Context) {
	go func() {
		defer close(l.stopped)
		timer := time.NewTimer(0)
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
			res, err := l.runOnce(ctx)
			if err != nil && ctx.Err() == nil {
				l.log.Warn("schedule firing round failed", "err", err)
			}
			timer.Reset(l.wait(res, err))
		}
	}()
}

// Stopped is closed once the loop Start began has ended.
func (l *Loop) Stopped() <-chan struct{} { return l.stopped }

// wait is how long the loop sleeps after a round that found res and
// failed with err: until the next check_at, at most Tick; Tick after a
// failure (the failed schedules are due still), and a tenth of it when the
// round decided nothing though a check is due (those schedules are held
// elsewhere: another replica's firing, an api change), instead of asking
// again at once until they are free.
func (l *Loop) wait(res Result, err error) time.Duration {
	if err != nil || res.NextCheckAt.IsZero() {
		return l.cfg.Tick
	}
	d := res.NextCheckAt.Sub(l.cfg.Now())
	if d <= 0 && res.Schedules == 0 {
		return l.cfg.Tick / 10
	}
	return min(max(d, 0), l.cfg.Tick)
}

// Result is what one round did.
type Result struct {
	// Schedules counts the schedules decided; Started the runs created;
	// Skipped and Missed the times not started (skipped_overlap,
	// missed_catchup_window); Cancelled the runs aborted by cancel_other.
	Schedules, Started, Skipped, Missed, Cancelled int
	// NextCheckAt is the earliest check_at after the round; zero when no
	// schedule has one, or the round could not read it.
	NextCheckAt time.Time
}

// add adds b's counts to r.
func (r *Result) add(b Result) {
	r.Schedules += b.Schedules
	r.Started += b.Started
	r.Skipped += b.Skipped
	r.Missed += b.Missed
	r.Cancelled += b.Cancelled
}

// holdStarts is the most created runs a round holds before it pushes their
// starts.
const holdStarts = 10000

// runOnce fires every schedule due now: Workers transactions at a time,
// each of up to BatchSize schedules (fireBatch), until a transaction finds
// fewer than a full batch due; then it pushes the starts of the runs they
// created (sooner when more than holdStarts wait) and reads the next
// check_at. Holding the starts to the round's end keeps the runs the first
// transactions created from starting, and taking the machine, while the
// later ones are still creating theirs: every schedule of a minute is
// created about as soon. Errors: the transactions' (each worker stops at
// its first), and the read's.
func (l *Loop) runOnce(ctx context.Context) (Result, error) {
	var (
		mu      sync.Mutex
		res     Result
		errs    []error
		created []store.Run
		wg      sync.WaitGroup
	)
	for range l.cfg.Workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				b, runs, err := l.fireBatch(ctx)
				mu.Lock()
				res.add(b)
				if err != nil {
					errs = append(errs, err)
				}
				created = append(created, runs...)
				var push []store.Run
				if len(created) >= holdStarts {
					push, created = created, nil
				}
				mu.Unlock()
				l.pushStarts(ctx, push)
				if err != nil || b.Schedules < l.cfg.BatchSize {
					return
				}
			}
		})
	}
	wg.Wait()
	l.pushStarts(ctx, created)
	next, ok, err := l.store.Schedules().NextCheckAt(ctx)
	if err != nil {
		errs = append(errs, fmt.Errorf("read the next check: %w", err))
	}
	if ok {
		res.NextCheckAt = next
	}
	return res, errors.Join(errs...)
}
