package store

import (
	"context"

	"github.com/capstan-run/capstan/pkg/domain"
)

// Adoption: an executor restarted under a new identity takes back the live
// attempts its previous identity left running outside its process (Pods,
// which outlive the executor), so that each attempt runs, and counts,
// once.

// adoptableSQL reads those of the attempts @ids that are live, with no kill
// pending, and held by another alive worker of worker @to's name, with
// their tasks, in task id order. It locks nothing.
var adoptableSQL = `SELECT a.id, a.task_id FROM attempts a
	JOIN workers old ON old.id = a.worker_id
	JOIN workers w ON w.id = CAST(@to AS uuid)
WHERE a.id = ANY(CAST(@ids AS bigint[])) AND a.state IN ` +
	sqlStates(domain.TaskAssigned, domain.TaskBuilding, domain.TaskRunning) + `
	AND a.kill_requested_at IS NULL AND old.state = 'alive' AND old.id <> w.id AND old.name = w.name
ORDER BY a.task_id`

// AdoptAttempts moves to worker to those of the attempts ids that are live
// and held by another worker of the same name (the executor's previous
// identity) that is still alive, with their tasks, keeping their states:
// they become to's, reports, heartbeats and aborts included, and the
// previous identity's death fails none of them. Once that identity is
// declared dead its attempts are being failed (worker_lost): they are not
// adopted. It locks the tasks, then the attempts (the lock
// order), checks them again under the locks, bumps the tasks' versions and
// writes an "attempt.adopted" event for each. It returns the ids moved, in
// id order. Errors: Postgres's.
func (s Attempts) AdoptAttempts(ctx context.Context, to string, ids []int64) ([]int64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var moved []int64
	err := s.inTx(ctx, func(tx *Store) error {
		var rows []struct{ ID, TaskID int64 }
		if err := tx.raw(ctx, adoptableSQL, map[string]any{"to": to, "ids": array(ids)}).Scan(&rows).Error; err != nil {
			return mapErr(err)
		}
		if len(rows) == 0 {
			return nil
		}
		tasks, attempts := make([]int64, len(rows)), make([]int64, len(rows))
		for i, r := range rows {
			tasks[i], attempts[i] = r.TaskID, r.ID
		}
		if err := tx.exec(ctx, `SELECT id FROM tasks WHERE id = ANY(CAST(? AS bigint[])) ORDER BY id FOR UPDATE`,
			array(tasks)).Error; err != nil {
			return mapErr(err)
		}
		if err := tx.exec(ctx, `SELECT id FROM attempts WHERE id = ANY(CAST(? AS bigint[])) ORDER BY id FOR UPDATE`,
			array(attempts)).Error; err != nil {
			return mapErr(err)
		}
		// Under the locks, a statement of its own reads the attempts afresh.
		if err := tx.raw(ctx, `WITH c AS (`+adoptableSQL+`),
			a AS (UPDATE attempts at SET worker_id = CAST(@to AS uuid), updated_at = now() FROM c
				WHERE at.id = c.id RETURNING at.id, at.task_id),
			t AS (UPDATE tasks t SET worker_id = CAST(@to AS uuid), updated_at = now(), version = t.version + 1
				FROM a WHERE t.id = a.task_id)
			SELECT id FROM a ORDER BY id`, map[string]any{"to": to, "ids": array(attempts)}).Scan(&moved).Error; err != nil {
			return mapErr(err)
		}
		for _, id := range moved {
			var a Attempt
			if err := tx.q(ctx).Take(&a, id).Error; err != nil {
				return mapErr(err)
			}
			if err := tx.attemptEvent(ctx, a, "attempt.adopted", map[string]any{"worker_id": to}); err != nil {
				return err
			}
		}
		return nil
	})
	return moved, err
}
