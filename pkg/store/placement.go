package store

import (
	"context"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// SetPendingReasons records why PENDING tasks cannot be placed (task id →
// reason), and moves their QUEUED actions to WAITING_FOR_RESOURCES. Tasks no
// longer PENDING are left alone; an unchanged reason is not rewritten.
func (s *Store) SetPendingReasons(ctx context.Context, reasons map[int64]string) error {
	byReason := map[string][]int64{}
	for id, r := range reasons {
		byReason[r] = append(byReason[r], id)
	}
	now := time.Now().UTC()
	for reason, ids := range byReason {
		res := s.q(ctx).Model(&Task{}).Where("id IN ? AND state = ? AND pending_reason IS DISTINCT FROM ?",
			ids, int16(domain.TaskPending), reason).Updates(map[string]any{"pending_reason": reason, "updated_at": now})
		if res.Error != nil {
			return mapErr(res.Error)
		}
		if res.RowsAffected == 0 {
			continue
		}
		if err := s.q(ctx).Exec(`UPDATE actions a SET phase = ?, updated_at = now(), version = a.version + 1
			FROM tasks t WHERE t.id IN ? AND a.project = t.project AND a.domain = t.domain AND a.run_name = t.run_name
			AND a.name = t.action_name AND a.phase = ?`,
			string(domain.PhaseWaitingForResources), ids, string(domain.PhaseQueued)).Error; err != nil {
			return mapErr(err)
		}
	}
	return nil
}

// Finalized is a job that a deadline or timeout ended.
type Finalized struct {
	Action domain.ActionKey
	// AbortRequested is true when live attempts must be stopped.
	AbortRequested bool
}

// ExpireSchedulingDeadlines makes every PENDING task past its scheduling
// deadline UNSCHEDULABLE; its job becomes UNSCHEDULABLE and the job's other
// tasks are KILLED (Iris's _mark_task_unschedulable). It returns the jobs so
// ended.
func (s *Store) ExpireSchedulingDeadlines(ctx context.Context) ([]Finalized, error) {
	var tasks []Task
	if err := s.q(ctx).Where("state IN " + sqlPending + " AND scheduling_deadline < now()").
		Order("id").Limit(1000).Find(&tasks).Error; err != nil {
		return nil, mapErr(err)
	}
	var out []Finalized
	done := map[domain.ActionKey]bool{}
	for _, t := range tasks {
		key := domain.RunKey{Project: t.Project, Domain: t.Domain, Run: t.RunName}.Action(t.ActionName)
		if done[key] {
			continue
		}
		done[key] = true
		var ev Evaluation
		err := s.InTx(ctx, func(tx *Store) error {
			now := time.Now().UTC()
			res := tx.q(ctx).Model(&Task{}).Where("project = ? AND domain = ? AND run_name = ? AND action_name = ? AND state = ? AND scheduling_deadline < ?",
				key.Project, key.Domain, key.Run, key.Action, int16(domain.TaskPending), now).
				Updates(map[string]any{"state": int16(domain.TaskUnschedulable), "ended_at": now, "updated_at": now,
					"version": gorm.Expr("version + 1")})
			if res.Error != nil || res.RowsAffected == 0 {
				return mapErr(res.Error)
			}
			if err := tx.event(ctx, key.RunKey, key.Action, "task.unschedulable", map[string]any{"tasks": res.RowsAffected}); err != nil {
				return err
			}
			return tx.deriveAction(ctx, &ev, key, now)
		})
		if err != nil {
			return out, err
		}
		out = append(out, Finalized{Action: key, AbortRequested: ev.AbortSurvivors != nil})
	}
	return out, nil
}

// TimedOut is a task whose running attempt exceeded its timeout.
type TimedOut struct {
	Action  domain.ActionKey
	TaskIdx int
	Timeout time.Duration
}

// TimedOutTasks returns tasks whose current attempt has been running (or
// building) longer than the task's timeout, at most one per action.
func (s *Store) TimedOutTasks(ctx context.Context) ([]TimedOut, error) {
	var rows []struct {
		Project, Domain, RunName, ActionName string
		Idx                                  int
		TimeoutMs                            int64
	}
	err := s.q(ctx).Raw(`SELECT DISTINCT ON (t.project, t.domain, t.run_name, t.action_name)
			t.project, t.domain, t.run_name, t.action_name, t.idx, t.timeout_ms
		FROM tasks t JOIN attempts a ON a.task_id = t.id AND a.number = t.attempt_count
		WHERE t.timeout_ms > 0 AND t.state IN ` + sqlStarted + ` AND a.started_at IS NOT NULL
		AND a.started_at + t.timeout_ms * interval '1 millisecond' < now()
		ORDER BY t.project, t.domain, t.run_name, t.action_name, t.idx LIMIT 1000`).Scan(&rows).Error
	out := make([]TimedOut, len(rows))
	for i, r := range rows {
		out[i] = TimedOut{Action: domain.RunKey{Project: r.Project, Domain: r.Domain, Run: r.RunName}.Action(r.ActionName),
			TaskIdx: r.Idx, Timeout: time.Duration(r.TimeoutMs) * time.Millisecond}
	}
	return out, mapErr(err)
}

// LiveAttempt of a worker, for preemption.
type LiveOnWorker struct {
	AttemptID   int64
	WorkerID    string
	State       int16
	Priority    int16
	CPUMillis   int64 `gorm:"column:cpu_millis"`
	MemoryBytes int64
}

// LiveOnWorkers returns the live attempts held by the given workers with
// their tasks' bands and resources.
func (s *Store) LiveOnWorkers(ctx context.Context, workerIDs []string) ([]LiveOnWorker, error) {
	if len(workerIDs) == 0 {
		return nil, nil
	}
	var out []LiveOnWorker
	err := s.q(ctx).Raw(`SELECT a.id AS attempt_id, a.worker_id, a.state, t.priority, t.cpu_millis, t.memory_bytes
		FROM attempts a JOIN tasks t ON t.id = a.task_id
		WHERE a.worker_id IN ? AND a.state IN `+sqlLive+` ORDER BY a.id`, workerIDs).Scan(&out).Error
	return out, mapErr(err)
}

// PreemptAttempt evicts a live attempt for a higher band (Iris's
// preempt_task). An attempt still ASSIGNED never started: it becomes
// PREEMPTED at once and its task is requeued for free. A started attempt gets
// a kill request with cause preempted (killRequested): the reconciler stops
// its process, and the executor's PREEMPTED report charges the task's
// preemption budget and requeues it; its resources stay held until then, so
// nothing is placed on top of a process that still runs.
func (s *Store) PreemptAttempt(ctx context.Context, attemptID int64, backoff domain.Backoff) (ev Evaluation, killRequested bool, err error) {
	err = s.InTx(ctx, func(tx *Store) error {
		var a Attempt
		if err := tx.q(ctx).Clauses(clause.Locking{Strength: "UPDATE"}).Take(&a, attemptID).Error; err != nil {
			return mapErr(err)
		}
		switch domain.TaskState(a.State) {
		case domain.TaskBuilding, domain.TaskRunning:
			killRequested = true
			return tx.RequestAttemptKill(ctx, a.ID, CausePreempted)
		case domain.TaskAssigned:
		default:
			return nil
		}
		now := time.Now().UTC()
		cause := CausePreempted
		if err := tx.q(ctx).Model(&Attempt{}).Where("id = ?", a.ID).Updates(map[string]any{
			"state": int16(domain.TaskPreempted), "cause": cause, "finished_at": now, "evaluated_at": now,
			"updated_at": now}).Error; err != nil {
			return mapErr(err)
		}
		a.State, a.Cause, a.FinishedAt, a.EvaluatedAt = int16(domain.TaskPreempted), &cause, &now, &now
		return tx.evaluateClaimed(ctx, &ev, a, true, backoff, now)
	})
	return ev, killRequested, err
}
