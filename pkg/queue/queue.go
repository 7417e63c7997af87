// Package queue names Capstan's asynq queues and task types and builds their
// tasks. Payloads carry ids only; consumers read the rows. Dedupe relies on
// asynq's unique TaskID: enqueueing a TaskID that still exists (pending,
// active, scheduled or retrying) fails with asynq.ErrTaskIDConflict, which
// Enqueuer treats as success.
package queue

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/obs"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// Queues.
const (
	// Scheduler carries run and task events to the scheduler.
	Scheduler = "scheduler"
	// Abort carries abort requests to the abort reconciler.
	Abort = "abort"
)

// WorkerQueue is the queue of one executor: "worker:<id>".
func WorkerQueue(workerID string) string { return "worker:" + workerID }

// Task types, `noun:verb`.
const (
	// TypeRunStart expands a new run and starts its first steps.
	// TaskID "run:<project/domain/run>".
	TypeRunStart = "run:start"
	// TypeRunsStart starts the runs of one batch create, each as
	// TypeRunStart would. TaskID "runs:<project/domain>:<digest of the
	// names>".
	TypeRunsStart = "runs:start"
	// TypeRunAdvance re-evaluates a run's progression after an outside change
	// (a step aborted). No TaskID: the handler is idempotent.
	TypeRunAdvance = "run:advance"
	// TypeTasksEvaluate applies the outcomes of the attempts one report
	// batch ended, each as TypeTaskEvaluate would. TaskID
	// "attempts:<digest of the ids>:evaluate".
	TypeTasksEvaluate = "tasks:evaluate"
	// TypeTaskEvaluate applies a finished attempt's outcome to its task.
	// TaskID "attempt:<id>:evaluate".
	TypeTaskEvaluate = "task:evaluate"
	// TypeAttemptRun tells an executor to run an attempt. TaskID "attempt:<id>".
	TypeAttemptRun = "attempt:run"
	// TypeAttemptsRun tells an executor to run the attempts one pass placed
	// on it for one trace (a step's replicas), each as TypeAttemptRun
	// would. TaskID "attempts:<digest of the ids>:run".
	TypeAttemptsRun = "attempts:run"
	// TypeActionAbort delivers an abort. TaskID "project/domain/run/action".
	TypeActionAbort = "action:abort"
	// TypeAttemptKill delivers the kill of one attempt (preemption, an
	// attempt's timeout), on the Abort queue. TaskID "attempt:<id>:kill".
	TypeAttemptKill = "attempt:kill"
	// TypeRunsRemove tells an executor that runs it ran attempts of were
	// deleted, so that it removes their run directories. TaskID
	// "runs:<project/domain>:<digest of the names>:remove".
	TypeRunsRemove = "runs:remove"
)

// RunPayload names a run.
type RunPayload struct {
	Project string `json:"project"`
	Domain  string `json:"domain"`
	Run     string `json:"run"`
}

// Key returns the run's key.
func (p RunPayload) Key() domain.RunKey {
	return domain.RunKey{Project: p.Project, Domain: p.Domain, Run: p.Run}
}

// RunsPayload names runs of one project and domain.
type RunsPayload struct {
	Project string   `json:"project"`
	Domain  string   `json:"domain"`
	Runs    []string `json:"runs"`
}

// Keys returns the runs' keys, in the payload's order.
func (p RunsPayload) Keys() []domain.RunKey {
	keys := make([]domain.RunKey, len(p.Runs))
	for i, r := range p.Runs {
		keys[i] = domain.RunKey{Project: p.Project, Domain: p.Domain, Run: r}
	}
	return keys
}

// AttemptPayload names an attempt. Spec, on the attempt:run a placement
// pass sends, is what the executor needs to run it, signed for its worker
// (see NewAttemptsRunTask).
type AttemptPayload struct {
	AttemptID int64       `json:"attempt_id"`
	Spec      *SignedSpec `json:"signed_spec,omitempty"`
}

// AbortPayload names the action to abort.
type AbortPayload struct {
	Key string `json:"key"`
}

// NewRunStartTask builds run:start for key.
func NewRunStartTask(key domain.RunKey) *asynq.Task {
	return newTask(TypeRunStart, mustJSON(RunPayload{key.Project, key.Domain, key.Run}),
		asynq.Queue(Scheduler), asynq.TaskID("run:"+key.String()), asynq.MaxRetry(25))
}

// NewRunsStartTask builds runs:start for the named runs of project/domain
// (one message for up to a batch's 1,000 runs, about 20 bytes a name). Its
// TaskID digests the names, so a retried batch that answers with the same
// runs while the first message is still queued adds nothing.
func NewRunsStartTask(project, domainName string, runs []string) *asynq.Task {
	sum := sha256.Sum256([]byte(strings.Join(runs, "\n")))
	id := "runs:" + project + "/" + domainName + ":" + hex.EncodeToString(sum[:16])
	return newTask(TypeRunsStart, mustJSON(RunsPayload{project, domainName, runs}),
		asynq.Queue(Scheduler), asynq.TaskID(id), asynq.MaxRetry(25))
}

// NewRunsRemoveTask builds runs:remove on the worker's queue for the
// deleted runs of project/domain (RunsPayload). The executor removes the
// run directories of those of them the api does not know (it asks: a name
// may be taken again meanwhile), so a late or repeated message removes
// nothing a run still uses. Its TaskID digests the names.
func NewRunsRemoveTask(workerID, project, domainName string, runs []string) *asynq.Task {
	sum := sha256.Sum256([]byte(strings.Join(runs, "\n")))
	id := "runs:" + project + "/" + domainName + ":" + hex.EncodeToString(sum[:16]) + ":remove"
	return newTask(TypeRunsRemove, mustJSON(RunsPayload{project, domainName, runs}),
		asynq.Queue(WorkerQueue(workerID)), asynq.TaskID(id), asynq.MaxRetry(10))
}

// NewRunAdvanceTask builds run:advance for key.
func NewRunAdvanceTask(key domain.RunKey) *asynq.Task {
	return newTask(TypeRunAdvance, mustJSON(RunPayload{key.Project, key.Domain, key.Run}),
		asynq.Queue(Scheduler), asynq.MaxRetry(25))
}

// AttemptsPayload names attempts. Specs, on the attempts:run a placement
// pass sends, are what the executor needs to run some of them, each signed
// for its worker (see NewAttemptsRunTask).
type AttemptsPayload struct {
	AttemptIDs []int64      `json:"attempt_ids"`
	Specs      []SignedSpec `json:"signed_specs,omitempty"`
}

// HeaderPutBack marks a task a WakeConsumer put back on its queue after its
// handler failed: a later delivery of it is not its first.
const HeaderPutBack = "capstan-put-back"

// FirstDelivery reports whether t, handled with ctx, is delivered for the
// first time: asynq has not retried it, and no WakeConsumer put it back.
// Only on its first delivery may an attempt:run's spec be trusted without
// reading the attempt: a later one may come after the attempt ran (a retry
// of a message whose other attempts failed to start). A ctx without
// asynq's metadata (a WakeConsumer's, which only handles tasks announced at
// their enqueue) counts as not retried.
func FirstDelivery(ctx context.Context, t *asynq.Task) bool {
	n, _ := asynq.GetRetryCount(ctx)
	return n == 0 && t.Headers()[HeaderPutBack] == ""
}

// NewTasksEvaluateTask builds the one message for the attempts a report
// batch ended: task:evaluate for one, tasks:evaluate for several (about 8
// bytes an id). The TaskID digests the ids, so a resent batch whose message
// is still queued adds nothing.
func NewTasksEvaluateTask(ids []int64) *asynq.Task {
	if len(ids) == 1 {
		return NewTaskEvaluateTask(ids[0])
	}
	b := mustJSON(AttemptsPayload{AttemptIDs: ids})
	sum := sha256.Sum256(b)
	return newTask(TypeTasksEvaluate, b, asynq.Queue(Scheduler),
		asynq.TaskID("attempts:"+hex.EncodeToString(sum[:16])+":evaluate"), asynq.MaxRetry(25))
}

// NewTaskEvaluateTask builds task:evaluate for a finished attempt.
func NewTaskEvaluateTask(attemptID int64) *asynq.Task {
	return newTask(TypeTaskEvaluate, mustJSON(AttemptPayload{AttemptID: attemptID}), asynq.Queue(Scheduler),
		asynq.TaskID("attempt:"+strconv.FormatInt(attemptID, 10)+":evaluate"), asynq.MaxRetry(25))
}

// NewAttemptRunTask builds attempt:run on the worker's queue, with the
// attempt's signed spec when not nil (see NewAttemptsRunTask).
func NewAttemptRunTask(workerID string, attemptID int64, spec *SignedSpec) *asynq.Task {
	return newTask(TypeAttemptRun, mustJSON(AttemptPayload{attemptID, spec}), asynq.Queue(WorkerQueue(workerID)),
		asynq.TaskID("attempt:"+strconv.FormatInt(attemptID, 10)), asynq.MaxRetry(10))
}

// NewAttemptsRunTask builds the one message for the attempts a pass placed
// on the worker together: attempt:run for one, attempts:run for several
// (about 8 bytes an id). The TaskID digests the ids. specs are what the
// executor needs to run some of those attempts, as the pass bound them,
// each signed under the worker's dispatch key (SignSpec): on the message's
// first delivery (FirstDelivery) the executor starts the attempt of each
// spec that verifies without reading it from the api, and runs nothing of
// one that does not; it reads the attempts named without a spec, and all
// of them on a later delivery. Only the pass, which sends each attempt
// once, may give specs: a re-dispatch (the resync) names ids alone.
func NewAttemptsRunTask(workerID string, ids []int64, specs []SignedSpec) *asynq.Task {
	if len(ids) == 1 {
		var spec *SignedSpec
		if len(specs) == 1 {
			spec = &specs[0]
		}
		return NewAttemptRunTask(workerID, ids[0], spec)
	}
	sum := sha256.Sum256(mustJSON(AttemptsPayload{AttemptIDs: ids}))
	return newTask(TypeAttemptsRun, mustJSON(AttemptsPayload{ids, specs}), asynq.Queue(WorkerQueue(workerID)),
		asynq.TaskID("attempts:"+hex.EncodeToString(sum[:16])+":run"), asynq.MaxRetry(10))
}

// abortRetryMargin is how many more asynq retries an abort task gets than
// the reconciler's delivery rounds: see AbortTaskRetries.
const abortRetryMargin = 5

// AbortTaskRetries is the asynq MaxRetry every action:abort and attempt:kill
// task carries when the abort reconciler gives an abort maxAttempts delivery
// rounds (ABORT_MAX_ATTEMPTS): maxAttempts+5. The reconciler's retries are
// not failures: it counts rounds in Postgres (abort_attempt_count) and
// returns its backoffs as expected retries that asynq does not charge to
// the task, so asynq's counter moves only on unexpected errors (a panic, a
// lost lease). The margin keeps asynq from archiving the task before
// Postgres decides the abort's outcome: an archived task keeps its TaskID
// and blocks every later push of that abort.
func AbortTaskRetries(maxAttempts int) int { return maxAttempts + abortRetryMargin }

// NewActionAbortTask builds action:abort. maxRetry is AbortTaskRetries of
// the reconciler's ABORT_MAX_ATTEMPTS; it must be at least 1, or asynq
// archives the task on its first error.
func NewActionAbortTask(key domain.ActionKey, maxRetry int) *asynq.Task {
	return newTask(TypeActionAbort, mustJSON(AbortPayload{key.String()}), asynq.Queue(Abort),
		asynq.TaskID(key.String()), asynq.MaxRetry(maxRetry))
}

// NewAttemptKillTask builds attempt:kill for the kill that
// store.RequestAttemptKill recorded: TaskID "attempt:<id>:kill" (the dedupe
// key), on the Abort queue, payload AttemptPayload. maxRetry is as for
// NewActionAbortTask (AbortTaskRetries, at least 1).
// Enqueue it after the transaction that requested the kill commits.
func NewAttemptKillTask(attemptID int64, maxRetry int) *asynq.Task {
	return newTask(TypeAttemptKill, mustJSON(AttemptPayload{AttemptID: attemptID}), asynq.Queue(Abort),
		asynq.TaskID(AttemptKillTaskID(attemptID)), asynq.MaxRetry(maxRetry))
}

// AttemptKillTaskID is the TaskID of attempt:kill for attemptID.
func AttemptKillTaskID(attemptID int64) string {
	return "attempt:" + strconv.FormatInt(attemptID, 10) + ":kill"
}

// Decode unmarshals a task's payload into v, wrapping asynq.SkipRetry on
// failure: a payload that does not decode never will.
func Decode(t *asynq.Task, v any) error {
	if err := json.Unmarshal(t.Payload(), v); err != nil {
		return fmt.Errorf("%s payload: %v: %w", t.Type(), err, asynq.SkipRetry)
	}
	return nil
}

// newTask builds a task with an empty header map, which Enqueue fills with
// the trace context (asynq.NewTask leaves the headers nil, and they cannot
// be added later).
func newTask(typ string, payload []byte, opts ...asynq.Option) *asynq.Task {
	return asynq.NewTaskWithHeaders(typ, payload, map[string]string{}, opts...)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// Enqueuer enqueues tasks and counts duplicates.
type Enqueuer struct {
	client *asynq.Client
	log    *slog.Logger
	// Duplicates counts enqueues dropped because the TaskID existed.
	Duplicates atomic.Int64
	// Payloads, when set, observes each task's payload size (kind
	// queue_payload). Default nil: not observed.
	Payloads *obs.PayloadSizes
	// Wake, when set, is the Redis where Enqueue announces new tasks on
	// their queue's wake list. Default nil: consumers learn of tasks from
	// their queue's poll alone.
	Wake redis.UniversalClient
}

// NewEnqueuer wraps an asynq client.
func NewEnqueuer(c *asynq.Client, log *slog.Logger) *Enqueuer {
	return &Enqueuer{client: c, log: log}
}

// Enqueue enqueues t with ctx's trace context in its headers (see
// obs.InjectTask) and, when Wake is set and t is due now on the scheduler's
// or an executor's queue, announces it on that queue's wake list (see
// WakeConsumer); a TaskID conflict (the same work is already queued,
// running or in backoff) is counted, logged at debug and not an error.
func (e *Enqueuer) Enqueue(ctx context.Context, t *asynq.Task, opts ...asynq.Option) error {
	obs.InjectTask(ctx, t)
	e.Payloads.Observe(obs.KindQueuePayload, len(t.Payload()))
	info, err := e.client.EnqueueContext(ctx, t, opts...)
	if errors.Is(err, asynq.ErrTaskIDConflict) || errors.Is(err, asynq.ErrDuplicateTask) {
		e.Duplicates.Add(1)
		e.log.Debug("enqueue deduplicated", "type", t.Type())
		return nil
	}
	if err != nil {
		return fmt.Errorf("enqueue %s: %w", t.Type(), err)
	}
	e.announce(ctx, info)
	return nil
}
