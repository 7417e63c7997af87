// Package history keeps the day partitions of Capstan's history tables
// (run_events, attempt_logs, attempt_log_chunks) while its replica leads:
// it makes the partitions of today and the coming days before rows need
// them, and drops the partitions that fell behind a horizon, a day of
// history at a time (store.History). It runs when its replica becomes
// leader, then every Interval.
package history

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/capstan-run/capstan/pkg/store"
	"github.com/prometheus/client_golang/prometheus"
)

// maxAhead is the most days ahead a Config may make partitions for.
const maxAhead = 90

// Config tunes the keeper.
type Config struct {
	// Interval is how long the keeper waits after a round. Default 1h.
	Interval time.Duration
	// Ahead is how many days after today get their partitions, 1 to 90.
	// Default 3.
	Ahead int
	// Retry is how long the keeper waits after a round that failed (a
	// lock not granted in time). Default 1m.
	Retry time.Duration
	// Poll is how often the keeper looks whether its replica leads: a
	// replica that became leader runs a round within Poll. Default 1s.
	Poll time.Duration
	// DropBefore returns the instant before which history may go at now:
	// the partitions whose whole day is before it are dropped; ok false
	// keeps every partition. Default: keep every partition.
	DropBefore func(now time.Time) (before time.Time, ok bool)
	// Now is the keeper's clock. Default time.Now.
	Now func() time.Time
}

// Validate reports the settings that cannot work: a negative duration, an
// Ahead out of range. Zero means the default.
func (c Config) Validate() error {
	var errs []error
	for name, d := range map[string]time.Duration{"Interval": c.Interval, "Retry": c.Retry, "Poll": c.Poll} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s: %s is negative", name, d))
		}
	}
	if c.Ahead < 0 || c.Ahead > maxAhead {
		errs = append(errs, fmt.Errorf("%s: %d days is not between 1 and %d", "Ahead", c.Ahead, maxAhead))
	}
	return errors.Join(errs...)
}

func (c *Config) defaults() {
	c.Interval = cmp.Or(c.Interval, time.Hour)
	c.Ahead = cmp.Or(c.Ahead, 3)
	c.Retry = cmp.Or(c.Retry, time.Minute)
	c.Poll = cmp.Or(c.Poll, time.Second)
	if c.DropBefore == nil {
		c.DropBefore = KeepAll
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// KeepAll is a Config.DropBefore that keeps every partition.
func KeepAll(time.Time) (time.Time, bool) { return time.Time{}, false }

// skewMargin is how much earlier than its run's creation a history row
// may be stamped (the clocks of the services that write them).
const skewMargin = time.Hour

// OldestRun is a Config.DropBefore that lets go the history from before
// the oldest run left (store.History.OldestRun), less skewMargin: whatever
// deleted the runs (a DELETE, the retention reaper) already deleted their
// rows one by one, so dropping the day they were in hands its space back
// with no vacuum. With no run left, history before now less the margin
// goes; a failed read keeps everything this round.
func OldestRun(st *store.Store, log *slog.Logger) func(now time.Time) (time.Time, bool) {
	return func(now time.Time) (time.Time, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		oldest, ok, err := st.History().OldestRun(ctx)
		if err != nil {
			log.Warn("read the oldest run for the history horizon", "err", err)
			return time.Time{}, false
		}
		if !ok {
			oldest = now
		}
		return oldest.Add(-skewMargin), true
	}
}

// Keeper makes and drops the history tables' partitions while its replica
// leads.
type Keeper struct {
	store   *store.Store
	log     *slog.Logger
	cfg     Config
	made    *prometheus.CounterVec
	dropped *prometheus.CounterVec
}

// New builds a keeper on st; its metrics go to reg.
func New(st *store.Store, log *slog.Logger, reg prometheus.Registerer, cfg Config) *Keeper {
	cfg.defaults()
	k := &Keeper{store: st, log: log, cfg: cfg,
		made: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "capstan_history_partitions_made_total",
			Help: "Day partitions of the history tables the keeper made, by table."}, []string{"table"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "capstan_history_partitions_dropped_total",
			Help: "Day partitions of the history tables the keeper dropped, by table."}, []string{"table"}),
	}
	reg.MustRegister(k.made, k.dropped)
	return k
}

// Result is what a round did.
type Result struct {
	// Made and Dropped are the partitions the round made and dropped.
	Made, Dropped []store.Partition
}

// Run runs rounds while leads reports true, until ctx ends: the first
// within Poll of the replica becoming leader, then one every Interval
// (Retry after a failed round) while it stays leader.
func (k *Keeper) Run(ctx context.Context, leads func() bool) {
	poll := time.NewTicker(k.cfg.Poll)
	defer poll.Stop()
	var next time.Time // zero: at once, once leading
	for {
		if !leads() {
			next = time.Time{}
		} else if now := k.cfg.Now(); !now.Before(next) {
			next = now.Add(k.cfg.Interval)
			if _, err := k.Round(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				k.log.Warn("history partitions round failed", "err", err)
				next = now.Add(k.cfg.Retry)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-poll.C:
		}
	}
}

// Round makes the partitions of today (the keeper's clock, UTC) and the
// Ahead days after it, and those of the days rows of a default partition
// fell in; then, when DropBefore gives a horizon, drops the partitions
// whose day is wholly before it.
func (k *Keeper) Round(ctx context.Context) (Result, error) {
	now := k.cfg.Now()
	var res Result
	made, err := k.store.History().EnsurePartitions(ctx, now, k.cfg.Ahead)
	res.Made = made
	k.count(k.made, made, "history partitions made")
	if err != nil {
		return res, err
	}
	before, ok := k.cfg.DropBefore(now)
	if !ok {
		return res, nil
	}
	dropped, err := k.store.History().DropPartitionsBefore(ctx, before)
	res.Dropped = dropped
	k.count(k.dropped, dropped, "history partitions dropped")
	return res, err
}

// count adds ps to c by table and logs them with msg.
func (k *Keeper) count(c *prometheus.CounterVec, ps []store.Partition, msg string) {
	if len(ps) == 0 {
		return
	}
	names := make([]string, len(ps))
	for i, p := range ps {
		c.WithLabelValues(p.Table).Inc()
		names[i] = p.Name()
	}
	k.log.Info(msg, "partitions", names)
}
