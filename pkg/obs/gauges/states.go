// Package gauges holds Prometheus collectors that read Postgres and asynq
// at most once per refresh interval, never once per scrape: the state
// counts (actions, tasks, workers) and the asynq queues.
package gauges

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultRefresh is how old the counts a scrape sees may be, when a
// collector's refresh interval is zero.
const DefaultRefresh = 10 * time.Second

// refreshTimeout bounds one refresh's query.
const refreshTimeout = 5 * time.Second

// StateCounter counts rows by state in one statement; store.Tasks is one.
type StateCounter interface {
	CountStates(ctx context.Context) (store.StateCounts, error)
}

var _ StateCounter = store.Tasks{}

// StateCollector exports capstan_actions_active{phase},
// capstan_tasks_active{state} and capstan_workers{state} from one grouped
// count (store.CountStates) taken at most once per refresh interval,
// whatever the scrape rate: a scrape within the interval serves the cached
// counts, and concurrent scrapes share one refresh. It is the Flyte
// executor's cachedPhaseCounter, which reads its cache instead of the API
// server on every collection. Every known phase and state is exported, at
// zero when no row has it. A failed refresh keeps the last counts (and is
// retried by the next scrape after the interval).
type StateCollector struct {
	counter StateCounter
	refresh time.Duration
	log     *slog.Logger

	actions, tasks, workers *prometheus.Desc

	// when, if set, gates the collector: it exports nothing while when
	// returns false (see When).
	when func() bool

	mu   sync.Mutex
	at   time.Time
	last store.StateCounts
	// refreshes counts the grouped counts taken.
	refreshes int
}

var _ prometheus.Collector = (*StateCollector)(nil)

// NewStateCollector returns a collector over c that refreshes at most every
// refresh (0: DefaultRefresh).
func NewStateCollector(c StateCounter, refresh time.Duration, log *slog.Logger) *StateCollector {
	return &StateCollector{counter: c, refresh: cmp.Or(refresh, DefaultRefresh), log: log,
		actions: prometheus.NewDesc("capstan_actions_active",
			"Actions (run roots and steps) by phase, from one grouped count per refresh interval.", []string{"phase"}, nil),
		tasks: prometheus.NewDesc("capstan_tasks_active",
			"Tasks by state (Iris's task states), from one grouped count per refresh interval.", []string{"state"}, nil),
		workers: prometheus.NewDesc("capstan_workers",
			"Registered workers by state (alive, dead), from one grouped count per refresh interval.", []string{"state"}, nil),
	}
}

// Describe sends the three descriptors.
func (c *StateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.actions
	ch <- c.tasks
	ch <- c.workers
}

// Collect sends the counts, refreshing them first when they are older than
// the refresh interval.
func (c *StateCollector) Collect(ch chan<- prometheus.Metric) {
	if c.when != nil && !c.when() {
		return
	}
	counts := c.counts()
	for _, p := range allPhases {
		ch <- prometheus.MustNewConstMetric(c.actions, prometheus.GaugeValue, float64(counts.Actions[string(p)]), string(p))
	}
	for st := domain.TaskPending; st <= domain.TaskPreempted; st++ {
		ch <- prometheus.MustNewConstMetric(c.tasks, prometheus.GaugeValue, float64(counts.Tasks[st.String()]), st.String())
	}
	for _, st := range []string{store.WorkerAlive, store.WorkerDead} {
		ch <- prometheus.MustNewConstMetric(c.workers, prometheus.GaugeValue, float64(counts.Workers[st]), st)
	}
}

// counts returns the cached counts, refreshed when they are stale.
func (c *StateCollector) counts() store.StateCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < c.refresh {
		return c.last
	}
	ctx, cancel := context.WithTimeout(context.Background(), refreshTimeout)
	defer cancel()
	c.at = time.Now()
	c.refreshes++
	counts, err := c.counter.CountStates(ctx)
	if err != nil {
		c.log.Warn("state counts not refreshed", "err", err)
		return c.last
	}
	c.last = counts
	return counts
}

// allPhases are the action phases exported even at zero.
var allPhases = []domain.Phase{domain.PhaseQueued, domain.PhaseWaitingForResources, domain.PhaseWaitingForCache,
	domain.PhaseRunning, domain.PhaseWaiting, domain.PhaseSucceeded, domain.PhaseFailed, domain.PhaseAborted, domain.PhaseTimedOut,
	domain.PhaseUnschedulable, domain.PhaseWorkerFailed, domain.PhasePaused, domain.PhaseSkipped}

// Refreshes returns how many grouped counts the collector has taken.
func (c *StateCollector) Refreshes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refreshes
}

// When makes the collector export (and so count) only while active
// returns true, e.g. only on the scheduling leader, so that replicas do not
// repeat the count and a sum over them stays right. It returns c.
func (c *StateCollector) When(active func() bool) *StateCollector {
	c.when = active
	return c
}
