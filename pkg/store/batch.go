package store

import (
	"context"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
)

// RunResult is CreateRuns' outcome for one NewRun: the run (Created false
// when it answers an earlier create with the same IdempotencyKey), or Err.
type RunResult struct {
	Detail  RunDetail
	Created bool
	// Err is ErrConflict (wrapped) when the name is taken, by a run already
	// stored or by an earlier item of the same call; nil otherwise.
	Err error
}

// batchPlan is what CreateRuns does with each item before it writes:
// insert it, answer as an earlier item, or refuse it.
type batchPlan struct {
	insert []int       // indexes of the items to insert, in order
	sameAs map[int]int // item → the earlier item whose IdempotencyKey it repeats
}

// planBatch sorts runs' items as CreateRun called on each in turn would
// meet them: an item repeating an earlier item's IdempotencyKey answers as
// that item; one repeating an earlier item's name (without such a key) is
// a conflict, written into out.
func planBatch(runs []NewRun, out []RunResult) batchPlan {
	p := batchPlan{sameAs: map[int]int{}}
	keys := map[string]int{}
	names := map[domain.RunKey]bool{}
	for i, nr := range runs {
		if nr.IdempotencyKey != "" {
			scoped := nr.Key.Project + "/" + nr.Key.Domain + "/" + nr.IdempotencyKey
			if first, ok := keys[scoped]; ok {
				p.sameAs[i] = first
				continue
			}
			keys[scoped] = i
		}
		if names[nr.Key] {
			out[i].Err = fmt.Errorf("%w: runs_pkey", ErrConflict)
			continue
		}
		names[nr.Key] = true
		p.insert = append(p.insert, i)
	}
	return p
}

// CreateRuns creates runs as CreateRun creates one — the run, its root
// action a0 (QUEUED) and its run.created event — all in one transaction of
// a few multi-row statements, however many runs. Every NewRun's Spec must be
// normalized and valid. It returns one RunResult per item, in order: an
// item whose IdempotencyKey matches a stored run (or an earlier item's)
// answers with that run as GetRun reads it after the commit; an item whose
// name is taken gets ErrConflict and writes nothing. The error is the
// transaction's (a database failure): then nothing is written.
func (s Runs) CreateRuns(ctx context.Context, runs []NewRun) ([]RunResult, error) {
	out := make([]RunResult, len(runs))
	plan := planBatch(runs, out)
	earlier := map[int]domain.RunKey{}
	err := s.inTx(ctx, func(tx *Store) error {
		inserted, err := tx.insertRuns(ctx, runs, plan.insert, out)
		if err != nil {
			return err
		}
		if err := tx.resolveSkipped(ctx, runs, plan.insert, inserted, earlier, out); err != nil {
			return err
		}
		return tx.insertRoots(ctx, runs, inserted, out)
	})
	if err != nil {
		return nil, err
	}
	for i, key := range earlier {
		if out[i].Detail, out[i].Err = s.GetRun(ctx, key); out[i].Err != nil {
			return nil, fmt.Errorf("run %s: %w", key, out[i].Err)
		}
	}
	for i, first := range plan.sameAs {
		out[i] = out[first]
		out[i].Created = false
	}
	return out, nil
}

// insertRunsSQL inserts the runs rows of @rows (a JSON array of Run), in
// key order (the lock order: two batches naming the same runs wait for each
// other, never in a cycle); a row whose name or idempotency key is taken,
// by a committed row or by a concurrent create once it commits, is skipped,
// not an error.
var insertRunsSQL = `INSERT INTO runs (` + columnsOf[Run]() + `) SELECT ` + columnsOf[Run]() + `
  FROM jsonb_populate_recordset(NULL::runs, CAST(@rows AS jsonb))
 ORDER BY project, domain, name
ON CONFLICT DO NOTHING
RETURNING project, domain, name`

// insertRuns inserts the runs at indexes idx, fills out[i].Detail.Run of
// each one inserted and returns their indexes.
func (s *core) insertRuns(ctx context.Context, runs []NewRun, idx []int, out []RunResult) ([]int, error) {
	now := time.Now().UTC()
	rows := make([]Run, len(idx))
	at := make(map[domain.RunKey]int, len(idx))
	for j, i := range idx {
		rows[j] = runs[i].row(now)
		at[runs[i].Key] = i
	}
	raw, err := encodeRows(rows)
	if err != nil {
		return nil, fmt.Errorf("runs: %w", err)
	}
	var keys []struct{ Project, Domain, Name string }
	if err := s.raw(ctx, insertRunsSQL, map[string]any{"rows": string(raw)}).Scan(&keys).Error; err != nil {
		return nil, mapErr(err)
	}
	inserted := make([]int, 0, len(keys))
	for _, k := range keys {
		i := at[domain.RunKey{Project: k.Project, Domain: k.Domain, Run: k.Name}]
		out[i] = RunResult{Detail: RunDetail{Run: runs[i].row(now)}, Created: true}
		inserted = append(inserted, i)
	}
	return inserted, nil
}

// resolveSkipped answers each item of idx the insert skipped: with the run
// holding its idempotency key (into earlier, read after the commit), or
// else ErrConflict (its name is taken).
func (s *core) resolveSkipped(ctx context.Context, runs []NewRun, idx, inserted []int, earlier map[int]domain.RunKey,
	out []RunResult) error {
	done := make(map[int]bool, len(inserted))
	for _, i := range inserted {
		done[i] = true
	}
	var skipped []int
	var p, d, k []string
	for _, i := range idx {
		if done[i] {
			continue
		}
		skipped = append(skipped, i)
		out[i].Err = fmt.Errorf("%w: runs_pkey", ErrConflict)
		if runs[i].IdempotencyKey != "" {
			p, d, k = append(p, runs[i].Key.Project), append(d, runs[i].Key.Domain), append(k, runs[i].IdempotencyKey)
		}
	}
	if len(k) == 0 {
		return nil
	}
	var rows []struct{ Project, Domain, IdempotencyKey, Name string }
	err := s.raw(ctx, `SELECT r.project, r.domain, r.idempotency_key, r.name FROM runs r
		JOIN unnest(CAST(? AS text[]), CAST(? AS text[]), CAST(? AS text[])) AS v(p, d, k)
		  ON r.project = v.p AND r.domain = v.d AND r.idempotency_key = v.k`,
		Strings(p), Strings(d), Strings(k)).Scan(&rows).Error
	if err != nil {
		return mapErr(err)
	}
	holder := make(map[string]string, len(rows))
	for _, r := range rows {
		holder[r.Project+"/"+r.Domain+"/"+r.IdempotencyKey] = r.Name
	}
	for _, i := range skipped {
		key := runs[i].Key
		if name, ok := holder[key.Project+"/"+key.Domain+"/"+runs[i].IdempotencyKey]; ok && runs[i].IdempotencyKey != "" {
			key.Run = name
			earlier[i], out[i].Err = key, nil
		}
	}
	return nil
}

// insertRoots inserts the root action a0 (QUEUED) of each inserted run and
// writes its run.created event, as CreateRun does.
func (s *core) insertRoots(ctx context.Context, runs []NewRun, inserted []int, out []RunResult) error {
	if len(inserted) == 0 {
		return nil
	}
	now := time.Now().UTC()
	roots := make([]Action, len(inserted))
	for j, i := range inserted {
		roots[j] = rootOf(out[i].Detail.Run, now)
	}
	rows, err := encodeRows(roots)
	if err != nil {
		return fmt.Errorf("root actions: %w", err)
	}
	if err := s.exec(ctx, insertActionsSQL, string(rows)).Error; err != nil {
		return mapErr(err)
	}
	for j, i := range inserted {
		out[i].Detail.Actions = []ActionDetail{{Action: roots[j]}}
		if err := s.event(ctx, runs[i].Key, domain.RootActionName, "run.created",
			map[string]any{"phase": string(domain.PhaseQueued)}); err != nil {
			return err
		}
	}
	return nil
}
