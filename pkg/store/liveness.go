package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Worker liveness (Iris's heartbeats) and self-healing registrations (ARC's
// failure backoff). A worker is alive while it heartbeats; one silent past
// its grace is dead and its live attempts become WORKER_FAILED. Each worker
// keeps `failures`, attempt id → time, of attempts lost or failed for
// platform causes on it; before new work goes to a worker with n failures
// the scheduler waits table[n] after the last one, and past len(table)-1
// failures the worker row is deleted: its executor re-registers under a new
// identity with an empty map. Sources: seeds/002 "WORKER_FAILED", seeds/001.

// lostMargin is how much older than the previous heartbeat an attempt's last
// report must be before a heartbeat that omits it declares it lost. It
// absorbs clock skew between api replicas.
const lostMargin = time.Second

// LostAttempt is a live attempt a liveness rule ended WORKER_FAILED (cause
// worker_lost). It still needs its evaluation (EvaluateAttempt).
type LostAttempt struct {
	ID       int64
	TaskID   int64
	WorkerID string
}

// Beat is one heartbeat of a worker.
type Beat struct {
	// Held lists the attempts the worker holds.
	Held []int64
	// Draining is true once the executor is shutting down; it is sticky.
	Draining bool
	// At is when the beat arrived. Default time.Now().
	At time.Time
}

// BeatReply is what a heartbeat changed and what the worker must do.
type BeatReply struct {
	// Stop lists the held attempts the worker must kill (StopList).
	Stop []int64
	// Lost lists the attempts the control plane thought were BUILDING or
	// RUNNING on the worker but the worker no longer holds (its final report
	// was lost): they are now WORKER_FAILED and must be evaluated.
	Lost []LostAttempt
}

// BeatWorker records a heartbeat in one transaction: last_heartbeat_at, the
// sticky draining flag, the attempts to stop, and — the other half of Iris's
// reconciliation — the attempts the worker no longer holds, which become
// WORKER_FAILED. An attempt counts as no longer held only if its last report
// is older than the previous heartbeat (minus lostMargin): the executor lists
// an attempt from before its first report until after its final one, and
// builds each beat after the previous beat's reply, so such an attempt would
// have been listed. BUILDING and RUNNING only: an ASSIGNED attempt may still
// wait in the queue. Errors: ErrNotFound when the worker is unknown, deleted
// or dead (it must re-register).
func (s *Store) BeatWorker(ctx context.Context, id string, b Beat) (BeatReply, error) {
	at := b.At
	if at.IsZero() {
		at = time.Now()
	}
	at = at.UTC()
	var reply BeatReply
	err := s.InTx(ctx, func(tx *Store) error {
		var w Worker
		err := tx.q(ctx).Clauses(clause.Locking{Strength: "UPDATE"}).Where("id = ? AND state = ?", id, WorkerAlive).
			Take(&w).Error
		if err != nil {
			return mapErr(err)
		}
		if err := tx.q(ctx).Model(&Worker{}).Where("id = ?", id).Updates(map[string]any{
			"last_heartbeat_at": at, "draining": w.Draining || b.Draining}).Error; err != nil {
			return mapErr(err)
		}
		if reply.Stop, err = tx.StopList(ctx, id, b.Held); err != nil {
			return err
		}
		held := append([]int64{0}, b.Held...) // never empty: NOT IN () is not SQL
		reply.Lost, err = tx.loseAttempts(ctx, "worker_id = ? AND state IN "+sqlStarted+" AND id NOT IN ? AND updated_at < ?",
			[]any{id, held, w.LastHeartbeatAt.Add(-lostMargin)},
			"the worker no longer holds the attempt (its final report was lost)", at)
		return err
	})
	return reply, err
}

// loseAttempts ends the live attempts matching where (on table attempts) as
// WORKER_FAILED with cause worker_lost and reason, writes their events, and
// returns them.
func (s *Store) loseAttempts(ctx context.Context, where string, args []any, reason string, now time.Time) ([]LostAttempt, error) {
	var lost []LostAttempt
	q := `UPDATE attempts SET state = ?, cause = ?, error = ?, finished_at = ?, updated_at = ?
		WHERE state IN ` + sqlLive + ` AND (` + where + `) RETURNING id, task_id, worker_id`
	all := append([]any{int16(domain.TaskWorkerFailed), CauseWorkerLost, reason, now, now}, args...)
	if err := s.q(ctx).Raw(q, all...).Scan(&lost).Error; err != nil {
		return nil, mapErr(err)
	}
	if len(lost) == 0 {
		return []LostAttempt{}, nil
	}
	ids := make([]int64, len(lost))
	for i, l := range lost {
		ids[i] = l.ID
	}
	data, err := json.Marshal(map[string]any{"cause": CauseWorkerLost, "error": reason, "exit_code": nil})
	if err != nil {
		return nil, err
	}
	err = s.q(ctx).Exec(`INSERT INTO run_events (project, domain, run_name, action_name, task_id, attempt_id, type, data, created_at)
		SELECT t.project, t.domain, t.run_name, t.action_name, t.id, a.id, ?::text, ?::jsonb, ?::timestamptz FROM attempts a JOIN tasks t ON t.id = a.task_id
		WHERE a.id IN ?`, "attempt."+domain.TaskWorkerFailed.String(), string(data), now, ids).Error
	return lost, mapErr(err)
}

// Reaped is what ReapDeadWorkers did.
type Reaped struct {
	// Dead lists the workers it declared dead.
	Dead []string
	// Lost lists the attempts it ended WORKER_FAILED.
	Lost []LostAttempt
}

// ReapDeadWorkers declares dead, in one transaction, every alive worker whose
// last heartbeat is older than cutoff (Iris's _on_worker_failed): the worker
// becomes dead (a later heartbeat answers ErrNotFound, so the executor
// re-registers and kills what it still runs), and every live attempt whose
// worker is not alive — dead, deregistered, deleted, or placed on a worker
// that died meanwhile — becomes WORKER_FAILED with cause worker_lost; the
// attempts of the newly dead workers are recorded in their failures. The
// caller evaluates the lost attempts (the preemption budget requeues them).
func (s *Store) ReapDeadWorkers(ctx context.Context, cutoff time.Time) (Reaped, error) {
	var r Reaped
	err := s.InTx(ctx, func(tx *Store) error {
		now := time.Now().UTC()
		if err := tx.q(ctx).Raw(`UPDATE workers SET state = ?, updated_at = ?, version = version + 1
			WHERE state = '`+WorkerAlive+`' AND last_heartbeat_at < ? RETURNING id`, WorkerDead, now, cutoff.UTC()).
			Scan(&r.Dead).Error; err != nil {
			return mapErr(err)
		}
		var err error
		r.Lost, err = tx.loseAttempts(ctx, `worker_id IS NOT NULL AND NOT EXISTS
			(SELECT 1 FROM workers w WHERE w.id = attempts.worker_id AND w.state = 'alive')`, nil,
			"the worker is dead (no heartbeat within its grace) or gone", now)
		if err != nil {
			return err
		}
		dead := map[string]bool{}
		for _, id := range r.Dead {
			dead[id] = true
		}
		for _, l := range r.Lost {
			if dead[l.WorkerID] {
				if _, _, err := tx.addFailure(ctx, l.WorkerID, l.ID, now); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return r, err
}

// addFailure adds attempt id → at to the failures of worker id (locked by
// the caller, or dead) unless it is there, and returns the map's size and
// its latest time.
func (s *Store) addFailure(ctx context.Context, workerID string, attemptID int64, at time.Time) (int, time.Time, error) {
	var w Worker
	if err := s.q(ctx).Select("id, failures").Take(&w, "id = ?", workerID).Error; err != nil {
		return 0, time.Time{}, mapErr(err)
	}
	failures, err := decodeFailures(w.Failures)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("worker %s: %w", workerID, err)
	}
	key := fmt.Sprint(attemptID)
	if _, ok := failures[key]; !ok {
		failures[key] = at.UTC()
	}
	last := latest(failures)
	raw, err := json.Marshal(failures)
	if err != nil {
		return 0, time.Time{}, err
	}
	err = s.q(ctx).Model(&Worker{}).Where("id = ?", workerID).Updates(map[string]any{"failures": string(raw),
		"last_failure_at": last, "updated_at": time.Now().UTC(), "version": gorm.Expr("version + 1")}).Error
	return len(failures), last, mapErr(err)
}

// DecodeFailures parses a worker's failures column: attempt id → time.
func DecodeFailures(raw []byte) (map[string]time.Time, error) { return decodeFailures(raw) }

func decodeFailures(raw []byte) (map[string]time.Time, error) {
	failures := map[string]time.Time{}
	if len(raw) == 0 {
		return failures, nil
	}
	if err := json.Unmarshal(raw, &failures); err != nil {
		return nil, fmt.Errorf("failures: %w", err)
	}
	return failures, nil
}

func latest(m map[string]time.Time) time.Time {
	var last time.Time
	for _, t := range m {
		if t.After(last) {
			last = t
		}
	}
	return last
}

// FailureRecord is what RecordWorkerFailure did.
type FailureRecord struct {
	// WorkerID is the attempt's worker; "" when the attempt is no platform
	// failure, or its worker is not alive (nothing to gate).
	WorkerID string
	// Failures is the size of the worker's failures map afterwards.
	Failures int
	// PlaceableAfter is when the worker may take new work again.
	PlaceableAfter time.Time
	// Deleted is true when this failure was one too many: the worker row is
	// gone and Lost holds the live attempts it still had.
	Deleted bool
	Lost    []LostAttempt
}

// RecordWorkerFailure applies ARC's self-healing rule to the worker of a
// finished attempt that ended WORKER_FAILED, or FAILED with cause system: the
// attempt joins the worker's failures (attempt id → finished_at; recording it
// twice changes nothing). With n failures, the worker takes no new work until
// table[n] after the latest (placeable_after); when n > len(table)-1 the
// worker row is deleted instead — never left as a failed zombie holding
// capacity — and its live attempts become WORKER_FAILED (returned in Lost,
// to evaluate); its executor's next heartbeat gets ErrNotFound, so it kills
// what it runs and registers again under a new id with an empty map. An
// attempt of another outcome, or on a worker that is not alive, is ignored.
// Source: seeds/001 (ARC's failedRunnerBackoff, maxFailures 5). Errors:
// ErrNotFound (no such attempt).
func (s *Store) RecordWorkerFailure(ctx context.Context, attemptID int64, table domain.Table) (FailureRecord, error) {
	var rec FailureRecord
	var a Attempt
	// A finished attempt's outcome never changes: most are no platform
	// failure, and need no transaction.
	if err := s.q(ctx).Select("id, worker_id, state, cause, finished_at").Take(&a, attemptID).Error; err != nil {
		return rec, mapErr(err)
	}
	if !platformFailure(a) {
		return rec, nil
	}
	err := s.InTx(ctx, func(tx *Store) error {
		var w Worker
		err := tx.q(ctx).Clauses(clause.Locking{Strength: "UPDATE"}).Select("id").
			Where("id = ? AND state = ?", *a.WorkerID, WorkerAlive).Take(&w).Error
		if errors.Is(mapErr(err), ErrNotFound) {
			return nil // dead or deleted: nothing to gate
		}
		if err != nil {
			return mapErr(err)
		}
		n, last, err := tx.addFailure(ctx, w.ID, a.ID, *a.FinishedAt)
		if err != nil {
			return err
		}
		rec.WorkerID, rec.Failures = w.ID, n
		if n > len(table)-1 {
			rec.Deleted = true
			rec.Lost, err = tx.deleteWorker(ctx, w.ID, fmt.Sprintf("the worker was deleted after %d failures", n))
			return err
		}
		rec.PlaceableAfter = last.Add(table.Delay(n))
		return mapErr(tx.q(ctx).Model(&Worker{}).Where("id = ?", w.ID).
			Update("placeable_after", rec.PlaceableAfter).Error)
	})
	return rec, err
}

// platformFailure reports whether an attempt's outcome counts against its
// worker: WORKER_FAILED, or FAILED with cause system.
func platformFailure(a Attempt) bool {
	if a.WorkerID == nil || a.FinishedAt == nil {
		return false
	}
	st := domain.TaskState(a.State)
	return st == domain.TaskWorkerFailed || st == domain.TaskFailed && a.Cause != nil && *a.Cause == "system"
}

// deleteWorker ends the worker's live attempts (WORKER_FAILED, reason) and
// deletes its row.
func (s *Store) deleteWorker(ctx context.Context, id, reason string) ([]LostAttempt, error) {
	lost, err := s.loseAttempts(ctx, "worker_id = ?", []any{id}, reason, time.Now().UTC())
	if err != nil {
		return nil, err
	}
	return lost, mapErr(s.q(ctx).Delete(&Worker{}, "id = ?", id).Error)
}

// DeregisterWorker removes a worker that is leaving (a drained executor): its
// row is deleted and any attempt still live on it becomes WORKER_FAILED
// (returned, to evaluate). Errors: ErrNotFound.
func (s *Store) DeregisterWorker(ctx context.Context, id string) ([]LostAttempt, error) {
	var lost []LostAttempt
	err := s.InTx(ctx, func(tx *Store) error {
		var w Worker
		if err := tx.q(ctx).Clauses(clause.Locking{Strength: "UPDATE"}).Select("id").Take(&w, "id = ?", id).Error; err != nil {
			return mapErr(err)
		}
		var err error
		lost, err = tx.deleteWorker(ctx, id, "the worker deregistered while holding the attempt")
		return err
	})
	return lost, err
}

// DeleteDeadWorkers deletes the rows of workers dead since before cutoff
// (they hold no live attempt: ReapDeadWorkers ended them) and returns how
// many it deleted.
func (s *Store) DeleteDeadWorkers(ctx context.Context, cutoff time.Time) (int64, error) {
	res := s.q(ctx).Where("state = ? AND updated_at < ? AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.worker_id = workers.id AND a.state IN "+sqlLive+")",
		WorkerDead, cutoff.UTC()).Delete(&Worker{})
	return res.RowsAffected, mapErr(res.Error)
}

// WorkerStates returns the state (WorkerAlive or WorkerDead) of each of ids
// that is a known worker; unknown ids, and ids that are not UUIDs, are
// absent.
func (s *Store) WorkerStates(ctx context.Context, ids []string) (map[string]string, error) {
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
