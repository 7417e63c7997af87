package store

import (
	"context"
	"errors"
	"fmt"
	"slices"

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

// runKeysCTE names the runs of the arrays @ps, @ds, @ns (project, domain,
// name; Strings) as k(p, d, n).
const runKeysCTE = `k AS (SELECT * FROM unnest(CAST(CAST(@ps AS text) AS text[]), CAST(CAST(@ds AS text) AS text[]),
	  CAST(CAST(@ns AS text) AS text[])) AS k(p, d, n))`

// keysArgs are the named arguments of runKeysCTE for keys.
func keysArgs(keys []domain.RunKey) map[string]any {
	p, d, n := make(Strings, len(keys)), make(Strings, len(keys)), make(Strings, len(keys))
	for i, k := range keys {
		p[i], d[i], n[i] = k.Project, k.Domain, k.Run
	}
	return map[string]any{"ps": p, "ds": d, "ns": n}
}

// downCTE names, as down(project, domain, name, root, n), the runs k
// (runKeysCTE) and every run below each by parent_run (its children,
// theirs…, at most @limit levels): root is the run of k it is under, n its
// level (0 for that run).
var downCTE = `WITH RECURSIVE ` + runKeysCTE + `,
down(project, domain, name, root, n) AS (
	SELECT p, d, n, n, 0 FROM k
	UNION ALL
	SELECT r.project, r.domain, r.name, down.root, down.n + 1 FROM runs r
	  JOIN down ON r.project = down.project AND r.domain = down.domain AND r.parent_run = down.name
	 WHERE down.n < @limit)`

// treesSQL locks, by key, the runs of downCTE, and returns each with its
// phase, its parent and its root: the lock order of a parent before its
// children holds, since no other transaction locks a run of an ended tree
// after its parent.
var treesSQL = downCTE + `
SELECT r.project, r.domain, r.name, r.phase, r.parent_run, down.root FROM runs r
  JOIN down ON r.project = down.project AND r.domain = down.domain AND r.name = down.name
ORDER BY r.project, r.domain, r.name FOR UPDATE OF r`

// runTreeSQL reads, without a lock, the names of the runs of downCTE that
// exist, level by level, each level by name.
var runTreeSQL = downCTE + `
SELECT r.name FROM runs r JOIN down ON r.project = down.project AND r.domain = down.domain AND r.name = down.name
ORDER BY down.n, r.name`

// RunTree returns the key of the run and of each of its descendant runs
// (child runs of its workflow steps, theirs…, domain.MaxDepth levels at
// most): the runs DeleteRun deletes with it, the run's key first, then
// level by level, each level by name. It reads without a lock: a caller
// that archives the runs before deleting them reads the tree again in
// DeleteRun's transaction, which refuses a tree that is not ended.
// Errors: ErrNotFound.
func (s Runs) RunTree(ctx context.Context, key domain.RunKey) ([]domain.RunKey, error) {
	args := keysArgs([]domain.RunKey{key})
	args["limit"] = domain.MaxDepth
	var names []string
	if err := s.raw(ctx, runTreeSQL, args).Scan(&names).Error; err != nil {
		return nil, mapErr(err)
	}
	if len(names) == 0 || names[0] != key.Run {
		return nil, ErrNotFound
	}
	keys := make([]domain.RunKey, len(names))
	for i, n := range names {
		keys[i] = domain.RunKey{Project: key.Project, Domain: key.Domain, Run: n}
	}
	return keys, nil
}

// settlingSQL names the runs of k (runKeysCTE) with an abort still being
// delivered, or with an attempt still live (ASSIGNED, BUILDING, RUNNING: a
// process an executor may still run).
var settlingSQL = `WITH ` + runKeysCTE + `
SELECT x.project, x.domain, x.run_name AS name FROM actions x JOIN k ON x.project = k.p AND x.domain = k.d AND x.run_name = k.n
WHERE x.abort_requested_at IS NOT NULL
UNION
SELECT t.project, t.domain, t.run_name AS name FROM tasks t JOIN k ON t.project = k.p AND t.domain = k.d AND t.run_name = k.n
  JOIN attempts a ON a.task_id = t.id
WHERE a.state IN ` + sqlStates(domain.TaskAssigned, domain.TaskBuilding, domain.TaskRunning)

// deleteTreesSQL deletes the runs k (runKeysCTE) and every row they own:
// their actions, tasks, attempts with their logs and log chunks, events
// and cache reservations, and returns how many runs went and the ids of
// the alive workers (the only ones consuming their queues) that ran an
// attempt deleted, in id order, each once. Cache entries stay: a catalog
// entry outlives the run that wrote it (Flyte's).
var deleteTreesSQL = `WITH ` + runKeysCTE + `,
t AS (SELECT x.id FROM tasks x JOIN k ON x.project = k.p AND x.domain = k.d AND x.run_name = k.n),
da AS (DELETE FROM attempts WHERE task_id IN (SELECT id FROM t) RETURNING id, worker_id),
dl AS (DELETE FROM attempt_logs WHERE attempt_id IN (SELECT id FROM da)),
dk AS (DELETE FROM attempt_log_chunks WHERE attempt_id IN (SELECT id FROM da)),
dt AS (DELETE FROM tasks WHERE id IN (SELECT id FROM t)),
dx AS (DELETE FROM actions x USING k WHERE x.project = k.p AND x.domain = k.d AND x.run_name = k.n),
de AS (DELETE FROM run_events x USING k WHERE x.project = k.p AND x.domain = k.d AND x.run_name = k.n),
dc AS (DELETE FROM cache_reservations x USING k WHERE x.project = k.p AND x.domain = k.d AND x.run_name = k.n),
dr AS (DELETE FROM runs x USING k WHERE x.project = k.p AND x.domain = k.d AND x.name = k.n RETURNING 1)
SELECT (SELECT count(*) FROM dr) AS runs,
	ARRAY(SELECT DISTINCT w.id::text FROM da JOIN workers w ON w.id = da.worker_id
		WHERE w.state = '` + WorkerAlive + `' ORDER BY 1) AS workers`

// DeletedRuns is what DeleteRun deleted.
type DeletedRuns struct {
	// Runs are the names of the runs deleted, the run asked for first.
	Runs []string
	// Workers are the ids of the alive workers that ran an attempt of
	// them, in id order: the executors that may keep their run
	// directories.
	Workers []string
}

// treeRun is a run treesSQL locked, under the run Root of its call.
type treeRun struct {
	Project, Domain, Name, Phase string
	ParentRun                    *string
	Root                         string
}

func (r treeRun) key() domain.RunKey {
	return domain.RunKey{Project: r.Project, Domain: r.Domain, Run: r.Name}
}

func (r treeRun) rootKey() domain.RunKey {
	return domain.RunKey{Project: r.Project, Domain: r.Domain, Run: r.Root}
}

// deletionTrees locks the trees of roots (treesSQL) and decides, for each
// root, whether it may be deleted: it may not while a run of its tree has
// not ended (a NotTerminalError naming it), while its parent run has not
// ended (its step reads its children; the parent is read, not locked), or
// while an abort of a run of its tree is being delivered or an attempt of
// it is live, since its processes would outlive their rows
// (ErrAbortPending). It returns the runs of each deletable root's tree and
// the refusal of every other root found; a root not found is in neither.
func (s Runs) deletionTrees(ctx context.Context, roots []domain.RunKey) (map[domain.RunKey][]domain.RunKey,
	map[domain.RunKey]error, error) {
	args := keysArgs(roots)
	args["limit"] = domain.MaxDepth
	var tree []treeRun
	if err := s.raw(ctx, treesSQL, args).Scan(&tree).Error; err != nil {
		return nil, nil, mapErr(err)
	}
	runs, refused := map[domain.RunKey][]domain.RunKey{}, map[domain.RunKey]error{}
	for _, r := range tree {
		root := r.rootKey()
		runs[root] = append(runs[root], r.key())
		if !domain.Phase(r.Phase).IsTerminal() && refused[root] == nil {
			refused[root] = &NotTerminalError{Run: r.Name, Phase: domain.Phase(r.Phase)}
		}
		if r.Name != r.Root || r.ParentRun == nil || refused[root] != nil {
			continue
		}
		parent := domain.RunKey{Project: r.Project, Domain: r.Domain, Run: *r.ParentRun}
		phase, err := s.RunPhase(ctx, parent)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return nil, nil, fmt.Errorf("read parent run %s: %w", parent, err)
		}
		if err == nil && !phase.IsTerminal() {
			refused[root] = &NotTerminalError{Run: parent.Run, Phase: phase}
		}
	}
	var all []domain.RunKey
	for root, keys := range runs {
		if refused[root] == nil {
			all = append(all, keys...)
		}
	}
	if len(all) > 0 {
		var settling []treeRun
		if err := s.raw(ctx, settlingSQL, keysArgs(all)).Scan(&settling).Error; err != nil {
			return nil, nil, mapErr(err)
		}
		settles := map[domain.RunKey]bool{}
		for _, r := range settling {
			settles[domain.RunKey{Project: r.Project, Domain: r.Domain, Run: r.Name}] = true
		}
		for root, keys := range runs {
			for _, k := range keys {
				if refused[root] == nil && settles[k] {
					refused[root] = fmt.Errorf("run %s: %w", k.Run, ErrAbortPending)
				}
			}
		}
	}
	for root := range refused {
		delete(runs, root)
	}
	return runs, refused, nil
}

// deleteTrees deletes the runs of trees (deletionTrees) and every row they
// own, and returns how many runs went and the alive workers that ran their
// attempts (deleteTreesSQL).
func (s Runs) deleteTrees(ctx context.Context, trees map[domain.RunKey][]domain.RunKey) (int, []string, error) {
	var all []domain.RunKey
	for _, keys := range trees {
		all = append(all, keys...)
	}
	if len(all) == 0 {
		return 0, nil, nil
	}
	var gone struct {
		Runs    int
		Workers Strings
	}
	if err := s.raw(ctx, deleteTreesSQL, keysArgs(all)).Scan(&gone).Error; err != nil {
		return 0, nil, mapErr(err)
	}
	return gone.Runs, gone.Workers, nil
}

// DeleteRun deletes an ended run, with its descendant runs (child runs of
// its workflow steps, theirs…), and every row they own, in one
// transaction that locks them all; it returns the runs deleted (the
// run's first) and the alive workers that ran their attempts. A run created under a parent run is deleted
// only once that parent has ended (its step reads its children), and no
// run is deleted while an abort of it is being delivered or an attempt of
// it is live: its processes would outlive their rows. Errors:
// ErrNotFound, a NotTerminalError (ErrNotTerminal) naming the run of the
// tree, or its parent, that has not ended, ErrAbortPending.
func (s Runs) DeleteRun(ctx context.Context, key domain.RunKey) (DeletedRuns, error) {
	var deleted DeletedRuns
	err := s.inTx(ctx, func(tx *Store) error {
		trees, refused, err := tx.runs().deletionTrees(ctx, []domain.RunKey{key})
		if err != nil {
			return err
		}
		if err := refused[key]; err != nil {
			return err
		}
		tree, ok := trees[key]
		if !ok {
			return ErrNotFound
		}
		_, workers, err := tx.runs().deleteTrees(ctx, trees)
		if err != nil {
			return err
		}
		deleted = DeletedRuns{Runs: []string{key.Run}, Workers: workers}
		for _, k := range tree {
			if k.Run != key.Run {
				deleted.Runs = append(deleted.Runs, k.Run)
			}
		}
		slices.Sort(deleted.Runs[1:])
		return nil
	})
	if err != nil {
		return DeletedRuns{}, err
	}
	return deleted, nil
}
