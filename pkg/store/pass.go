package store

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// passConn is the one connection of Pass, and what decides when its plans
// are made again (replanPass).
type passConn struct {
	st *Store
	mu sync.Mutex
	// mark is the row id the plans were last dropped at (0: never), and at
	// when.
	mark int64
	at   time.Time
}

// openPass opens the pass's pool (poolPass): one connection that keeps a generic plan of
// each statement (plan_cache_mode = force_generic_plan) and costs a random
// page read near a sequential one (random_page_cost = 1.1, the usual
// setting on SSDs): a generic plan does not know how many keys an array
// holds, and at the default 4 the one of AssignTasks hashed a sequential
// scan of the tasks from about 1,800 tasks on, where an index scan is what
// a pass's few tasks need. JIT is off: the pass's read of PENDING tasks
// (pendingTasksSQL) is estimated far above jit_above_cost by the rows its
// CTEs might hold, and compiling it costs hundreds of milliseconds for a
// statement that runs in a few.
func openPass(dsn string, root *core, ops *prometheus.HistogramVec) (*passConn, error) {
	db, err := openPool(dsn, map[string]string{"plan_cache_mode": "force_generic_plan", "random_page_cost": "1.1",
		"jit": "off"}, 1, ops)
	if err != nil {
		return nil, err
	}
	return &passConn{st: &Store{&core{db: db, root: root, ops: ops}}, at: time.Now()}, nil
}

// replanPass tells the pass's connection (poolPass) that the tables hold rows
// up to id (a task id: ids grow with every table a pass reads); PendingWork
// calls it with the newest task it read. The connection keeps one generic
// plan of each statement, made at its first call: the leader makes a
// pass's statements one after the other, several times a second, and
// planning them at each call cost more than running them. replanPass drops its
// plans (DISCARD PLANS: its statements stay prepared), so that the next
// call of each plans it for the tables as they are, once id is at least
// twice the one they were last dropped at plus replanRows, or replanEvery
// after they were: a plan made on a new database's nearly empty tables
// scans them whole, which costs nothing there and grows with them. A
// plan is so made for at least half the rows it reads, or is at most
// replanEvery old. In a transaction it drops them on the transaction's
// connection, the pass's (none in a transaction on another pool). It
// reports whether it dropped them. Errors: Postgres's.
func (s *core) replanPass(ctx context.Context, id int64) (bool, error) {
	pc := s.root.pass
	if pc == nil {
		return false, nil
	}
	on := pc.st.core
	if s.tx != nil { // the pass's transaction holds its one connection
		if s.tx.pool != on {
			return false, nil
		}
		on = s
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if id < 2*pc.mark+replanRows && time.Since(pc.at) < replanEvery {
		return false, nil
	}
	if err := on.q(ctx).Exec("DISCARD PLANS").Error; err != nil {
		return false, mapErr(err)
	}
	pc.mark, pc.at = max(pc.mark, id), time.Now()
	return true, nil
}

// replanPass's bounds: the first plans, made on empty tables, last until the
// tables hold about replanRows rows; no plan is kept longer than
// replanEvery (a backlog of tasks that no pass places grows the tables
// without growing the ids a pass sees).
const (
	replanRows  = 256
	replanEvery = 10 * time.Second
)
