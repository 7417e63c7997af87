package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/capstan-run/capstan/pkg/domain"
)

// Deletion of ended runs (Argo's workflow deletion, Temporal's retention):
// a run goes with its descendant runs and every row they own, in one
// transaction.

// ErrNotTerminal: a delete of a run that has not ended, or whose
// descendant or parent run has not. A NotTerminalError says which.
var ErrNotTerminal = errors.New("run not ended")

// NotTerminalError names the run a delete found not ended, and its phase.
type NotTerminalError struct {
	Run   string
	Phase domain.Phase
}

func (e *NotTerminalError) Error() string { return fmt.Sprintf("run %s is %s", e.Run, e.Phase) }

// Is makes a NotTerminalError match ErrNotTerminal.
func (e *NotTerminalError) Is(target error) bool { return target == ErrNotTerminal }

// treeSQL locks, by name, the run @run and every run below it (its
// children, theirs…, at most @limit levels), and returns each with its
// phase: the lock order of a parent before its children holds, since no
// other transaction locks a run of an ended tree after its parent.
const treeSQL = `WITH RECURSIVE down(name, n) AS (
	SELECT CAST(@run AS text), 0
	UNION ALL
	SELECT r.name, down.n + 1 FROM runs r JOIN down ON r.parent_run = down.name
	 WHERE r.project = @p AND r.domain = @d AND down.n < @limit)
SELECT name, phase, parent_run FROM runs WHERE project = @p AND domain = @d AND name IN (SELECT name FROM down)
ORDER BY name FOR UPDATE`

// settlingSQL names a run of @names with an abort still being delivered,
// or with an attempt still live (ASSIGNED, BUILDING, RUNNING: a process an
// executor may still run), if there is one.
var settlingSQL = `SELECT run_name FROM actions WHERE project = @p AND domain = @d AND run_name = ANY(@names)
	AND abort_requested_at IS NOT NULL
UNION ALL
SELECT t.run_name FROM tasks t JOIN attempts a ON a.task_id = t.id
WHERE t.project = @p AND t.domain = @d AND t.run_name = ANY(@names)
	AND a.state IN ` + sqlStates(domain.TaskAssigned, domain.TaskBuilding, domain.TaskRunning) + `
LIMIT 1`

// deleteTreeSQL deletes the runs named @names and every row they own:
// their actions, tasks, attempts with their logs and log chunks, events
// and cache reservations. Cache entries stay: a catalog entry outlives the
// run that wrote it (Flyte's).
const deleteTreeSQL = `WITH t AS (SELECT id FROM tasks WHERE project = @p AND domain = @d AND run_name = ANY(@names)),
da AS (DELETE FROM attempts WHERE task_id IN (SELECT id FROM t) RETURNING id),
dl AS (DELETE FROM attempt_logs WHERE attempt_id IN (SELECT id FROM da)),
dk AS (DELETE FROM attempt_log_chunks WHERE attempt_id IN (SELECT id FROM da)),
dt AS (DELETE FROM tasks WHERE id IN (SELECT id FROM t)),
dx AS (DELETE FROM actions WHERE project = @p AND domain = @d AND run_name = ANY(@names)),
de AS (DELETE FROM run_events WHERE project = @p AND domain = @d AND run_name = ANY(@names)),
dc AS (DELETE FROM cache_reservations WHERE project = @p AND domain = @d AND run_name = ANY(@names)),
dr AS (DELETE FROM runs WHERE project = @p AND domain = @d AND name = ANY(@names) RETURNING name)
SELECT name FROM dr ORDER BY name`

// DeleteRun deletes an ended run, with its descendant runs (child runs of
// its workflow steps, theirs…), and every row they own, in one
// transaction that locks them all; it returns the names of the runs
// deleted, the run's first. A run created under a parent run is deleted
// only once that parent has ended (its step reads its children), and no
// run is deleted while an abort of it is being delivered or an attempt of
// it is live: its processes would outlive their rows. Errors:
// ErrNotFound, a NotTerminalError (ErrNotTerminal) naming the run of the
// tree, or its parent, that has not ended, ErrAbortPending.
func (s Runs) DeleteRun(ctx context.Context, key domain.RunKey) ([]string, error) {
	var deleted []string
	err := s.inTx(ctx, func(tx *Store) error {
		var tree []struct {
			Name      string
			Phase     string
			ParentRun *string
		}
		if err := tx.raw(ctx, treeSQL, map[string]any{"p": key.Project, "d": key.Domain, "run": key.Run,
			"limit": domain.MaxDepth}).Scan(&tree).Error; err != nil {
			return mapErr(err)
		}
		names := make([]string, 0, len(tree))
		found := false
		for _, r := range tree {
			if !domain.Phase(r.Phase).IsTerminal() {
				return &NotTerminalError{Run: r.Name, Phase: domain.Phase(r.Phase)}
			}
			if r.Name == key.Run {
				found = true
				if r.ParentRun != nil {
					phase, err := tx.runs().RunPhase(ctx, domain.RunKey{Project: key.Project, Domain: key.Domain, Run: *r.ParentRun})
					if err != nil && !errors.Is(err, ErrNotFound) {
						return fmt.Errorf("read parent run %s: %w", *r.ParentRun, err)
					}
					if err == nil && !phase.IsTerminal() {
						return &NotTerminalError{Run: *r.ParentRun, Phase: phase}
					}
				}
			}
			names = append(names, r.Name)
		}
		if !found {
			return ErrNotFound
		}
		var settling []string
		if err := tx.raw(ctx, settlingSQL, map[string]any{"p": key.Project, "d": key.Domain,
			"names": Strings(names)}).Scan(&settling).Error; err != nil {
			return mapErr(err)
		}
		if len(settling) > 0 {
			return fmt.Errorf("run %s: %w", settling[0], ErrAbortPending)
		}
		var gone []string
		if err := tx.raw(ctx, deleteTreeSQL, map[string]any{"p": key.Project, "d": key.Domain,
			"names": Strings(names)}).Scan(&gone).Error; err != nil {
			return mapErr(err)
		}
		deleted = []string{key.Run}
		for _, n := range gone {
			if n != key.Run {
				deleted = append(deleted, n)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return deleted, nil
}
