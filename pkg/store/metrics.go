package store

import (
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"
)

// startKey is where a statement's start time waits for its end, in gorm's
// per-statement settings.
const startKey = "capstan:start"

// storePrefix is the qualified name of the Store's methods, as the runtime
// reports them.
const storePrefix = "github.com/capstan-run/capstan/pkg/store.(*Store)."

// NewOperationSeconds returns capstan_db_operation_duration_seconds, the
// histogram of the store's statements by operation, for Config.Metrics. It
// is the Flyte executor's taskaction.k8s.duration (the latency of each call
// to the system of record), for Postgres.
func NewOperationSeconds() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "capstan_db_operation_duration_seconds",
		Help:    "Duration of the store's SQL statements, in seconds, by operation (the named store statement that issued it).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}, []string{"operation"})
}

// instrument times every statement db runs (create, query, update, delete,
// row, raw) into h. Errors: gorm refuses a callback name (a bug).
func instrument(db *gorm.DB, h *prometheus.HistogramVec) error {
	start := func(tx *gorm.DB) { tx.InstanceSet(startKey, time.Now()) }
	end := func(tx *gorm.DB) {
		if v, ok := tx.InstanceGet(startKey); ok {
			if t, ok := v.(time.Time); ok {
				h.WithLabelValues(operation(tx)).Observe(time.Since(t).Seconds())
			}
		}
	}
	cb := db.Callback()
	for _, err := range []error{
		cb.Create().Before("gorm:create").Register("capstan:start_create", start),
		cb.Create().After("gorm:create").Register("capstan:end_create", end),
		cb.Query().Before("gorm:query").Register("capstan:start_query", start),
		cb.Query().After("gorm:query").Register("capstan:end_query", end),
		cb.Update().Before("gorm:update").Register("capstan:start_update", start),
		cb.Update().After("gorm:update").Register("capstan:end_update", end),
		cb.Delete().Before("gorm:delete").Register("capstan:start_delete", start),
		cb.Delete().After("gorm:delete").Register("capstan:end_delete", end),
		cb.Row().Before("gorm:row").Register("capstan:start_row", start),
		cb.Row().After("gorm:row").Register("capstan:end_row", end),
		cb.Raw().Before("gorm:raw").Register("capstan:start_raw", start),
		cb.Raw().After("gorm:raw").Register("capstan:end_raw", end),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// operation names the statement tx just ran: the exported Store method
// nearest to it on the stack (the named statement, e.g. "ReportAttempt";
// InTx is skipped, so a transaction composed outside the store names each
// of its statements), else the statement's table ("table:actions"), else
// "unnamed". The set of names is bounded by the store's methods and tables.
func operation(tx *gorm.DB) string {
	pcs := make([]uintptr, 64)
	n := runtime.Callers(3, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if name, ok := strings.CutPrefix(f.Function, storePrefix); ok {
			name, _, _ = strings.Cut(name, ".") // ReportAttempt.func1 → ReportAttempt
			if name != "" && name != "InTx" && name[0] >= 'A' && name[0] <= 'Z' {
				return name
			}
		}
		if !more {
			break
		}
	}
	if tx.Statement != nil && tx.Statement.Table != "" {
		return "table:" + tx.Statement.Table
	}
	return "unnamed"
}
