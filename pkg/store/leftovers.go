package store

import (
	"context"

	"github.com/capstan-run/capstan/pkg/domain"
)

// What an executor's directory sweep asks: which of the runs and attempts
// its data directory holds directories of still have an owner.

// existingRunsSQL reads those of the runs named by the arrays ?, ?, ?
// (projects, domains, names; a key may repeat) that exist, by primary key,
// in key order, each once.
const existingRunsSQL = `SELECT project, domain, name FROM runs WHERE (project, domain, name) IN
	(SELECT * FROM unnest(CAST(CAST(? AS text) AS text[]), CAST(CAST(? AS text) AS text[]),
		CAST(CAST(? AS text) AS text[])))
ORDER BY project, domain, name`

// ExistingRuns returns those of keys that are runs, in key order, each
// once: a run directory of another key belongs to no run (it was
// deleted). Errors: Postgres's.
func (s Runs) ExistingRuns(ctx context.Context, keys []domain.RunKey) ([]domain.RunKey, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	projects, domains, names := runKeyArrays(keys)
	var rows []struct{ Project, Domain, Name string }
	if err := s.raw(ctx, existingRunsSQL, projects, domains, names).Scan(&rows).Error; err != nil {
		return nil, mapErr(err)
	}
	out := make([]domain.RunKey, len(rows))
	for i, r := range rows {
		out[i] = domain.RunKey{Project: r.Project, Domain: r.Domain, Run: r.Name}
	}
	return out, nil
}

// liveAttemptsSQL reads those of the attempts of the ids ? that are live
// (ASSIGNED, BUILDING, RUNNING), by primary key, in id order, each once.
var liveAttemptsSQL = `SELECT id FROM attempts WHERE id = ANY(CAST(? AS bigint[]))
	AND state IN ` + sqlStates(domain.TaskAssigned, domain.TaskBuilding, domain.TaskRunning) + `
ORDER BY id`

// LiveAttempts returns those of ids whose attempt is live (ASSIGNED,
// BUILDING, RUNNING: an executor may run its process, in its work
// directory), in id order, each once. Another id is of an attempt that
// ended, whose executor has sent its final report, or that is gone.
// Errors: Postgres's.
func (s Attempts) LiveAttempts(ctx context.Context, ids []int64) ([]int64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var live []int64
	if err := s.raw(ctx, liveAttemptsSQL, array(ids)).Scan(&live).Error; err != nil {
		return nil, mapErr(err)
	}
	return live, nil
}
