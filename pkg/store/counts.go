package store

import (
	"context"
	"strconv"

	"github.com/capstan-run/capstan/pkg/domain"
)

// StateCounts are how many rows of each kind are in each state: actions by
// phase, tasks by state name (domain.TaskState's String), workers by state
// (alive, dead, …). A state with no row is absent.
type StateCounts struct {
	Actions map[string]int64
	Tasks   map[string]int64
	Workers map[string]int64
}

// CountStates counts actions by phase, tasks by state and workers by state
// in one statement (one grouped count of each table, one round trip): the
// Flyte executor's phase counter, which counts what it holds in one pass
// and never per series.
func (s Tasks) CountStates(ctx context.Context) (StateCounts, error) {
	var rows []struct {
		Kind  string
		State string
		N     int64
	}
	err := s.raw(ctx, `SELECT 'action' AS kind, phase AS state, count(*) AS n FROM actions GROUP BY phase
		UNION ALL SELECT 'task', state::text, count(*) FROM tasks GROUP BY state
		UNION ALL SELECT 'worker', state, count(*) FROM workers GROUP BY state`).Scan(&rows).Error
	if err != nil {
		return StateCounts{}, mapErr(err)
	}
	c := StateCounts{Actions: map[string]int64{}, Tasks: map[string]int64{}, Workers: map[string]int64{}}
	for _, r := range rows {
		switch r.Kind {
		case "action":
			c.Actions[r.State] = r.N
		case "task":
			n, err := strconv.Atoi(r.State)
			if err != nil {
				continue
			}
			c.Tasks[domain.TaskState(n).String()] = r.N
		case "worker":
			c.Workers[r.State] = r.N
		}
	}
	return c, nil
}
