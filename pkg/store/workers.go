package store

import (
	"cmp"
	"context"
	"strconv"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/google/uuid"
)

// Workers: registration, load, heartbeats (Iris's liveness) and the failures
// map of ARC's self-healing registrations. The rules that read them live in
// the scheduler; these are the statements.

// Worker states.
const (
	WorkerAlive = "alive"
	WorkerDead  = "dead"
)

// NewWorker is what RegisterWorker inserts.
type NewWorker struct {
	// ID is the new worker's id, a UUID; "" makes a new one.
	ID      string
	Name    string
	Address string
	// Slots is how many attempts the worker runs at once.
	Slots int
	// Resources is what it offers; zero fields are undeclared (unlimited).
	Resources domain.Resources
	Labels    map[string]string
	// Sandbox is how the executor isolates its attempts; "" is "none".
	Sandbox string
	// CredentialSHA256 is the SHA-256 of the executor credential its
	// registration answers (workerkey.Digest).
	CredentialSHA256 []byte
}

// WorkerLoad is a worker with what its live attempts hold: how many, and
// their resources.
type WorkerLoad struct {
	Worker
	Used            int   `json:"used"`
	UsedCPUMillis   int64 `gorm:"column:used_cpu_millis" json:"used_cpu_millis"`
	UsedMemoryBytes int64 `json:"used_memory_bytes"`
	// LowestPriority is the lowest priority band of the worker's live
	// attempts' tasks, nil when it has none: only a worker with a band
	// below a task's may be preempted for it.
	LowestPriority *int16 `json:"lowest_priority"`
}

// RegisterWorker inserts a worker under a new identity; its first
// heartbeat is its registration, stamped now() (Postgres's clock, as
// RecordBeat).
func (s Workers) RegisterWorker(ctx context.Context, nw NewWorker) (Worker, error) {
	labels := nw.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	w := Worker{ID: cmp.Or(nw.ID, uuid.NewString()), Name: nw.Name, Address: nw.Address, Slots: nw.Slots,
		CPUMillis: nw.Resources.CPUMillis, MemoryBytes: nw.Resources.MemoryBytes, Labels: labels,
		Sandbox: cmp.Or(nw.Sandbox, "none"), CredentialSHA256: nw.CredentialSHA256,
		Failures: map[string]time.Time{}, State: WorkerAlive, Version: 1}
	return w, mapErr(s.q(ctx).Create(&w).Error)
}

// ListWorkers returns every worker with its load, oldest first.
func (s Workers) ListWorkers(ctx context.Context) ([]WorkerLoad, error) {
	return s.workerLoads(ctx, "TRUE")
}

// PlaceableWorkers returns alive workers that heartbeated within grace, with
// their load, except those draining or still in their failure backoff
// (placeable_after).
func (s Placement) PlaceableWorkers(ctx context.Context, grace time.Duration) ([]WorkerLoad, error) {
	return s.workerLoads(ctx, placeableWhere, grace.Seconds())
}

// placeableWhere is PlaceableWorkers' condition; its one parameter is the
// grace in seconds.
const placeableWhere = `w.state = 'alive' AND w.last_heartbeat_at > now() - make_interval(secs => ?)
		AND NOT w.draining AND (w.placeable_after IS NULL OR w.placeable_after <= now())`

// workerLoads returns the workers that match where, with their load: the
// live attempts on each, their tasks' resources and lowest priority band. A live attempt's task
// is read by its key (the subquery's OFFSET 0 keeps Postgres from joining
// the tables whole): with the statistics of a new database, whose tables
// were never analyzed, the join would read every task by a sequential
// scan at each pass, a cost growing with the tasks.
func (s *core) workerLoads(ctx context.Context, where string, args ...any) ([]WorkerLoad, error) {
	var out []WorkerLoad
	err := s.raw(ctx, workerLoadsSQL(where)+` ORDER BY w.created_at, w.id`, args...).Scan(&out).Error
	return out, mapErr(err)
}

// workerLoadsSQL selects the workers that match where, each with its load
// (WorkerLoad's columns). The sums are numeric and may pass int64
// (resources are bounded only by the type): they are capped at its
// maximum, "everything".
func workerLoadsSQL(where string) string {
	return `SELECT w.*, COALESCE(l.used, 0) AS used, COALESCE(l.cpu, 0) AS used_cpu_millis,
		COALESCE(l.mem, 0) AS used_memory_bytes, l.lowest AS lowest_priority FROM workers w
		LEFT JOIN (SELECT a.worker_id, count(*) AS used, LEAST(sum(t.cpu_millis), 9223372036854775807)::bigint AS cpu,
			LEAST(sum(t.memory_bytes), 9223372036854775807)::bigint AS mem, min(t.priority) AS lowest
			FROM attempts a CROSS JOIN LATERAL (SELECT cpu_millis, memory_bytes, priority FROM tasks
				WHERE tasks.id = a.task_id OFFSET 0) t
			WHERE a.state IN ` + sqlLive + ` GROUP BY a.worker_id) l
		ON l.worker_id = w.id WHERE ` + where
}

// StopList returns, of the attempts a worker says it holds, those the control
// plane wants stopped: unknown, placed on another worker, ended, or no longer
// their task's current live attempt (aborted, superseded). A lost abort
// message heals on the next heartbeat this way.
func (s Workers) StopList(ctx context.Context, workerID string, ids []int64) ([]int64, error) {
	if len(ids) == 0 {
		return []int64{}, nil
	}
	var keep []int64
	err := s.raw(ctx, `SELECT at.id FROM attempts at JOIN tasks t ON t.id = at.task_id
		WHERE at.id IN ? AND at.worker_id = ? AND at.state IN `+sqlLive+` AND t.state IN `+sqlLive+`
		AND t.attempt_count = at.number`, ids, workerID).Scan(&keep).Error
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

// LostAttempt is a live attempt ended WORKER_FAILED (cause worker_lost)
// because its worker lost it. It still needs its evaluation.
type LostAttempt struct {
	ID       int64
	TaskID   int64
	WorkerID string
}

// LastHeartbeat returns when alive worker id last heartbeat (read, not
// locked). Errors: ErrNotFound when the worker is unknown or dead.
func (s Workers) LastHeartbeat(ctx context.Context, id string) (time.Time, error) {
	var w Worker
	err := s.q(ctx).Select("id, last_heartbeat_at").Where("id = ? AND state = ?", id, WorkerAlive).Take(&w).Error
	return w.LastHeartbeatAt, mapErr(err)
}

// LoseUnheldAttempts ends WORKER_FAILED (cause worker_lost) the live
// attempts of worker workerID that held does not list and loss covers (in
// one of loss.States, last written before loss.ReportedBefore), locked in
// id order, writes their events, and returns them. No states: none.
func (s Workers) LoseUnheldAttempts(ctx context.Context, workerID string, held []int64, loss domain.BeatLoss,
	now time.Time) ([]LostAttempt, error) {
	if len(loss.States) == 0 {
		return []LostAttempt{}, nil
	}
	held = append([]int64{0}, held...) // never empty: NOT IN () is not SQL
	return s.loseAttempts(ctx, "worker_id = ? AND state IN "+sqlStates(loss.States...)+" AND id NOT IN ? AND updated_at < ?",
		[]any{workerID, held, loss.ReportedBefore},
		"the worker no longer holds the attempt (its final report was lost)", now)
}

// RecordBeat sets alive worker id's last_heartbeat_at to now() —
// Postgres's clock, which the liveness pass judges by (SilentWorkers) —
// and, when draining, its draining flag, which no beat clears. Errors:
// ErrNotFound when the worker is unknown or dead (declared dead meanwhile:
// it must re-register).
func (s Workers) RecordBeat(ctx context.Context, id string, draining bool) error {
	res := s.exec(ctx, `UPDATE workers SET last_heartbeat_at = now(), draining = draining OR ? WHERE id = ? AND state = ?`,
		draining, id, WorkerAlive)
	if res.Error == nil && res.RowsAffected == 0 {
		return ErrNotFound
	}
	return mapErr(res.Error)
}

// loseAttempts ends the live attempts matching where (on table attempts),
// locked in id order, as WORKER_FAILED with cause worker_lost and reason,
// writes their events, and returns them.
func (s *core) loseAttempts(ctx context.Context, where string, args []any, reason string, now time.Time) ([]LostAttempt, error) {
	var lost []LostAttempt
	q := `WITH l AS (SELECT id FROM attempts WHERE state IN ` + sqlLive + ` AND (` + where + `) ORDER BY id FOR UPDATE)
		UPDATE attempts SET state = ?, cause = ?, error = ?, finished_at = ?, updated_at = ?
		FROM l WHERE attempts.id = l.id RETURNING attempts.id, attempts.task_id, attempts.worker_id`
	all := append(append([]any{}, args...), domain.TaskWorkerFailed, CauseWorkerLost, reason, now, now)
	if err := s.raw(ctx, q, all...).Scan(&lost).Error; err != nil {
		return nil, mapErr(err)
	}
	if len(lost) == 0 {
		return []LostAttempt{}, nil
	}
	ids := make([]int64, len(lost))
	for i, l := range lost {
		ids[i] = l.ID
	}
	err := s.exec(ctx, `INSERT INTO run_events (project, domain, run_name, action_name, task_id, attempt_id, type, data, created_at)
		SELECT t.project, t.domain, t.run_name, t.action_name, t.id, a.id, ?::text,
			jsonb_build_object('cause', ?::text, 'error', ?::text, 'exit_code', NULL), ?::timestamptz
		FROM attempts a JOIN tasks t ON t.id = a.task_id WHERE a.id IN ?`,
		"attempt."+domain.TaskWorkerFailed.String(), CauseWorkerLost, reason, now, ids).Error
	return lost, mapErr(err)
}

// LoseAttemptsOfGoneWorkers ends WORKER_FAILED (cause worker_lost) every
// live attempt whose worker is not alive — dead, deregistered, deleted, or
// placed on a worker that died meanwhile — and returns them.
func (s Workers) LoseAttemptsOfGoneWorkers(ctx context.Context, now time.Time) ([]LostAttempt, error) {
	return s.loseAttempts(ctx, `worker_id IS NOT NULL AND NOT EXISTS
		(SELECT 1 FROM workers w WHERE w.id = attempts.worker_id AND w.state = 'alive')`, nil,
		"the worker is dead (no heartbeat within its grace) or gone", now)
}

// LoseWorkerAttempts ends WORKER_FAILED (cause worker_lost, reason) every
// live attempt of worker id and returns them.
func (s Workers) LoseWorkerAttempts(ctx context.Context, id, reason string, now time.Time) ([]LostAttempt, error) {
	return s.loseAttempts(ctx, "worker_id = ?", []any{id}, reason, now)
}

// AddWorkerFailure adds attempt id → at to the failures of worker workerID
// when the worker is in state (recording one attempt twice changes nothing),
// keeps last_failure_at the latest, and returns the map; ok is false when
// the worker is not in state or missing.
func (s Workers) AddWorkerFailure(ctx context.Context, workerID, state string, attemptID int64, at time.Time) (
	failures map[string]time.Time, ok bool, err error) {
	var rows []Worker
	err = s.raw(ctx, `UPDATE workers SET
			failures = CASE WHEN failures -> CAST(@key AS text) IS NOT NULL THEN failures
				ELSE failures || jsonb_build_object(CAST(@key AS text), CAST(@at AS timestamptz)) END,
			last_failure_at = GREATEST(last_failure_at, CAST(@at AS timestamptz)), updated_at = now(),
			version = version + 1
		WHERE id = @id AND state = @state RETURNING failures`,
		map[string]any{"key": strconv.FormatInt(attemptID, 10), "at": at.UTC(), "id": workerID, "state": state}).Scan(&rows).Error
	if err != nil || len(rows) == 0 {
		return nil, false, mapErr(err)
	}
	return rows[0].Failures, true, nil
}

// SetPlaceableAfter gates new work on a worker until at.
func (s Workers) SetPlaceableAfter(ctx context.Context, workerID string, at time.Time) error {
	return mapErr(s.q(ctx).Model(&Worker{}).Where("id = ?", workerID).Update("placeable_after", at).Error)
}

// DeleteWorker deletes a worker's row. Its live attempts, if any, are the
// caller's to end (LoseWorkerAttempts; the liveness pass ends them too).
func (s Workers) DeleteWorker(ctx context.Context, id string) error {
	return mapErr(s.q(ctx).Delete(&Worker{}, "id = ?", id).Error)
}

// DeregisterWorker removes a worker that is leaving (a drained executor): any
// attempt still live on it becomes WORKER_FAILED (returned, to evaluate),
// then its row is deleted. Errors: ErrNotFound.
func (s Workers) DeregisterWorker(ctx context.Context, id string) ([]LostAttempt, error) {
	var lost []LostAttempt
	err := s.inTx(ctx, func(tx *Store) error {
		var err error
		lost, err = tx.workers().LoseWorkerAttempts(ctx, id, "the worker deregistered while holding the attempt", time.Now().UTC())
		if err != nil {
			return err
		}
		res := tx.q(ctx).Delete(&Worker{}, "id = ?", id)
		if res.Error == nil && res.RowsAffected == 0 {
			return ErrNotFound
		}
		return mapErr(res.Error)
	})
	return lost, err
}

// DeleteDeadWorkers deletes the rows of workers dead since before cutoff
// that hold no live attempt, and returns how many it deleted.
func (s Workers) DeleteDeadWorkers(ctx context.Context, cutoff time.Time) (int64, error) {
	res := s.q(ctx).Where("state = ? AND updated_at < ? AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.worker_id = workers.id AND a.state IN "+sqlLive+")",
		WorkerDead, cutoff.UTC()).Delete(&Worker{})
	return res.RowsAffected, mapErr(res.Error)
}

// WorkerStates returns the state (WorkerAlive or WorkerDead) of each of ids
// that is a known worker; unknown ids, and ids that are not UUIDs, are
// absent.
func (s Workers) WorkerStates(ctx context.Context, ids []string) (map[string]string, error) {
	valid := make([]string, 0, len(ids))
	for _, id := range ids {
		if _, err := uuid.Parse(id); err == nil {
			valid = append(valid, id)
		}
	}
	states := map[string]string{}
	if len(valid) == 0 {
		return states, nil
	}
	var rows []Worker
	if err := s.q(ctx).Select("id, state").Where("id IN ?", valid).Find(&rows).Error; err != nil {
		return nil, mapErr(err)
	}
	for _, w := range rows {
		states[w.ID] = w.State
	}
	return states, nil
}
