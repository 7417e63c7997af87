package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
)

// QueueAdmin lists and deletes asynq queues; *asynq.Inspector is one.
type QueueAdmin interface {
	Queues() ([]string, error)
	DeleteQueue(name string, force bool) error
}

var _ QueueAdmin = (*asynq.Inspector)(nil)

// LivenessConfig tunes worker liveness: the dead-worker pass (Iris) and the
// failure backoff of worker registrations (ARC).
type LivenessConfig struct {
	// Tick is the dead-worker pass period. Default min(WorkerGrace/4, 1s).
	Tick time.Duration
	// Backoff is ARC's failure table: a worker with n failures takes no new
	// work until Backoff[n] after the last one, and is deleted past
	// len(Backoff)-1 failures. Default domain.ARCTable (0, 5s, 10s, 20s,
	// 40s, 80s: deleted on the 6th).
	Backoff domain.Table
	// DeadRetention is how long after it was declared dead a worker's row
	// stays listed (state dead) before the pass deletes it. Default 1h.
	DeadRetention time.Duration
	// Outage is the longest gap between two liveness passes, or since the
	// heartbeat path's latest stamp, that is not an outage of the control
	// plane: past it every worker's grace restarts (domain.GraceOrigin).
	// Keep it under WorkerGrace less the heartbeat interval, and over the
	// pass period and the api's stamp period (min(grace/4, 1s) both).
	// Default WorkerGrace/2.
	Outage time.Duration
	// Queues deletes the asynq queues of workers that are not alive. Nil
	// leaves them in Redis.
	Queues QueueAdmin
}

func (c *LivenessConfig) defaults(grace time.Duration) {
	c.Tick = cmp.Or(c.Tick, min(grace/4, time.Second))
	if len(c.Backoff) == 0 {
		c.Backoff = domain.ARCTable
	}
	c.DeadRetention = cmp.Or(c.DeadRetention, time.Hour)
	c.Outage = cmp.Or(c.Outage, grace/2)
}

// liveness is the state of the dead-worker pass: its metrics, whether its
// last pass failed, the grace restart of its last judgement, and the
// worker queues it could not delete (retried after ResyncPeriod).
type liveness struct {
	dead, deleted, lost, suspected prometheus.Counter
	restarts                       *prometheus.CounterVec

	// failed is set by a pass that failed, cleared by the judgement that
	// restarted the grace for it.
	failed atomic.Bool

	mu      sync.Mutex
	stuck   map[string]time.Time // queue → when its deletion last failed
	restart domain.GraceRestart  // the last judgement's
}

func newLiveness(reg prometheus.Registerer) *liveness {
	l := &liveness{stuck: map[string]time.Time{},
		dead: prometheus.NewCounter(prometheus.CounterOpts{Name: "capstan_scheduler_workers_dead_total",
			Help: "Workers declared dead for missing heartbeats past their grace."}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{Name: "capstan_scheduler_workers_deleted_total",
			Help: "Worker registrations deleted after too many failures (ARC)."}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{Name: "capstan_scheduler_attempts_worker_lost_total",
			Help: "Live attempts ended WORKER_FAILED because their worker died or was deleted."}),
		suspected: prometheus.NewCounter(prometheus.CounterOpts{Name: "capstan_scheduler_outages_suspected_total",
			Help: "Liveness passes that found more than half of the alive workers silent and deferred their death one more grace (a suspected control-plane outage)."}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "capstan_scheduler_worker_grace_restarts_total",
			Help: "Outages after which every worker got a fresh grace, by reason: first_pass, round_trip_failed, scheduler_gap, heartbeat_path_down."},
			[]string{"reason"}),
	}
	reg.MustRegister(l.dead, l.deleted, l.lost, l.suspected, l.restarts)
	return l
}

// LivenessResult is what one dead-worker pass did.
type LivenessResult struct {
	// Dead counts the workers declared dead.
	Dead int
	// Lost counts the attempts ended WORKER_FAILED and evaluated.
	Lost int
	// QueuesDeleted counts the worker queues removed from Redis.
	QueuesDeleted int
	// Purged counts the dead worker rows deleted after DeadRetention.
	Purged int64
	// Deferred counts the silent workers whose death waits for a second
	// grace (a suspected control-plane outage).
	Deferred int
	// Restart is why the pass restarted every worker's grace; "" when it
	// did not.
	Restart domain.GraceRestart
}

// livenessEvery runs the dead-worker pass every Liveness.Tick until ctx
// ends, and kicks a scheduling pass after one that requeued anything.
func (s *Scheduler) livenessEvery(ctx context.Context) {
	t := time.NewTicker(s.cfg.Liveness.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if s.livenessPass(ctx) {
				s.Kick()
			}
		}
	}
}

// livenessPass runs livenessOnce, logs what it did and reports whether it
// requeued anything (a scheduling pass is then due).
func (s *Scheduler) livenessPass(ctx context.Context) bool {
	res, err := s.livenessOnce(ctx)
	s.extendReservations(ctx)
	if err != nil {
		s.live.failed.Store(true) // the next pass gives every worker a fresh grace
		s.log.Warn("liveness pass failed", "err", err)
	}
	if res.Dead > 0 || res.Lost > 0 || res.QueuesDeleted > 0 || res.Purged > 0 {
		s.log.Info("liveness pass", "dead", res.Dead, "lost", res.Lost, "queues_deleted", res.QueuesDeleted,
			"purged", res.Purged, "deferred", res.Deferred)
	}
	return res.Lost > 0
}

// livenessOnce is one dead-worker pass (Iris's worker-death cascade): workers
// silent for WorkerGrace become dead, as judgeSilence fences silence
// (counted only while the control plane worked; a mass death waits a
// second grace); then, in a second transaction, the live attempts of
// workers that are not alive become WORKER_FAILED (the newly dead workers'
// join their failures) and are evaluated at once (the preemption budget
// requeues them); the queues of workers that are not alive are deleted,
// and dead rows past DeadRetention are purged. Each transaction follows
// the lock order: the liveness watch, then workers; then attempts before
// workers.
func (s *Scheduler) livenessOnce(ctx context.Context) (LivenessResult, error) {
	var res LivenessResult
	failed := s.live.failed.Load()
	j, err := s.judgeSilence(ctx, failed)
	if err != nil {
		return res, fmt.Errorf("mark silent workers dead: %w", err)
	}
	if failed {
		s.live.failed.Store(false)
	}
	dead := j.Dead
	res.Restart = j.Restart
	if !j.Verdict.DeferredAt.IsZero() {
		res.Deferred = j.Silent
	}
	var lost []store.LostAttempt
	err = s.store.InTx(ctx, func(tx *store.Store) error {
		now := time.Now().UTC()
		var err error
		if lost, err = tx.Workers().LoseAttemptsOfGoneWorkers(ctx, now); err != nil {
			return fmt.Errorf("end attempts of gone workers: %w", err)
		}
		for _, l := range lost {
			if slices.Contains(dead, l.WorkerID) {
				if _, _, err := tx.Workers().AddWorkerFailure(ctx, l.WorkerID, store.WorkerDead, l.ID, now); err != nil {
					return fmt.Errorf("add failure of attempt %d to dead worker %s: %w", l.ID, l.WorkerID, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	res.Dead, res.Lost = len(dead), len(lost)
	s.live.dead.Add(float64(len(dead)))
	s.evaluateLost(ctx, lost)
	res.QueuesDeleted = s.sweepQueues(ctx)
	if res.Purged, err = s.store.Workers().DeleteDeadWorkers(ctx, time.Now().Add(-s.cfg.Liveness.DeadRetention)); err != nil {
		return res, fmt.Errorf("purge dead workers: %w", err)
	}
	return res, nil
}

// evaluateLost applies lost attempts to their tasks now; one that fails is
// left to its task:evaluate message and the resync.
func (s *Scheduler) evaluateLost(ctx context.Context, lost []store.LostAttempt) {
	s.live.lost.Add(float64(len(lost)))
	for _, l := range lost {
		if _, err := s.evaluate(ctx, l.ID); err != nil {
			s.log.Warn("evaluate lost attempt failed; queued instead", "attempt_id", l.ID, "err", err)
			s.enqueueEvaluate(ctx, l.ID)
		}
	}
}

// recordWorkerFailure applies ARC's self-healing rule to the worker of a
// finished attempt before the attempt is evaluated, so that the task it
// requeues is not placed on that worker before its backoff: an attempt that
// ended as a platform failure (domain.IsPlatformFailure) on an alive worker
// joins the worker's failures (attempt id → finished_at; twice changes
// nothing). With n failures the worker takes no new work until
// Backoff.Delay(n) after the latest (placeable_after); past the table's last
// entry its row is deleted instead — never left as a failed zombie holding
// capacity — and then, in a second transaction (attempts before workers in
// the lock order), its live attempts become WORKER_FAILED and are queued for
// evaluation, and its queue is deleted. Its executor's next heartbeat gets
// 404, so it kills what it runs and registers again with an empty map.
// Source: ARC's failedRunnerBackoff and maxFailures (5).
func (s *Scheduler) recordWorkerFailure(ctx context.Context, attemptID int64) error {
	a, err := s.store.Attempts().GetAttempt(ctx, attemptID)
	if errors.Is(err, store.ErrNotFound) || err == nil && !platformFailure(a) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read attempt: %w", err)
	}
	failures, ok, err := s.store.Workers().AddWorkerFailure(ctx, *a.WorkerID, store.WorkerAlive, a.ID, *a.FinishedAt)
	if err != nil {
		return fmt.Errorf("add failure to worker %s: %w", *a.WorkerID, err)
	}
	if !ok {
		return nil // !ok: dead or deleted, nothing to gate
	}
	table, n := s.cfg.Liveness.Backoff, len(failures)
	if n <= len(table)-1 {
		after := latest(failures).Add(table.Delay(n))
		s.log.Info("worker failure recorded", "worker_id", *a.WorkerID, "attempt_id", attemptID, "failures", n,
			"placeable_after", after)
		if err := s.store.Workers().SetPlaceableAfter(ctx, *a.WorkerID, after); err != nil {
			return fmt.Errorf("set worker %s placeable after %s: %w", *a.WorkerID, after.Format(time.RFC3339Nano), err)
		}
		return nil
	}
	return s.deleteFailedWorker(ctx, *a.WorkerID, n)
}

// deleteFailedWorker deletes a worker past ARC's failure limit, ends its
// live attempts and queues their evaluation, and deletes its queue.
func (s *Scheduler) deleteFailedWorker(ctx context.Context, id string, n int) error {
	if err := s.store.Workers().DeleteWorker(ctx, id); err != nil {
		return fmt.Errorf("delete worker %s after %d failures: %w", id, n, err)
	}
	lost, err := s.store.Workers().LoseWorkerAttempts(ctx, id, fmt.Sprintf("the worker was deleted after %d failures", n),
		time.Now().UTC())
	if err != nil {
		return fmt.Errorf("end attempts of deleted worker %s: %w", id, err) // the liveness pass ends them: the worker is gone
	}
	s.log.Warn("worker deleted after too many failures; its executor registers again", "worker_id", id,
		"failures", n, "lost", len(lost))
	s.live.deleted.Inc()
	s.live.lost.Add(float64(len(lost)))
	for _, l := range lost {
		s.enqueueEvaluate(ctx, l.ID)
	}
	s.deleteQueue(queue.WorkerQueue(id), true, time.Now())
	return nil
}

// platformFailure reports whether a finished attempt counts against its
// worker.
func platformFailure(a store.Attempt) bool {
	cause := ""
	if a.Cause != nil {
		cause = *a.Cause
	}
	return a.WorkerID != nil && a.FinishedAt != nil && domain.IsPlatformFailure(a.State, cause, deref(a.Code))
}

// latest returns the latest time in m.
func latest(m map[string]time.Time) time.Time {
	var last time.Time
	for _, t := range m {
		if t.After(last) {
			last = t
		}
	}
	return last
}

// sweepQueues deletes the asynq queues worker:<id> of workers that are not
// alive: what they still hold was ended with the worker. The queue of a
// worker known dead is deleted whatever it holds; that of a worker this
// database does not know (deregistered, deleted) only when it is empty,
// since a Capstan sharing the Redis database may own it. A queue that cannot
// be deleted is retried after ResyncPeriod. It returns how many it deleted.
func (s *Scheduler) sweepQueues(ctx context.Context) int {
	if s.cfg.Liveness.Queues == nil {
		return 0
	}
	names, err := s.cfg.Liveness.Queues.Queues()
	if err != nil {
		s.log.Warn("list queues failed", "err", err)
		return 0
	}
	ids := map[string]string{}
	for _, name := range names {
		if id, ok := strings.CutPrefix(name, queue.WorkerQueue("")); ok {
			ids[id] = name
		}
	}
	if len(ids) == 0 {
		return 0
	}
	list := make([]string, 0, len(ids))
	for id := range ids {
		list = append(list, id)
	}
	states, err := s.store.Workers().WorkerStates(ctx, list)
	if err != nil {
		s.log.Warn("read worker states failed", "err", err)
		return 0
	}
	n, now := 0, time.Now()
	for id, name := range ids {
		state, known := states[id]
		if state != store.WorkerAlive && s.deleteQueue(name, known, now) {
			n++
		}
	}
	return n
}

// deleteQueue deletes queue name (force: even with tasks) unless its
// deletion failed within the last ResyncPeriod; it reports whether it
// deleted the queue.
func (s *Scheduler) deleteQueue(name string, force bool, now time.Time) bool {
	if s.cfg.Liveness.Queues == nil {
		return false
	}
	s.live.mu.Lock()
	failed, ok := s.live.stuck[name]
	s.live.mu.Unlock()
	if ok && now.Sub(failed) < s.cfg.Resync.Period {
		return false
	}
	err := s.cfg.Liveness.Queues.DeleteQueue(name, force)
	s.live.mu.Lock()
	defer s.live.mu.Unlock()
	if err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
		s.live.stuck[name] = now
		s.log.Debug("delete worker queue failed; retried later", "queue", name, "err", err)
		return false
	}
	delete(s.live.stuck, name)
	return err == nil
}
