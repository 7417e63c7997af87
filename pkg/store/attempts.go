package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"gorm.io/gorm/clause"
)

// AttemptRun is what an executor needs to run one attempt.
type AttemptRun struct {
	Attempt Attempt
	Task    Task
	Action  Action
	// Proceed is false when the attempt must not (or no longer) run.
	Proceed bool
}

// GetAttemptRun loads an attempt with its task and action, in one round trip
// (the rows as JSON, as in detailsSQL). Errors: ErrNotFound.
func (s Attempts) GetAttemptRun(ctx context.Context, id int64) (AttemptRun, error) {
	var r AttemptRun
	err := scanRows(s.raw(ctx, `SELECT row_to_json(at), row_to_json(t), row_to_json(a)
		FROM attempts at JOIN tasks t ON t.id = at.task_id
		JOIN actions a ON (a.project, a.domain, a.run_name, a.name) = (t.project, t.domain, t.run_name, t.action_name)
		WHERE at.id = ?`, id), &r.Attempt, &r.Task, &r.Action)
	r.Proceed = err == nil && domain.IsCurrentAttempt(r.Attempt.State, r.Task.State, r.Attempt.Number, r.Task.AttemptCount)
	return r, err
}

// GetAttemptRuns loads the attempts ids with their tasks and actions, in
// one statement, by id (a repeated id once); an id of no attempt has no
// row. Several ids are read on the by-key pool, in an array; one id is
// GetAttemptRun's statement, whose generic plan the main pool keeps (the
// array's form would be planned there at each call).
func (s Attempts) GetAttemptRuns(ctx context.Context, ids []int64) ([]AttemptRun, error) {
	switch len(ids) {
	case 0:
		return nil, nil
	case 1:
		r, err := s.GetAttemptRun(ctx, ids[0])
		if errors.Is(err, ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return []AttemptRun{r}, nil
	}
	var raw [3][]byte
	err := scanRow(s.prefer(poolByKey).raw(ctx, `SELECT coalesce(json_agg(row_to_json(at) ORDER BY at.id), '[]'),
			coalesce(json_agg(row_to_json(t) ORDER BY at.id), '[]'), coalesce(json_agg(row_to_json(a) ORDER BY at.id), '[]')
		FROM attempts at JOIN tasks t ON t.id = at.task_id
		JOIN actions a ON (a.project, a.domain, a.run_name, a.name) = (t.project, t.domain, t.run_name, t.action_name)
		WHERE at.id = ANY(CAST(? AS bigint[]))`, array(ids)), &raw[0], &raw[1], &raw[2])

	if err != nil {
		return nil, mapErr(err)
	}
	var attempts []Attempt
	var tasks []Task
	var acts []Action
	if err := decodeEach(raw[:], &attempts, &tasks, &acts); err != nil {
		return nil, fmt.Errorf("decode rows: %w", err)
	}
	if len(tasks) != len(attempts) || len(acts) != len(attempts) {
		return nil, fmt.Errorf("decode rows: %d attempts, %d tasks, %d actions", len(attempts), len(tasks), len(acts))
	}
	out := make([]AttemptRun, len(attempts))
	for i := range attempts {
		out[i] = AttemptRun{Attempt: attempts[i], Task: tasks[i], Action: acts[i]}
		out[i].Proceed = domain.IsCurrentAttempt(out[i].Attempt.State, out[i].Task.State, out[i].Attempt.Number,
			out[i].Task.AttemptCount)
	}
	return out, nil
}

// AttemptOwners is an attempt with the task, action and run it belongs to.
type AttemptOwners struct {
	Run     Run
	Action  Action
	Task    Task
	Attempt Attempt
}

// PreemptAssignedAttempt ends an attempt that is still ASSIGNED as PREEMPTED
// (cause preempted), evaluated at now, writes an "attempt.PREEMPTED" event
// and returns it; ok is false when the attempt is no longer ASSIGNED.
func (s Attempts) PreemptAssignedAttempt(ctx context.Context, t Task, id int64, now time.Time) (a Attempt, ok bool, err error) {
	var claimed []Attempt
	res := s.q(ctx).Model(&claimed).Clauses(clause.Returning{}).Where("id = ? AND state IN "+sqlAssigned, id).
		Updates(map[string]any{"state": domain.TaskPreempted, "cause": CausePreempted, "finished_at": now,
			"evaluated_at": now, "updated_at": now})
	if res.Error != nil || len(claimed) == 0 {
		return Attempt{}, false, mapErr(res.Error)
	}
	return claimed[0], true, s.taskEvent(ctx, t, id, "attempt."+domain.TaskPreempted.String(),
		map[string]any{"cause": CausePreempted})
}

// UnevaluatedAttempts returns finished attempts whose outcome was not applied.
func (s Attempts) UnevaluatedAttempts(ctx context.Context, limit int) ([]int64, error) {
	var ids []int64
	err := s.q(ctx).Model(&Attempt{}).Where("finished_at IS NOT NULL AND evaluated_at IS NULL").Order("id").
		Limit(limit).Pluck("id", &ids).Error
	return ids, mapErr(err)
}

// AssignedAttempts returns ASSIGNED attempts created before cutoff (their
// dispatch may have been lost with Redis), with their workers.
func (s Attempts) AssignedAttempts(ctx context.Context, cutoff time.Time, limit int) ([]Attempt, error) {
	var as []Attempt
	err := s.q(ctx).Where("state IN "+sqlAssigned+" AND created_at < ?", cutoff).Order("id").
		Limit(limit).Find(&as).Error
	return as, mapErr(err)
}

// GetAttempt returns one attempt's row. Errors: ErrNotFound.
func (s Attempts) GetAttempt(ctx context.Context, id int64) (Attempt, error) {
	var a Attempt
	return a, mapErr(s.q(ctx).Take(&a, id).Error)
}
