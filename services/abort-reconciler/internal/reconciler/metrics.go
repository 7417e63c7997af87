package reconciler

import (
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/prometheus/client_golang/prometheus"
)

// Resync outcomes, the values of capstan_abort_resync_enqueued_total's
// result label.
const (
	resultEnqueued  = "enqueued"
	resultDuplicate = "duplicate"
	resultRevived   = "revived"
)

// metrics are the reconciler's Prometheus series. Every series has a kind
// label: kindAction (an action's abort) or kindAttempt (an attempt's kill).
type metrics struct {
	// requested counts requests taken up: rounds that counted attempt 1.
	requested *prometheus.CounterVec
	// delivered counts requests cleared with outcome delivered.
	delivered *prometheus.CounterVec
	// alreadyTerminated counts live attempts found already gone: the
	// executor answered not found, or the worker is dead or deregistered.
	alreadyTerminated *prometheus.CounterVec
	// retried counts failed delivery rounds scheduled for a retry.
	retried *prometheus.CounterVec
	// givenUp counts requests cleared with outcome needs_intervention.
	givenUp *prometheus.CounterVec
	// resyncEnqueued counts the resync's pushes by kind and result.
	resyncEnqueued *prometheus.CounterVec
	// deliverySeconds is the latency of one delivery round (one handler call).
	deliverySeconds *prometheus.HistogramVec
	// completionSeconds is the time from the request to its clear, by kind
	// and outcome.
	completionSeconds *prometheus.HistogramVec
	// pending is the number of pending requests the last resync saw.
	pending *prometheus.GaugeVec
	// cascaded counts child runs whose abort an action's abort recorded.
	cascaded prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	kind := []string{"kind"}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, kind)
	}
	m := &metrics{
		requested: counter("capstan_aborts_requested_total",
			"Abort and kill requests taken up by the reconciler (their first counted delivery round)."),
		delivered: counter("capstan_aborts_delivered_total",
			"Requests cleared with outcome delivered: every live attempt was killed or found already gone."),
		alreadyTerminated: counter("capstan_aborts_already_terminated_total",
			"Live attempts found already terminated (executor answered not found, or worker dead or deregistered)."),
		retried: counter("capstan_aborts_retried_total",
			"Failed delivery rounds scheduled for a retry with full-jitter backoff."),
		givenUp: counter("capstan_aborts_given_up_total",
			"Requests cleared with outcome needs_intervention after MaxAttempts failed rounds."),
		resyncEnqueued: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "capstan_abort_resync_enqueued_total",
			Help: "Pending requests pushed by the resync, by result: enqueued, duplicate (already queued), revived (archived task replaced)."},
			[]string{"kind", "result"}),
		deliverySeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "capstan_abort_delivery_seconds",
			Help: "Latency of one delivery round (one handler call), in seconds.", Buckets: prometheus.DefBuckets}, kind),
		completionSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "capstan_abort_completion_seconds",
			Help:    "Time from the request (abort_requested_at, kill_requested_at) to its clear, by outcome, in seconds.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 15)}, []string{"kind", "outcome"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "capstan_aborts_pending",
			Help: "Requests pending (abort_requested_at or kill_requested_at set), as of the last resync."}, kind),
		cascaded: prometheus.NewCounter(prometheus.CounterOpts{Name: "capstan_abort_child_runs_total",
			Help: "Child runs (of workflow steps) whose abort the abort of a parent action recorded."}),
	}
	for _, c := range []prometheus.Collector{m.requested, m.delivered, m.alreadyTerminated, m.retried, m.givenUp,
		m.resyncEnqueued, m.deliverySeconds, m.completionSeconds, m.pending, m.cascaded} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Every series exists from the start, at zero.
	for _, k := range []string{kindAction, kindAttempt} {
		for _, v := range []*prometheus.CounterVec{m.requested, m.delivered, m.alreadyTerminated, m.retried, m.givenUp} {
			v.WithLabelValues(k)
		}
		for _, r := range []string{resultEnqueued, resultDuplicate, resultRevived} {
			m.resyncEnqueued.WithLabelValues(k, r)
		}
		for _, o := range []string{store.AbortDelivered, store.AbortNeedsIntervention} {
			m.completionSeconds.WithLabelValues(k, o)
		}
		m.deliverySeconds.WithLabelValues(k)
		m.pending.WithLabelValues(k)
	}
	return m, nil
}
