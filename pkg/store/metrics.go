package store

import (
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"
)

// startKey is where a statement's start time waits for its end, in gorm's
// per-statement settings.
const startKey = "capstan:start"

// storePrefix is the qualified name of the package's functions, as the
// runtime names them; a method's follows with its receiver type, e.g.
// "Runs.LockRun" or "(*core).flushEvents".
const storePrefix = "github.com/capstan-run/capstan/pkg/store."

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
// nearest to it on the stack (the named statement, e.g. "LockForReport";
// InTx is skipped, so a transaction composed outside the store names each
// of its statements), else the nearest unexported one (e.g. "flushEvents",
// the events InTx inserts), else the statement's table ("table:actions"),
// else "unnamed". The set of names is bounded by the store's methods and
// tables. It reads the 10 frames nearest the statement (gorm's 2 or 3, then
// the Store's helper or method that issued it and the method that called
// that helper: a report batch's writes are ApplyReports') and the
// whole stack only when none of them is the Store's, and it names each
// return address once (methodAt), as walking and naming every frame of
// every statement would cost a share of each service's CPU.
func operation(tx *gorm.DB) string {
	table := ""
	if tx.Statement != nil {
		table = tx.Statement.Table
	}
	return operationAt(3, table)
}

// operationAt is operation for the statement issued skip frames above it
// (runtime.Callers's skip: 1 is operationAt's caller), of table.
func operationAt(skip int, table string) string {
	var near [10]uintptr
	n := runtime.Callers(skip+1, near[:])
	pcs := near[:n]
	if n == len(near) && !anyStoreMethod(pcs) {
		pcs = make([]uintptr, 64)
		pcs = pcs[:runtime.Callers(skip+1, pcs)]
	}
	nearest := ""
	for _, pc := range pcs {
		m := methodAt(pc)
		if m.exported {
			return m.name
		}
		if nearest == "" {
			nearest = m.name
		}
	}
	if nearest != "" {
		return nearest
	}
	if table != "" {
		return "table:" + table
	}
	return "unnamed"
}

// anyStoreMethod reports whether a Store method is among the frames of pcs.
func anyStoreMethod(pcs []uintptr) bool {
	for _, pc := range pcs {
		if methodAt(pc).name != "" {
			return true
		}
	}
	return false
}

// storeReceivers are the receiver types whose methods name operations: the
// Store, its core and the repositories.
var storeReceivers = map[string]bool{
	"(*Store)": true, "(*core)": true, "Runs": true, "Actions": true, "Tasks": true, "Attempts": true,
	"Placement": true, "Workers": true, "Aborts": true, "Events": true, "Logs": true, "Cache": true, "Tokens": true,
	"Templates": true, "Schedules": true, "Triggers": true, "RateLimits": true,
}

// storeMethod is the Store method a return address is in: its name (a
// closure's is its method's: DeregisterWorker.func1 → DeregisterWorker), and
// whether it is exported. Zero for a frame of another function, for InTx
// and for exec (the helper every Exec goes through).
type storeMethod struct {
	name     string
	exported bool
}

// methods caches methodAt by return address.
var methods sync.Map // uintptr → storeMethod

// methodAt returns the Store method return address pc is in, the
// innermost one when pc is in code inlined from several functions.
func methodAt(pc uintptr) storeMethod {
	if m, ok := methods.Load(pc); ok {
		return m.(storeMethod)
	}
	var m storeMethod
	frames := runtime.CallersFrames([]uintptr{pc})
	for more := true; more && m.name == ""; {
		var f runtime.Frame
		f, more = frames.Next()
		if name, ok := strings.CutPrefix(f.Function, storePrefix); ok {
			recv, name, isMethod := strings.Cut(name, ".")
			name, _, _ = strings.Cut(name, ".")
			if isMethod && storeReceivers[recv] && name != "InTx" && name != "inTx" && name != "exec" {
				m = storeMethod{name: name, exported: name[0] >= 'A' && name[0] <= 'Z'}
			}
		}
	}
	methods.Store(pc, m)
	return m
}
