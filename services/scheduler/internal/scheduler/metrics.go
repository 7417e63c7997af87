package scheduler

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	placed      prometheus.Counter
	preempted   prometheus.Counter
	timedOut    prometheus.Counter
	evaluated   *prometheus.CounterVec
	runsEnded   *prometheus.CounterVec
	passSeconds prometheus.Histogram
	// admissions counts run admission decisions, by result (admitted,
	// waiting, ended); concurrencyCancels the runs cancel_in_progress
	// aborted.
	admissions         *prometheus.CounterVec
	concurrencyCancels prometheus.Counter
	// cacheSwept counts the catalog rows the cache sweep deleted, by kind
	// (entry, reservation).
	cacheSwept *prometheus.CounterVec
	// conditionSeconds times the evaluations of a run's step conditions
	// outside its transaction (judgeAndAdvance).
	conditionSeconds prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		placed: prometheus.NewCounter(prometheus.CounterOpts{Name: "capstan_scheduler_tasks_placed_total",
			Help: "Tasks assigned to a worker."}),
		preempted: prometheus.NewCounter(prometheus.CounterOpts{Name: "capstan_scheduler_attempts_preempted_total",
			Help: "Attempts evicted for a higher priority band."}),
		timedOut: prometheus.NewCounter(prometheus.CounterOpts{Name: "capstan_scheduler_tasks_timed_out_total",
			Help: "Tasks killed for running past their timeout."}),
		evaluated: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "capstan_scheduler_attempts_evaluated_total",
			Help: "Finished attempts applied to their task, by retry result."}, []string{"result"}),
		runsEnded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "capstan_scheduler_run_advances_terminal_total",
			Help: "Run advances that found the run terminal, by phase."}, []string{"phase"}),
		passSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "capstan_scheduler_pass_seconds",
			Help: "Duration of a scheduling pass.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "capstan_scheduler_admissions_total",
			Help: "Admission decisions of runs with a concurrency key, by result."}, []string{"result"}),
		concurrencyCancels: prometheus.NewCounter(prometheus.CounterOpts{Name: "capstan_scheduler_concurrency_cancels_total",
			Help: "Runs in progress aborted by a newer run of their concurrency key (cancel_in_progress)."}),
		cacheSwept: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "capstan_scheduler_cache_swept_total",
			Help: "Cache entries past their max_age and long-expired reservations deleted by the cache sweep, by kind."},
			[]string{"kind"}),
		conditionSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "capstan_scheduler_condition_seconds",
			Help:    "Duration of evaluating one run's step conditions, outside its transaction.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 12)}),
	}
	reg.MustRegister(m.placed, m.preempted, m.timedOut, m.evaluated, m.runsEnded, m.passSeconds, m.admissions,
		m.concurrencyCancels, m.cacheSwept, m.conditionSeconds)
	return m
}
