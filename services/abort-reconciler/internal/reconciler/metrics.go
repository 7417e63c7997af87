package reconciler

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Resync outcomes, the values of capstan_abort_resync_enqueued_total's
// result label.
const (
	resultEnqueued  = "enqueued"
	resultDuplicate = "duplicate"
	resultRevived   = "revived"
)

// metrics are the reconciler's Prometheus series.
type metrics struct {
	// delivered counts aborts cleared with outcome delivered.
	delivered prometheus.Counter
	// alreadyTerminated counts live attempts found already gone: the
	// executor answered not found, or the worker is dead or deregistered.
	alreadyTerminated prometheus.Counter
	// retried counts failed delivery rounds scheduled for a retry.
	retried prometheus.Counter
	// givenUp counts aborts cleared with outcome needs_intervention.
	givenUp prometheus.Counter
	// resyncEnqueued counts the resync's pushes by result.
	resyncEnqueued *prometheus.CounterVec
	// deliverySeconds is the latency of one delivery round (one handler call).
	deliverySeconds prometheus.Histogram
	// completionSeconds is the time from abort_requested_at to the clear.
	completionSeconds prometheus.Histogram
	// pending is the number of pending aborts the last resync saw.
	pending prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		delivered: prometheus.NewCounter(prometheus.CounterOpts{Name: "capstan_aborts_delivered_total",
			Help: "Aborts cleared with outcome delivered: every live attempt was killed or found already gone."}),
		alreadyTerminated: prometheus.NewCounter(prometheus.CounterOpts{Name: "capstan_aborts_already_terminated_total",
			Help: "Live attempts found already terminated (executor answered not found, or worker dead or deregistered)."}),
		retried: prometheus.NewCounter(prometheus.CounterOpts{Name: "capstan_aborts_retried_total",
			Help: "Failed abort delivery rounds scheduled for a retry with full-jitter backoff."}),
		givenUp: prometheus.NewCounter(prometheus.CounterOpts{Name: "capstan_aborts_given_up_total",
			Help: "Aborts cleared with outcome needs_intervention after MaxAttempts failed rounds."}),
		resyncEnqueued: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "capstan_abort_resync_enqueued_total",
			Help: "Pending aborts pushed by the resync, by result: enqueued, duplicate (already queued), revived (archived task replaced)."},
			[]string{"result"}),
		deliverySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "capstan_abort_delivery_seconds",
			Help: "Latency of one abort delivery round (one handler call), in seconds.", Buckets: prometheus.DefBuckets}),
		completionSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "capstan_abort_completion_seconds",
			Help:    "Time from abort_requested_at to the abort's clear (either outcome), in seconds.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 15)}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "capstan_aborts_pending",
			Help: "Aborts with abort_requested_at set, as of the last resync."}),
	}
	for _, c := range []prometheus.Collector{m.delivered, m.alreadyTerminated, m.retried, m.givenUp,
		m.resyncEnqueued, m.deliverySeconds, m.completionSeconds, m.pending} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, r := range []string{resultEnqueued, resultDuplicate, resultRevived} {
		m.resyncEnqueued.WithLabelValues(r)
	}
	return m, nil
}
