// Package retention is the scheduler's reaper (Argo's ttlStrategy
// controller, Temporal's retention): while its replica leads, it deletes
// expired runs oldest first, in small batches, each batch its own short
// transaction (store.Runs.ReapExpired), archiving them first when an
// archive is set (ArchiveTo).
package retention

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/capstan-run/capstan/pkg/archive"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
)

// Config tunes the reaper.
type Config struct {
	// Defaults are the server's retention, for runs whose spec and project
	// say nothing about their outcome; the zero value keeps them.
	Defaults domain.TTL
	// Interval is how long the reaper waits after a round that found no
	// expired run left. Default 10s.
	Interval time.Duration
	// Batch is the most runs (roots; their child runs go with them) one
	// transaction deletes. Default 500.
	Batch int
	// Retry is how long a run that may not be deleted yet (an abort is
	// being delivered, an attempt is live) waits before it is tried
	// again. Default 1m.
	Retry time.Duration
	// Now is the reaper's clock. Default time.Now.
	Now func() time.Time
}

// Validate reports the settings that cannot work: a bad default duration
// (named Defaults.after_success…), a negative interval, batch or retry.
// Zero means the default.
func (c Config) Validate() error {
	var errs []error
	for _, e := range c.Defaults.Validate("Defaults") {
		errs = append(errs, e)
	}
	for name, d := range map[string]time.Duration{"Interval": c.Interval, "Retry": c.Retry} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s: %s is negative", name, d))
		}
	}
	if c.Batch < 0 {
		errs = append(errs, fmt.Errorf("batch: %d is negative", c.Batch))
	}
	return errors.Join(errs...)
}

func (c *Config) defaults() {
	c.Interval = cmp.Or(c.Interval, 10*time.Second)
	c.Batch = cmp.Or(c.Batch, 500)
	c.Retry = cmp.Or(c.Retry, time.Minute)
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Archive stores expired runs, each with its descendants, before they
// are deleted, and returns those it stored: the others (a run of the tree
// has not ended, the run is gone) are not deleted and wait Retry. An error
// (the bucket cannot be written) keeps them all.
type Archive func(ctx context.Context, keys []domain.RunKey) ([]domain.RunKey, error)

// ArchiveTo is the Archive of a: each run's tree (store.Runs.RunTree)
// archived whole, or the run left out when it is gone or a run of its tree
// has not ended.
func ArchiveTo(a *archive.Archive, st *store.Store) Archive {
	return func(ctx context.Context, keys []domain.RunKey) ([]domain.RunKey, error) {
		var stored []domain.RunKey
		for _, k := range keys {
			tree, err := st.Runs().RunTree(ctx, k)
			if err == nil {
				err = a.Put(ctx, st, tree...)
			}
			switch {
			case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrNotTerminal):
			case err != nil:
				return nil, fmt.Errorf("archive run %s: %w", k, err)
			default:
				stored = append(stored, k)
			}
		}
		return stored, nil
	}
}

// Enqueuer pushes a task (queue.Enqueuer).
type Enqueuer interface {
	Enqueue(ctx context.Context, t *asynq.Task, opts ...asynq.Option) error
}

// Reaper deletes expired runs while its replica leads.
type Reaper struct {
	store   *store.Store
	queue   Enqueuer
	archive Archive
	log     *slog.Logger
	cfg     Config
	deleted prometheus.Counter
	batches prometheus.Histogram
}

// New builds a reaper on st that tells the executors of the runs it
// deletes through q; archive may be nil (no archive). Its metrics go to
// reg.
func New(st *store.Store, q Enqueuer, archive Archive, log *slog.Logger, reg prometheus.Registerer, cfg Config) *Reaper {
	cfg.defaults()
	r := &Reaper{store: st, queue: q, archive: archive, log: log, cfg: cfg,
		deleted: prometheus.NewCounter(prometheus.CounterOpts{Name: "capstan_retention_runs_deleted_total",
			Help: "Runs the reaper deleted, child runs included."}),
		batches: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "capstan_retention_batch_seconds",
			Help: "How long one reaper batch took, archive and transaction.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
	}
	reg.MustRegister(r.deleted, r.batches)
	return r
}

// Publish writes the server's retention defaults as the settings of
// store.ServerSettings, which the expiry of every run that ends from then
// on reads (every replica publishes its own at start: run them alike).
func (r *Reaper) Publish(ctx context.Context) error {
	d := r.cfg.Defaults
	set := store.ProjectSettings{}
	if d != (domain.TTL{}) {
		set.Retention = &d
	}
	if err := r.store.Runs().SetSettings(ctx, store.ServerSettings, set, r.cfg.Now()); err != nil {
		return fmt.Errorf("publish retention defaults: %w", err)
	}
	return nil
}

// Run reaps, while leads reports true, until ctx ends: a round deletes
// batches until none is full, then waits Interval.
func (r *Reaper) Run(ctx context.Context, leads func() bool) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if leads() {
			if _, err := r.Round(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("retention round failed", "err", err)
			}
		}
		t.Reset(r.cfg.Interval)
	}
}

// Round deletes expired runs batch after batch until a batch finds fewer
// than Batch, and returns how many runs went (child runs included).
func (r *Reaper) Round(ctx context.Context) (int, error) {
	total := 0
	for ctx.Err() == nil {
		n, full, err := r.batch(ctx)
		total += n
		if err != nil || !full {
			return total, err
		}
	}
	return total, ctx.Err()
}

// batch archives and deletes one batch of expired runs; full is true when
// it found Batch of them (more may be waiting).
func (r *Reaper) batch(ctx context.Context) (n int, full bool, err error) {
	start := time.Now()
	now := r.cfg.Now()
	keys, err := r.store.Runs().ExpiredRuns(ctx, now, r.cfg.Batch)
	if err != nil || len(keys) == 0 {
		return 0, false, err
	}
	found := len(keys)
	postponed := 0
	if r.archive != nil {
		stored, err := r.archive(ctx, keys)
		if err != nil {
			return 0, false, err
		}
		if left := without(keys, stored); len(left) > 0 {
			if err := r.store.Runs().PostponeExpiry(ctx, left, now.Add(r.cfg.Retry)); err != nil {
				return 0, false, fmt.Errorf("postpone %d runs not archived: %w", len(left), err)
			}
			postponed = len(left)
		}
		keys = stored
	}
	res, err := r.store.Runs().ReapExpired(ctx, keys, now, r.cfg.Retry)
	if err != nil {
		return 0, false, fmt.Errorf("delete %d expired runs: %w", len(keys), err)
	}
	res.Postponed += postponed
	r.removeRunDirs(ctx, res)
	r.deleted.Add(float64(res.Runs))
	r.batches.Observe(time.Since(start).Seconds())
	if res.Runs > 0 || res.Postponed > 0 {
		r.log.Debug("expired runs deleted", "runs", res.Runs, "postponed", res.Postponed)
	}
	return res.Runs, found == r.cfg.Batch, nil
}

// removeRunDirs sends runs:remove, for the runs res deleted, to the queue
// of each worker that ran an attempt of them, a message per project and
// domain (an executor removes only what it has). A push that fails is
// logged: the executor's own sweep removes the directories.
func (r *Reaper) removeRunDirs(ctx context.Context, res store.Reaped) {
	if len(res.Workers) == 0 {
		return
	}
	byScope := map[[2]string][]string{}
	for _, k := range res.Deleted {
		scope := [2]string{k.Project, k.Domain}
		byScope[scope] = append(byScope[scope], k.Run)
	}
	for scope, runs := range byScope {
		slices.Sort(runs)
		for _, w := range res.Workers {
			if err := r.queue.Enqueue(ctx, queue.NewRunsRemoveTask(w, scope[0], scope[1], runs)); err != nil {
				r.log.Warn("enqueue run directory removal failed; the executor's sweep removes them",
					"worker_id", w, "runs", len(runs), "err", err)
			}
		}
	}
}

// without is keys less those of drop.
func without(keys, drop []domain.RunKey) []domain.RunKey {
	gone := make(map[domain.RunKey]bool, len(drop))
	for _, k := range drop {
		gone[k] = true
	}
	var out []domain.RunKey
	for _, k := range keys {
		if !gone[k] {
			out = append(out, k)
		}
	}
	return out
}
