package storetest

import (
	"context"
	"database/sql"
	_ "embed"
	"fmt"
	"time"
)

// History is a span of finished single-task runs LoadHistory writes.
type History struct {
	// Project and Domain the runs are in; Prefix names them Prefix + i.
	Project, Domain, Prefix string
	// First is the first i; the runs are First .. First+N-1.
	First, N int
	// Start is the first run's creation; each next one is Every later.
	// Each ends Took after its creation.
	Start       time.Time
	Every, Took time.Duration
	// AfterCompletion, when set, is the runs' spec ttl.after_completion,
	// a Go duration: they expire that long after they ended.
	AfterCompletion time.Duration
}

// historySQL writes the final rows of the runs of a History: what a
// single-step noop run leaves once it SUCCEEDED (RowFloorScript's rows
// as its statements leave them: 1 run, 2 actions, 1 task, 1 attempt, 11
// events), in one statement. Its parameters: $1 project, $2 domain, $3
// prefix, $4 first, $5 last, $6 start, $7 every and $8 took (seconds),
// $9 the spec, $10 the ttl in milliseconds (NULL: none).
// TestHistoryWritesWhatARunLeaves holds it to a run the scheduler made.
//
//go:embed history.sql
var historySQL string

// LoadHistory writes the runs of h in statements of at most 50,000 runs
// and returns how many it wrote. Errors: Postgres's.
func LoadHistory(ctx context.Context, db *sql.DB, h History) (int, error) {
	spec := `{"mode": "StepByStep", "steps": [{"kind": "task", "name": "s", "plugin": "noop", "priority": "interactive"}]}`
	var ttl any
	if h.AfterCompletion > 0 {
		spec = fmt.Sprintf(`{"ttl": {"after_completion": %q}, "mode": "StepByStep", "steps": [{"kind": "task", "name": "s", "plugin": "noop", "priority": "interactive"}]}`,
			h.AfterCompletion.String())
		ttl = h.AfterCompletion.Milliseconds()
	}
	const chunk = 50000
	for first := h.First; first < h.First+h.N; first += chunk {
		last := min(first+chunk, h.First+h.N) - 1
		start := h.Start.Add(time.Duration(first-h.First) * h.Every)
		if _, err := db.ExecContext(ctx, historySQL, h.Project, h.Domain, h.Prefix, first, last, start,
			h.Every.Seconds(), h.Took.Seconds(), spec, ttl); err != nil {
			return first - h.First, fmt.Errorf("storetest: load history %s%d..%d: %w", h.Prefix, first, last, err)
		}
	}
	return h.N, nil
}
