package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/google/uuid"
)

// Worker states.
const (
	WorkerAlive = "alive"
	WorkerDead  = "dead"
)

// NewWorker is what RegisterWorker inserts.
type NewWorker struct {
	Name    string
	Address string
	// Slots is how many attempts the worker runs at once.
	Slots int
	// Resources is what it offers; zero fields are undeclared (unlimited).
	Resources domain.Resources
	Labels    map[string]string
}

// WorkerLoad is a worker with what its live attempts hold: how many, and
// their resources.
type WorkerLoad struct {
	Worker
	Used            int
	UsedCPUMillis   int64 `gorm:"column:used_cpu_millis"`
	UsedMemoryBytes int64
}

// RegisterWorker inserts a worker under a new identity.
func (s *Store) RegisterWorker(ctx context.Context, nw NewWorker) (Worker, error) {
	labels, err := json.Marshal(nw.Labels)
	if err != nil {
		return Worker{}, err
	}
	if nw.Labels == nil {
		labels = []byte("{}")
	}
	w := Worker{ID: uuid.NewString(), Name: nw.Name, Address: nw.Address, Slots: nw.Slots,
		CPUMillis: nw.Resources.CPUMillis, MemoryBytes: nw.Resources.MemoryBytes, Labels: labels,
		Failures: []byte("{}"), State: WorkerAlive, Version: 1, LastHeartbeatAt: time.Now().UTC()}
	return w, mapErr(s.q(ctx).Create(&w).Error)
}

// ListWorkers returns every worker with its load, oldest first.
func (s *Store) ListWorkers(ctx context.Context) ([]WorkerLoad, error) {
	return s.workerLoads(ctx, "TRUE")
}

// PlaceableWorkers returns alive workers that heartbeated within grace, with
// their load, except those draining or still in their failure backoff
// (placeable_after, see RecordWorkerFailure).
func (s *Store) PlaceableWorkers(ctx context.Context, grace time.Duration) ([]WorkerLoad, error) {
	return s.workerLoads(ctx, `w.state = 'alive' AND w.last_heartbeat_at > now() - make_interval(secs => ?)
		AND NOT w.draining AND (w.placeable_after IS NULL OR w.placeable_after <= now())`,
		grace.Seconds())
}

func (s *Store) workerLoads(ctx context.Context, where string, args ...any) ([]WorkerLoad, error) {
	var out []WorkerLoad
	err := s.q(ctx).Raw(`SELECT w.*, COALESCE(l.used, 0) AS used, COALESCE(l.cpu, 0) AS used_cpu_millis,
		COALESCE(l.mem, 0) AS used_memory_bytes FROM workers w
		LEFT JOIN (SELECT a.worker_id, count(*) AS used, sum(t.cpu_millis) AS cpu, sum(t.memory_bytes) AS mem
			FROM attempts a JOIN tasks t ON t.id = a.task_id WHERE a.state IN `+sqlLive+` GROUP BY a.worker_id) l
		ON l.worker_id = w.id WHERE `+where+` ORDER BY w.created_at, w.id`, args...).Scan(&out).Error
	return out, mapErr(err)
}

// StopList returns, of the attempts a worker says it holds, those the control
// plane wants stopped: unknown, placed on another worker, ended, or no longer
// their task's current live attempt (aborted, superseded). A lost abort
// message heals on the next heartbeat this way.
func (s *Store) StopList(ctx context.Context, workerID string, ids []int64) ([]int64, error) {
	if len(ids) == 0 {
		return []int64{}, nil
	}
	var keep []int64
	err := s.q(ctx).Raw(`SELECT at.id FROM attempts at JOIN tasks t ON t.id = at.task_id
		WHERE at.id IN ? AND at.worker_id = ? AND at.state IN ? AND t.state IN ? AND t.attempt_count = at.number`,
		ids, workerID, liveStates, liveStates).Scan(&keep).Error
	if err != nil {
		return nil, mapErr(err)
	}
	live := make(map[int64]bool, len(keep))
	for _, id := range keep {
		live[id] = true
	}
	stop := []int64{}
	for _, id := range ids {
		if !live[id] {
			stop = append(stop, id)
		}
	}
	return stop, nil
}
