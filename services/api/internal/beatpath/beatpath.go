// Package beatpath stamps, while the api serves, that the heartbeat path
// works: every Every it records on Postgres's clock that this replica
// serves heartbeats (store.Workers.StampHeartbeatPath). The scheduler's
// liveness pass reads the stamp: when no replica stamped it for longer
// than its outage limit, executors could not heartbeat, and every
// worker's grace restarts instead of the fleet being declared dead
// (domain.GraceOrigin). A stamp is a fact, not a decision.
package beatpath

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/capstan-run/capstan/pkg/store"
)

// Config tunes the stamper.
type Config struct {
	// Every is the stamp period. Keep it well under the scheduler's outage
	// limit (half the worker grace by default): the api runs it at
	// min(WorkerGrace/4, 1s). Default 1s.
	Every time.Duration
}

// Stamper stamps the heartbeat path while it runs.
type Stamper struct {
	store *store.Store
	log   *slog.Logger
	cfg   Config
}

// New builds a stamper on st.
func New(st *store.Store, log *slog.Logger, cfg Config) *Stamper {
	cfg.Every = cmp.Or(cfg.Every, time.Second)
	return &Stamper{store: st, log: log, cfg: cfg}
}

// Run stamps at once, then every Every, until ctx ends. A failed stamp is
// logged once until one succeeds again; the next is tried on time.
func (s *Stamper) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Every)
	defer t.Stop()
	failing := false
	for {
		err := s.Stamp(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !failing:
			s.log.Warn("stamp the heartbeat path failed; retried", "err", err)
		case err == nil && failing:
			s.log.Info("heartbeat path stamped again")
		}
		failing = err != nil
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Stamp records one stamp, bounded by Every.
func (s *Stamper) Stamp(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Every)
	defer cancel()
	return s.store.Workers().StampHeartbeatPath(ctx)
}
