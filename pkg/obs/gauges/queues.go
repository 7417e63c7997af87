package gauges

import (
	"cmp"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
)

// QueueInspector reads asynq's queues; *asynq.Inspector is one.
type QueueInspector interface {
	Queues() ([]string, error)
	GetQueueInfo(queue string) (*asynq.QueueInfo, error)
}

var _ QueueInspector = (*asynq.Inspector)(nil)

// QueueCollector exports capstan_queue_tasks{queue,state} (pending, active,
// scheduled, retry, archived, completed) and capstan_queue_latency_seconds
// {queue} (the age of the oldest pending task) of every asynq queue, read
// from the asynq inspector at most once per refresh interval, like
// StateCollector. The executors' queues (worker:<id>, a new one each time
// an executor registers) are summed under queue="worker", their latency
// the largest, so the series stay bounded. A queue whose read fails is left
// out of that refresh.
type QueueCollector struct {
	in      QueueInspector
	refresh time.Duration
	log     *slog.Logger

	tasks, latency *prometheus.Desc

	// when, if set, gates the collector: it exports nothing while when
	// returns false (see When).
	when func() bool

	mu   sync.Mutex
	at   time.Time
	last []*asynq.QueueInfo
}

var _ prometheus.Collector = (*QueueCollector)(nil)

// NewQueueCollector returns a collector over in that refreshes at most
// every refresh (0: DefaultRefresh).
func NewQueueCollector(in QueueInspector, refresh time.Duration, log *slog.Logger) *QueueCollector {
	return &QueueCollector{in: in, refresh: cmp.Or(refresh, DefaultRefresh), log: log,
		tasks: prometheus.NewDesc("capstan_queue_tasks", "Tasks in each asynq queue by state.",
			[]string{"queue", "state"}, nil),
		latency: prometheus.NewDesc("capstan_queue_latency_seconds",
			"Age in seconds of the oldest pending task of each asynq queue (0 when none is pending).",
			[]string{"queue"}, nil),
	}
}

// Describe sends the two descriptors.
func (c *QueueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.tasks
	ch <- c.latency
}

// Collect sends every queue's counts and latency.
func (c *QueueCollector) Collect(ch chan<- prometheus.Metric) {
	if c.when != nil && !c.when() {
		return
	}
	for name, q := range group(c.infos()) {
		for state, n := range map[string]int{"pending": q.Pending, "active": q.Active, "scheduled": q.Scheduled,
			"retry": q.Retry, "archived": q.Archived, "completed": q.Completed} {
			ch <- prometheus.MustNewConstMetric(c.tasks, prometheus.GaugeValue, float64(n), name, state)
		}
		ch <- prometheus.MustNewConstMetric(c.latency, prometheus.GaugeValue, q.Latency.Seconds(), name)
	}
}

// workerQueues is the label of the executors' queues, summed.
const workerQueues = "worker"

// group returns the queues by label: each by its name, the worker:<id>
// queues together under "worker" (counts summed, latency the largest).
func group(infos []*asynq.QueueInfo) map[string]asynq.QueueInfo {
	out := make(map[string]asynq.QueueInfo, len(infos))
	for _, q := range infos {
		name := q.Queue
		if strings.HasPrefix(name, workerQueues+":") {
			name = workerQueues
		}
		g := out[name]
		g.Pending += q.Pending
		g.Active += q.Active
		g.Scheduled += q.Scheduled
		g.Retry += q.Retry
		g.Archived += q.Archived
		g.Completed += q.Completed
		g.Latency = max(g.Latency, q.Latency)
		out[name] = g
	}
	return out
}

// infos returns the cached queue infos, refreshed when they are stale.
func (c *QueueCollector) infos() []*asynq.QueueInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < c.refresh {
		return c.last
	}
	c.at = time.Now()
	names, err := c.in.Queues()
	if err != nil {
		c.log.Warn("queue metrics not refreshed", "err", err)
		return c.last
	}
	infos := make([]*asynq.QueueInfo, 0, len(names))
	for _, name := range names {
		info, err := c.in.GetQueueInfo(name)
		if err != nil {
			c.log.Debug("queue not read", "queue", name, "err", err)
			continue
		}
		infos = append(infos, info)
	}
	c.last = infos
	return infos
}

// When makes the collector export (and so count) only while active
// returns true, e.g. only on the scheduling leader, so that replicas do not
// repeat the count and a sum over them stays right. It returns c.
func (c *QueueCollector) When(active func() bool) *QueueCollector {
	c.when = active
	return c
}
