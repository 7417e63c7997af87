package store

// The json tags of Run, Action, Task and Attempt are their column names:
// reads that fetch many rows in one round trip take them as the JSON
// Postgres builds from the rows (row_to_json), see detailsSQL, decoded by
// decodeRows.

import (
	"database/sql/driver"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	gojson "github.com/goccy/go-json"
	"github.com/jackc/pgx/v5/pgtype"
	"gorm.io/datatypes"
)

// Run is a row of runs.
type Run struct {
	Project        string              `gorm:"primaryKey" json:"project"`
	Domain         string              `gorm:"primaryKey" json:"domain"`
	Name           string              `gorm:"primaryKey" json:"name"`
	Spec           domain.WorkflowSpec `gorm:"serializer:json" json:"spec"`
	Phase          string              `json:"phase"`
	IdempotencyKey *string             `json:"idempotency_key"`
	// TimeoutMs is the spec's timeout (0 = none), counted from CreatedAt.
	TimeoutMs int64 `json:"timeout_ms"`
	// SuspendRequestedAt is set while a suspend is in force: no new step
	// starts. ResumeRequestedAt is the latest resume: it resumes the steps
	// paused before it.
	SuspendRequestedAt *time.Time `json:"suspend_requested_at"`
	ResumeRequestedAt  *time.Time `json:"resume_requested_at"`
	// RestartRequestedAt is set while a restart waits for the scheduler;
	// RestartFrom is its from_step ("" or nil: every step that did not
	// succeed).
	RestartRequestedAt *time.Time `json:"restart_requested_at"`
	RestartFrom        *string    `json:"restart_from"`
	Version            int64      `json:"version"`
	CreatedAt          time.Time  `json:"created_at"`
	UpdatedAt          time.Time  `json:"updated_at"`
	EndedAt            *time.Time `json:"ended_at"`
	// WorkflowName and WorkflowVersion name the template version the spec
	// is of; nil for an inline spec.
	WorkflowName    *string `json:"workflow_name"`
	WorkflowVersion *int    `json:"workflow_version"`
	// Params are the run's resolved params (nil: the spec declares none).
	Params map[string]any `gorm:"serializer:json" json:"params"`
	// ScheduleName and ScheduledAt: the schedule and its time the run is
	// for; TriggerName and EventID: the trigger and the published event.
	ScheduleName *string    `json:"schedule_name"`
	ScheduledAt  *time.Time `json:"scheduled_at"`
	TriggerName  *string    `json:"trigger_name"`
	EventID      *string    `json:"event_id"`
	// ConcurrencyKey is the run's evaluated concurrency key (nil: its spec
	// has none); AdmittedAt is when it took a slot of it (nil while it
	// waits); PendingReason says why it waits. FairnessKey is its
	// evaluated fairness key ("" when its spec has none).
	ConcurrencyKey *string    `json:"concurrency_key"`
	AdmittedAt     *time.Time `json:"admitted_at"`
	PendingReason  *string    `json:"pending_reason"`
	FairnessKey    string     `json:"fairness_key"`
	// ParentRun and ParentAction name the workflow step a child run is of
	// (nil for a run created through the API); ParentIndex is its index
	// among the step's children, ParentGeneration the step's generation it
	// belongs to, ParentTry how many children of its index started before
	// it. Depth is 0 for a run created through the API, else its parent's
	// + 1 (at most domain.MaxDepth).
	ParentRun        *string `json:"parent_run"`
	ParentAction     *string `json:"parent_action"`
	ParentIndex      *int    `json:"parent_index"`
	ParentGeneration *int    `json:"parent_generation"`
	ParentTry        *int    `json:"parent_try"`
	Depth            int     `json:"depth"`
	// TTLSuccessMs and TTLFailureMs are the spec's ttl for each outcome
	// (domain.TTL.Millis; nil: the spec does not say). ExpiresAt is when
	// the ended run is deleted (nil while it runs, for a child run and
	// when it is kept): expiresAtSQL stamps it as the run ends.
	TTLSuccessMs *int64     `gorm:"column:ttl_success_ms" json:"ttl_success_ms"`
	TTLFailureMs *int64     `gorm:"column:ttl_failure_ms" json:"ttl_failure_ms"`
	ExpiresAt    *time.Time `json:"expires_at"`
}

// Parent returns the key of the workflow step a child run is of, and
// false for a run created through the API.
func (r Run) Parent() (domain.ActionKey, bool) {
	if r.ParentRun == nil || r.ParentAction == nil {
		return domain.ActionKey{}, false
	}
	return domain.RunKey{Project: r.Project, Domain: r.Domain, Run: *r.ParentRun}.Action(*r.ParentAction), true
}

// Action is a row of actions: the run's root a0, or one step.
type Action struct {
	Project          string  `gorm:"primaryKey" json:"project"`
	Domain           string  `gorm:"primaryKey" json:"domain"`
	RunName          string  `gorm:"primaryKey" json:"run_name"`
	Name             string  `gorm:"primaryKey" json:"name"`
	ParentActionName *string `json:"parent_action_name"`
	Kind             string  `json:"kind"`
	// Spec is the step's spec; the root a0's is empty (its run holds the
	// workflow's).
	Spec              domain.Step `gorm:"serializer:json" json:"spec"`
	DependsOn         Strings     `gorm:"type:text[]" json:"depends_on"`
	Phase             string      `json:"phase"`
	AbortRequestedAt  *time.Time  `json:"abort_requested_at"`
	AbortAttemptCount int         `json:"abort_attempt_count"`
	AbortReason       *string     `json:"abort_reason"`
	AbortOutcome      *string     `json:"abort_outcome"`
	AbortCause        *string     `json:"abort_cause"` // "aborted" (or NULL) or "timeout": see AbortAction
	// FailedTimes counts the step's failed retries under on_failure
	// suspend (KubeVela's), shown as step_retries.
	FailedTimes int `json:"failed_times"`
	// NotBefore is when a timed wait (WaitingFor duration or retry) ends.
	NotBefore *time.Time `json:"not_before"`
	// Generation numbers the step's runs: a retry as a whole or a restart
	// creates its tasks anew under the next generation, history kept.
	Generation int `json:"generation"`
	// TimeoutMs is the step's timeout (0 = none), counted from StartedAt.
	TimeoutMs int64 `json:"timeout_ms"`
	// WaitingFor is what a waiting step waits for: WaitDuration, WaitResume,
	// WaitApproval or WaitRetry; nil when it does not wait.
	WaitingFor *string `json:"waiting_for"`
	// PausedAt is when the step last became PAUSED.
	PausedAt *time.Time `json:"paused_at"`
	// Reason says why the step ended or waits, e.g. "rejected".
	Reason *string `json:"reason"`
	// Decision is an approval's: domain.DecisionApproved or
	// domain.DecisionRejected, with who made it, when, and their comment.
	// DecidedByTokenID and DecidedByTokenName are the token the api
	// authenticated the decision with; DecidedBy is the label its caller
	// gave (by), unchecked.
	Decision           *string    `json:"decision"`
	DecidedBy          *string    `json:"decided_by"`
	DecidedByTokenID   *string    `json:"decided_by_token_id"`
	DecidedByTokenName *string    `json:"decided_by_token_name"`
	DecidedAt          *time.Time `json:"decided_at"`
	DecisionComment    *string    `json:"decision_comment"`
	// CacheKey is a discoverable step's catalog key (domain.CacheKey),
	// recorded when it would start; CacheStatus is domain.CacheHit,
	// CacheMiss or CachePopulated; nil for other steps.
	CacheKey    *string `json:"cache_key"`
	CacheStatus *string `json:"cache_status"`
	// Outputs are a HIT step's outputs, copied from its cache entry (it ran
	// no task), or a SUCCEEDED workflow step's, gathered from its children;
	// nil for every other step.
	Outputs map[string]string `gorm:"serializer:json" json:"outputs"`
	// CacheWaits counts the checks of a serializable step that found its
	// key reserved by another action: the exponent of its wait backoff.
	CacheWaits int        `json:"cache_waits"`
	Version    int64      `json:"version"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	StartedAt  *time.Time `json:"started_at"`
	EndedAt    *time.Time `json:"ended_at"`
}

// Task is a row of tasks: one replica of a task action.
type Task struct {
	ID         int64  `gorm:"primaryKey" json:"id"`
	Project    string `json:"project"`
	Domain     string `json:"domain"`
	RunName    string `json:"run_name"`
	ActionName string `json:"action_name"`
	// Generation is the action's generation the task belongs to.
	Generation           int              `json:"generation"`
	Idx                  int              `json:"idx"`
	State                domain.TaskState `json:"state"`
	FailureCount         int              `json:"failure_count"`
	MaxRetriesFailure    int              `json:"max_retries_failure"`
	PreemptionCount      int              `json:"preemption_count"`
	MaxRetriesPreemption int              `json:"max_retries_preemption"`
	SystemFailureCount   int              `json:"system_failure_count"`
	MaxSystemFailures    int              `json:"max_system_failures"`
	// WaitCount and WaitingSince are the task's run of waits for its
	// target (domain.Wait): 0 and nil when it does not wait.
	WaitCount          int                 `json:"wait_count"`
	WaitingSince       *time.Time          `json:"waiting_since"`
	AttemptCount       int                 `json:"attempt_count"`
	WorkerID           *string             `json:"worker_id"`
	PendingReason      *string             `json:"pending_reason"`
	NotBefore          *time.Time          `json:"not_before"`
	SchedulingDeadline *time.Time          `json:"scheduling_deadline"`
	Priority           int16               `json:"priority"`
	CPUMillis          int64               `gorm:"column:cpu_millis" json:"cpu_millis"`
	MemoryBytes        int64               `json:"memory_bytes"`
	Constraints        []domain.Constraint `gorm:"serializer:json" json:"constraints"`
	Coscheduled        bool                `json:"coscheduled"`
	TimeoutMs          int64               `json:"timeout_ms"`
	Version            int64               `json:"version"`
	CreatedAt          time.Time           `json:"created_at"`
	UpdatedAt          time.Time           `json:"updated_at"`
	EndedAt            *time.Time          `json:"ended_at"`
	// Plugin is the step's plugin (placement honours domain.OptionalPlugins).
	Plugin string `json:"plugin"`
	// TraceParent is the W3C traceparent of the trace the task was created
	// in ('' for none): its attempts are dispatched in that trace.
	TraceParent string `json:"trace_parent"`
	// ConcurrencyKey and ConcurrencyMax are its step's evaluated
	// concurrency key and max_tasks (nil: the step has none); RateLimits
	// the rate limits it takes tokens of when placed (nil: none).
	ConcurrencyKey *string                `json:"concurrency_key"`
	ConcurrencyMax *int                   `json:"concurrency_max"`
	RateLimits     []domain.TaskRateLimit `gorm:"serializer:json" json:"rate_limits"`
	// FairnessKey is its run's fairness key (runs.fairness_key, '' for
	// none), copied as the task is inserted (taskValues): the pass
	// interleaves the keys of a project's PENDING tasks.
	FairnessKey string `json:"fairness_key"`
	// Item is a for_each task's item as it receives it; nil for a replica.
	Item *string `json:"item"`
	// Outputs are the outputs of a task that SUCCEEDED without running (its
	// item's cache entry, or its item's success in an earlier generation of
	// its step); nil when they are its current attempt's.
	Outputs map[string]string `gorm:"serializer:json" json:"outputs"`
}

// HasAdmission reports whether placing t is limited by a step
// concurrency or a rate limit.
func (t Task) HasAdmission() bool { return t.ConcurrencyKey != nil || len(t.RateLimits) > 0 }

// Attempt is a row of attempts: one try of one task on one worker.
type Attempt struct {
	ID          int64            `gorm:"primaryKey" json:"id"`
	TaskID      int64            `json:"task_id"`
	Number      int              `json:"number"`
	WorkerID    *string          `json:"worker_id"`
	State       domain.TaskState `json:"state"`
	ExitCode    *int             `json:"exit_code"`
	Error       *string          `json:"error"`
	Cause       *string          `json:"cause"`
	Pid         *int             `json:"pid"`
	CreatedAt   time.Time        `json:"created_at"`
	UpdatedAt   time.Time        `json:"updated_at"`
	StartedAt   *time.Time       `json:"started_at"`
	FinishedAt  *time.Time       `json:"finished_at"`
	EvaluatedAt *time.Time       `json:"evaluated_at"`
	// Outputs are the values a SUCCEEDED attempt wrote (name → value).
	Outputs map[string]string `gorm:"serializer:json" json:"outputs"`
	// KillRequestedAt is set while a kill of this attempt is pending (see
	// RequestAttemptKill); KillAttemptCount counts its delivery rounds;
	// KillCause is why; KillOutcome is set once it is cleared.
	KillRequestedAt  *time.Time `json:"kill_requested_at"`
	KillAttemptCount int        `json:"kill_attempt_count"`
	KillCause        *string    `json:"kill_cause"`
	KillOutcome      *string    `json:"kill_outcome"`
	// Code is a stable error code: the executor's (e.g. InvalidPluginSpec)
	// or the scheduler's (domain.CodeMaxSystemFailuresExceeded).
	Code *string `json:"code"`
}

// What a waiting step waits for (Action.WaitingFor).
const (
	// WaitDuration: a suspend step's duration, until NotBefore.
	WaitDuration = "duration"
	// WaitResume: a resume of the run (a suspend step without duration, or
	// a step paused after its retries).
	WaitResume = "resume"
	// WaitApproval: an approve or a reject.
	WaitApproval = "approval"
	// WaitRetry: the backoff before the step's next retry, until NotBefore.
	WaitRetry = "retry"
	// WaitCache: a serializable cached step whose key another action has
	// reserved (phase WAITING_FOR_CACHE) re-checks at NotBefore, or when
	// the reservation is released.
	WaitCache = "cache"
)

// AttemptLog is the bounded captured output of one attempt.
type AttemptLog struct {
	AttemptID int64 `gorm:"primaryKey"`
	Stdout    string
	Stderr    string
	Truncated bool
	CreatedAt time.Time
}

// Worker is a row of workers: one registered executor instance.
type Worker struct {
	ID          string            `gorm:"primaryKey" json:"id"`
	Name        string            `json:"name"`
	Address     string            `json:"address"`
	Slots       int               `json:"slots"`
	CPUMillis   int64             `gorm:"column:cpu_millis" json:"cpu_millis"`
	MemoryBytes int64             `json:"memory_bytes"`
	Labels      map[string]string `gorm:"serializer:json" json:"labels"`
	// Failures maps attempt id → time of the attempts lost or failed for
	// platform causes on this worker (ARC's failures map): see workers.go.
	Failures map[string]time.Time `gorm:"serializer:json" json:"failures"`
	// PlaceableAfter gates new work during the failure backoff; nil = none.
	PlaceableAfter *time.Time `json:"placeable_after"`
	// LastFailureAt is the latest time in Failures.
	LastFailureAt *time.Time `json:"last_failure_at"`
	// Draining: the executor is shutting down and takes no new work.
	Draining bool `json:"draining"`
	// Sandbox is how the executor isolates its attempts: "none", or
	// mechanisms joined with "+" (e.g. "uid+pidns+netns+rlimit").
	Sandbox string `json:"sandbox"`
	// CredentialSHA256 is the SHA-256 of the executor credential its
	// registration answered (workerkey.Digest); nil: none, and its
	// executor cannot be called until it registers again. Never
	// serialized.
	CredentialSHA256 []byte    `gorm:"column:credential_sha256" json:"-"`
	State            string    `json:"state"`
	Version          int64     `json:"version"`
	CreatedAt        time.Time `json:"created_at"`
	UpdatedAt        time.Time `json:"updated_at"`
	LastHeartbeatAt  time.Time `gorm:"default:now()" json:"last_heartbeat_at"`
}

// RunEvent is a row of run_events, the append-only audit trail.
type RunEvent struct {
	ID         int64          `gorm:"primaryKey" json:"id"`
	Project    string         `json:"project"`
	Domain     string         `json:"domain"`
	RunName    string         `json:"run_name"`
	ActionName *string        `json:"action_name"`
	TaskID     *int64         `json:"task_id"`
	AttemptID  *int64         `json:"attempt_id"`
	Type       string         `json:"type"`
	Data       datatypes.JSON `json:"data"`
	CreatedAt  time.Time      `json:"created_at"`
}

// decodeRows decodes JSON Postgres built from rows (row_to_json, json_agg)
// into v, a model or a slice of models. It uses go-json, a drop-in for
// encoding/json that decodes these rows several times faster: the api
// decodes them on every GET of a run.
func decodeRows(raw []byte, v any) error { return gojson.Unmarshal(raw, v) }

// encodeRows encodes v, rows or values the store sends Postgres as JSON
// (jsonb_populate_recordset, an event's data), with go-json, faster than
// encoding/json on the rows of the events, actions and tasks the scheduler
// writes.
func encodeRows(v any) ([]byte, error) { return gojson.Marshal(v) }

// columnsOf lists, comma-separated, the columns of T's table that a raw
// insert from jsonb_populate_record(set) writes: the JSON names of T's
// fields, which are the column names (rows are read with row_to_json), but
// the generated id.
func columnsOf[T any]() string {
	var cols []string
	typ := reflect.TypeFor[T]()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" && name != "id" {
			cols = append(cols, name)
		}
	}
	return strings.Join(cols, ", ")
}

// decodeEach decodes raw[i] into v[i] with decodeRows.
func decodeEach(raw [][]byte, v ...any) error {
	for i := range raw {
		if err := decodeRows(raw[i], v[i]); err != nil {
			return err
		}
	}
	return nil
}

// Strings is a Postgres text[] column (an action's depends_on) or parameter,
// read through pgx's array codec and written as a literal (Value).
type Strings []string

// array returns v as one Postgres array parameter, which pgx encodes with
// its array codec: gorm binds a struct as it is, where it would expand a
// slice into a list of parameters.
func array[T any](v []T) pgtype.Array[T] {
	a := pgtype.Array[T]{Elements: v, Valid: true}
	if len(v) > 0 {
		a.Dims = []pgtype.ArrayDimension{{Length: int32(len(v)), LowerBound: 1}}
	}
	return a
}

// textArrays holds the pgtype.Maps that decode text[] values: a Map is not
// safe for concurrent use, and a new one costs about a hundred allocations,
// so each call borrows one.
var textArrays = sync.Pool{New: func() any { return pgtype.NewMap() }}

// Scan reads a text[] value.
func (s *Strings) Scan(src any) error {
	m := textArrays.Get().(*pgtype.Map)
	defer textArrays.Put(m)
	return m.SQLScanner((*[]string)(s)).Scan(src)
}

// Value writes s as a text[] literal, every element quoted; nil is the
// empty array. A statement that casts its parameter to text first
// (CAST(CAST(@x AS text) AS text[])) has Postgres parse the literal; cast
// straight to text[], pgx parses it back and encodes it again.
func (s Strings) Value() (driver.Value, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, v := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for j := range len(v) {
			if v[j] == '"' || v[j] == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(v[j])
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String(), nil
}
