package firing

import (
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the firing loop's: the scheduled times by outcome, and how
// late each run was created.
type metrics struct {
	times *prometheus.CounterVec
	delay prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		times: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "capstan_schedule_times_total",
			Help: "Scheduled times decided, by outcome: started, skipped_overlap, missed_catchup_window."}, []string{"outcome"}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "capstan_schedule_start_delay_seconds",
			Help:    "A scheduled run's created_at minus its scheduled time (jitter included).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
	}
	reg.MustRegister(m.times, m.delay)
	return m
}

// observe counts what one firing transaction committed: res's times and
// the runs it created.
func (l *Loop) observe(res Result, created []store.Run) {
	l.metrics.times.WithLabelValues("started").Add(float64(len(created)))
	l.metrics.times.WithLabelValues("skipped_overlap").Add(float64(res.Skipped))
	l.metrics.times.WithLabelValues("missed_catchup_window").Add(float64(res.Missed))
	for _, r := range created {
		if r.ScheduledAt != nil {
			l.metrics.delay.Observe(r.CreatedAt.Sub(*r.ScheduledAt).Seconds())
		}
	}
}
