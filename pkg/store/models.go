package store

import (
	"time"

	"github.com/lib/pq"
	"gorm.io/datatypes"
)

// Run is a row of runs.
type Run struct {
	Project        string `gorm:"primaryKey"`
	Domain         string `gorm:"primaryKey"`
	Name           string `gorm:"primaryKey"`
	Spec           datatypes.JSON
	Phase          string
	IdempotencyKey *string
	Version        int64
	CreatedAt      time.Time
	UpdatedAt      time.Time
	EndedAt        *time.Time
}

// Action is a row of actions: the run's root a0, or one step.
type Action struct {
	Project           string `gorm:"primaryKey"`
	Domain            string `gorm:"primaryKey"`
	RunName           string `gorm:"primaryKey"`
	Name              string `gorm:"primaryKey"`
	ParentActionName  *string
	Kind              string
	Spec              datatypes.JSON
	DependsOn         pq.StringArray `gorm:"type:text[]"`
	Phase             string
	AbortRequestedAt  *time.Time
	AbortAttemptCount int
	AbortReason       *string
	AbortOutcome      *string
	AbortCause        *string // "aborted" (or NULL) or "timeout": see AbortAction
	FailedTimes       int
	NotBefore         *time.Time
	Version           int64
	CreatedAt         time.Time
	UpdatedAt         time.Time
	StartedAt         *time.Time
	EndedAt           *time.Time
}

// Task is a row of tasks: one replica of a task action.
type Task struct {
	ID                   int64 `gorm:"primaryKey"`
	Project              string
	Domain               string
	RunName              string
	ActionName           string
	Idx                  int
	State                int16
	FailureCount         int
	MaxRetriesFailure    int
	PreemptionCount      int
	MaxRetriesPreemption int
	SystemFailureCount   int
	MaxSystemFailures    int
	AttemptCount         int
	WorkerID             *string
	PendingReason        *string
	NotBefore            *time.Time
	SchedulingDeadline   *time.Time
	Priority             int16
	CPUMillis            int64 `gorm:"column:cpu_millis"`
	MemoryBytes          int64
	Constraints          datatypes.JSON
	Coscheduled          bool
	TimeoutMs            int64
	Version              int64
	CreatedAt            time.Time
	UpdatedAt            time.Time
	EndedAt              *time.Time
}

// Attempt is a row of attempts: one try of one task on one worker.
type Attempt struct {
	ID          int64 `gorm:"primaryKey"`
	TaskID      int64
	Number      int
	WorkerID    *string
	State       int16
	ExitCode    *int
	Error       *string
	Cause       *string
	Pid         *int
	CreatedAt   time.Time
	UpdatedAt   time.Time
	StartedAt   *time.Time
	FinishedAt  *time.Time
	EvaluatedAt *time.Time
	// KillRequestedAt is set while a kill of this attempt is pending (see
	// RequestAttemptKill); KillAttemptCount counts its delivery rounds;
	// KillCause is why; KillOutcome is set once it is cleared.
	KillRequestedAt  *time.Time
	KillAttemptCount int
	KillCause        *string
	KillOutcome      *string
}

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
	ID          string `gorm:"primaryKey"`
	Name        string
	Address     string
	Slots       int
	CPUMillis   int64 `gorm:"column:cpu_millis"`
	MemoryBytes int64
	Labels      datatypes.JSON
	// Failures maps attempt id → time of the attempts lost or failed for
	// platform causes on this worker (ARC's failures map): see liveness.go.
	Failures datatypes.JSON
	// PlaceableAfter gates new work during the failure backoff; nil = none.
	PlaceableAfter *time.Time
	// LastFailureAt is the latest time in Failures.
	LastFailureAt *time.Time
	// Draining: the executor is shutting down and takes no new work.
	Draining        bool
	State           string
	Version         int64
	CreatedAt       time.Time
	UpdatedAt       time.Time
	LastHeartbeatAt time.Time
}

// RunEvent is a row of run_events, the append-only audit trail.
type RunEvent struct {
	ID         int64 `gorm:"primaryKey"`
	Project    string
	Domain     string
	RunName    string
	ActionName *string
	TaskID     *int64
	AttemptID  *int64
	Type       string
	Data       datatypes.JSON
	CreatedAt  time.Time
}
