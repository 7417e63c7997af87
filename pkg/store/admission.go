package store

import (
	"context"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
)

// ConcurrencyKey names one run-level concurrency key of a project and
// domain.
type ConcurrencyKey struct {
	Project, Domain, Key string
}

// keyLockSeed seeds the advisory lock keys of concurrency keys
// (LockConcurrencyKeys), apart from the placement and leader locks.
const keyLockSeed int64 = 0x636f6e63 // "conc"

// LockConcurrencyKeys takes, for the rest of the caller's transaction, the
// advisory lock of each key (a hash of project, domain and key: two keys
// may share one, which only serializes them), in hash order, waiting for
// them: the admission of a key's runs is one transaction at a time, and
// the reads after this statement see every admission committed before.
// The lock order puts these after the runs the caller locked and before
// any other row: no transaction that holds one waits for a run's lock.
// Errors: Postgres's.
func (s Runs) LockConcurrencyKeys(ctx context.Context, keys []ConcurrencyKey) error {
	if len(keys) == 0 {
		return nil
	}
	projects, domains, names := concurrencyKeyArrays(keys)
	var n int64
	return mapErr(scanRow(s.raw(ctx, `SELECT count(pg_advisory_xact_lock(h)) FROM (
		SELECT DISTINCT hashtextextended(k.project || '/' || k.domain || '/' || k.key, CAST(? AS bigint)) AS h
		FROM unnest(CAST(CAST(? AS text) AS text[]), CAST(CAST(? AS text) AS text[]), CAST(CAST(? AS text) AS text[]))
			AS k(project, domain, key) ORDER BY h) l`, keyLockSeed, projects, domains, names), &n))
}

func concurrencyKeyArrays(keys []ConcurrencyKey) (projects, domains, names Strings) {
	for _, k := range keys {
		projects, domains, names = append(projects, k.Project), append(domains, k.Domain), append(names, k.Key)
	}
	return projects, domains, names
}

// LineRun is a run of a concurrency key's line as Lines reads it: its name
// and key, and the counts domain.DecideAdmission decides from.
type LineRun struct {
	Project  string `json:"project"`
	Domain   string `json:"domain"`
	Run      string `json:"name"`
	Key      string `json:"key"`
	Ahead    int    `json:"ahead"`
	Newer    int    `json:"newer"`
	Stopping bool   `json:"stopping"`
}

// waitingWhere selects, of runs r of a key, those waiting for a slot: not
// admitted, and unfinished or waiting to restart (runs_concurrency_line's
// predicate holds for them).
const waitingWhere = `r.admitted_at IS NULL AND (r.ended_at IS NULL OR r.restart_requested_at IS NOT NULL)`

// holdersSQL selects the runs holding a slot of the keys of k (project,
// domain, key): admitted and unfinished (stopping when an abort of one of
// their actions is pending), or ended while an abort of one of their
// actions, or a kill of one of their live attempts, is pending — their
// processes may still run. The ended ones are found from the pending
// aborts and kills, which are few, not from the key's past runs.
var holdersSQL = `SELECT r.project, r.domain, r.concurrency_key AS key, r.name, r.created_at,
		EXISTS (SELECT 1 FROM actions a WHERE (a.project, a.domain, a.run_name) = (r.project, r.domain, r.name)
			AND a.abort_requested_at IS NOT NULL) AS stopping
	FROM k JOIN runs r ON (r.project, r.domain, r.concurrency_key) = (k.project, k.domain, k.key)
	WHERE r.admitted_at IS NOT NULL AND r.ended_at IS NULL
UNION
SELECT r.project, r.domain, r.concurrency_key, r.name, r.created_at, true
	FROM (SELECT DISTINCT project, domain, run_name FROM actions WHERE abort_requested_at IS NOT NULL
		UNION SELECT t.project, t.domain, t.run_name FROM attempts at JOIN tasks t ON t.id = at.task_id
		WHERE at.kill_requested_at IS NOT NULL AND at.state IN ` + sqlLive + `) p
	JOIN runs r ON (r.project, r.domain, r.name) = (p.project, p.domain, p.run_name)
	JOIN k ON (r.project, r.domain, r.concurrency_key) = (k.project, k.domain, k.key)
	WHERE r.admitted_at IS NOT NULL AND r.ended_at IS NOT NULL`

// newerSQL counts the unfinished runs of the key of x after x in line
// (created_at, then name).
const newerSQL = `(SELECT count(*) FROM runs n WHERE (n.project, n.domain, n.concurrency_key) = (x.project, x.domain, x.key)
		AND n.ended_at IS NULL AND (n.created_at, n.name) > (x.created_at, x.name))`

// Lines reads what admitting the candidates (runs waiting for a slot,
// named by key; their keys' locks held, LockConcurrencyKeys) needs: each
// candidate with its key, the key's waiting runs ahead of it and its
// unfinished runs after it; and each holder of the candidates' keys
// (holdersSQL) with the unfinished runs after it. A candidate that no
// longer waits (admitted or ended meanwhile) is not returned. Errors:
// Postgres's.
func (s Runs) Lines(ctx context.Context, candidates []domain.RunKey) (cands, holders []LineRun, err error) {
	projects, domains, names := runKeyArrays(candidates)
	var rawC, rawH []byte
	err = scanRow(s.raw(ctx, `WITH c AS MATERIALIZED (SELECT r.project, r.domain, r.name, r.concurrency_key AS key, r.created_at
			FROM runs r WHERE (r.project, r.domain, r.name) IN (SELECT * FROM unnest(CAST(CAST(? AS text) AS text[]),
				CAST(CAST(? AS text) AS text[]), CAST(CAST(? AS text) AS text[])))
			AND r.concurrency_key IS NOT NULL AND `+waitingWhere+`),
		k AS MATERIALIZED (SELECT DISTINCT project, domain, key FROM c),
		h AS MATERIALIZED (`+holdersSQL+`)
		SELECT (SELECT coalesce(json_agg(json_build_object('project', x.project, 'domain', x.domain, 'name', x.name,
				'key', x.key, 'newer', `+newerSQL+`,
				'ahead', (SELECT count(*) FROM runs r WHERE (r.project, r.domain, r.concurrency_key) = (x.project, x.domain, x.key)
					AND `+waitingWhere+` AND (r.created_at, r.name) < (x.created_at, x.name)))
				ORDER BY x.created_at, x.name), '[]') FROM c x),
			(SELECT coalesce(json_agg(json_build_object('project', x.project, 'domain', x.domain, 'name', x.name,
				'key', x.key, 'stopping', x.stopping, 'newer', `+newerSQL+`) ORDER BY x.created_at, x.name), '[]') FROM h x)`,
		projects, domains, names), &rawC, &rawH)
	if err != nil {
		return nil, nil, mapErr(err)
	}
	if err := decodeRows(rawC, &cands); err != nil {
		return nil, nil, fmt.Errorf("decode candidates: %w", err)
	}
	if err := decodeRows(rawH, &holders); err != nil {
		return nil, nil, fmt.Errorf("decode holders: %w", err)
	}
	return cands, holders, nil
}

// SetAdmission records an admission decision of runs the caller locked:
// admitted take their slot (admitted_at, the statement's clock time: later
// than the end of every run whose slot it takes; pending_reason cleared),
// and each run of waiting (run → reason) gets its pending_reason. Errors:
// Postgres's.
func (s Runs) SetAdmission(ctx context.Context, admitted []domain.RunKey, waiting map[domain.RunKey]string) error {
	if len(admitted) > 0 {
		projects, domains, names := runKeyArrays(admitted)
		if err := s.exec(ctx, `UPDATE runs SET admitted_at = clock_timestamp(), pending_reason = NULL
			WHERE (project, domain, name) IN (SELECT * FROM unnest(CAST(CAST(? AS text) AS text[]),
				CAST(CAST(? AS text) AS text[]), CAST(CAST(? AS text) AS text[])))`, projects, domains, names).Error; err != nil {
			return mapErr(err)
		}
	}
	if len(waiting) == 0 {
		return nil
	}
	var keys []domain.RunKey
	var reasons Strings
	for k, r := range waiting {
		keys, reasons = append(keys, k), append(reasons, r)
	}
	projects, domains, names := runKeyArrays(keys)
	return mapErr(s.exec(ctx, `UPDATE runs r SET pending_reason = w.reason
		FROM unnest(CAST(CAST(? AS text) AS text[]), CAST(CAST(? AS text) AS text[]), CAST(CAST(? AS text) AS text[]),
			CAST(CAST(? AS text) AS text[])) AS w(project, domain, name, reason)
		WHERE (r.project, r.domain, r.name) = (w.project, w.domain, w.name) AND r.pending_reason IS DISTINCT FROM w.reason`,
		projects, domains, names, reasons).Error)
}

// LineHeads returns up to limit runs waiting first in the line of a key
// with fewer unfinished admitted runs than its max_runs (the head's spec),
// and at most n of each key, n being its free slots: the runs a sweep asks
// to start (the admission decides). Keys take turns (Hatchet's
// GROUP_ROUND_ROBIN): the first waiter of every key comes before the
// second of any, then by age. A key whose slots a stopping run
// holds is returned too; its head is then left waiting. Errors:
// Postgres's.
func (s Runs) LineHeads(ctx context.Context, limit int) ([]domain.RunKey, error) {
	var keys []domain.RunKey
	err := s.raw(ctx, `WITH k AS (SELECT DISTINCT r.project, r.domain, r.concurrency_key AS key FROM runs r
			WHERE r.concurrency_key IS NOT NULL AND `+waitingWhere+`),
		f AS (SELECT k.*, GREATEST(coalesce(CAST(hd.spec->'concurrency'->>'max_runs' AS int), 1) - (SELECT count(*) FROM runs h
				WHERE (h.project, h.domain, h.concurrency_key) = (k.project, k.domain, k.key)
				AND h.admitted_at IS NOT NULL AND h.ended_at IS NULL), 0) AS free
			FROM k CROSS JOIN LATERAL (SELECT r.spec FROM runs r WHERE (r.project, r.domain, r.concurrency_key) = (k.project, k.domain, k.key)
				AND `+waitingWhere+` ORDER BY r.created_at, r.name LIMIT 1) hd)
		SELECT w.project, w.domain, w.name AS run FROM f CROSS JOIN LATERAL (SELECT r.project, r.domain, r.name, r.created_at,
				row_number() OVER (ORDER BY r.created_at, r.name) AS place FROM runs r
			WHERE (r.project, r.domain, r.concurrency_key) = (f.project, f.domain, f.key) AND `+waitingWhere+`
			ORDER BY r.created_at, r.name LIMIT f.free) w
		WHERE f.free > 0 ORDER BY w.place, w.created_at LIMIT ?`, limit).Scan(&keys).Error
	return keys, mapErr(err)
}

// KeyWaiters returns up to n runs waiting first in the line of key, in line
// order. Errors: Postgres's.
func (s Runs) KeyWaiters(ctx context.Context, key ConcurrencyKey, n int) ([]domain.RunKey, error) {
	var keys []domain.RunKey
	err := s.raw(ctx, `SELECT r.project, r.domain, r.name AS run FROM runs r
		WHERE (r.project, r.domain, r.concurrency_key) = (?, ?, ?) AND `+waitingWhere+`
		ORDER BY r.created_at, r.name LIMIT ?`, key.Project, key.Domain, key.Key, n).Scan(&keys).Error
	return keys, mapErr(err)
}

// LinePlace returns the place in its key's line (1 is first) of a run
// waiting for a slot, and 0 for one that does not wait. Errors: Postgres's.
func (s Runs) LinePlace(ctx context.Context, run Run) (int, error) {
	if run.ConcurrencyKey == nil || run.AdmittedAt != nil || (run.EndedAt != nil && run.RestartRequestedAt == nil) {
		return 0, nil
	}
	var ahead int
	err := scanRow(s.raw(ctx, `SELECT count(*) FROM runs r WHERE (r.project, r.domain, r.concurrency_key) = (?, ?, ?)
		AND `+waitingWhere+` AND (r.created_at, r.name) < (?, ?)`, run.Project, run.Domain, *run.ConcurrencyKey,
		run.CreatedAt, run.Name), &ahead)
	return ahead + 1, mapErr(err)
}

// LedgerRun is one run of a concurrency key in the ledger: a holder (with
// Stopping) or a waiter (with Place).
type LedgerRun struct {
	Run        string     `json:"name"`
	Phase      string     `json:"phase"`
	CreatedAt  time.Time  `json:"created_at"`
	AdmittedAt *time.Time `json:"admitted_at"`
	Stopping   bool       `json:"stopping"`
	Place      int        `json:"place"`
}

// LedgerKey is one run-level concurrency key of the ledger: its max_runs
// (of its oldest holder's or waiter's spec), the runs holding its slots,
// the first runs waiting (at most ledgerWaiters) and how many wait.
type LedgerKey struct {
	Key     string      `json:"key"`
	MaxRuns int         `json:"max_runs"`
	Holders []LedgerRun `json:"holders"`
	Waiters []LedgerRun `json:"waiters"`
	Waiting int         `json:"waiting"`
}

// ledgerWaiters bounds the waiters ConcurrencyLedger lists of one key.
const ledgerWaiters = 100

// ConcurrencyLedger returns the run-level concurrency keys of a project
// and domain that have a holder or a waiter, by key: the slot ledger. A
// key is empty, and absent, once no run holds or waits for it. Errors:
// Postgres's.
func (s Runs) ConcurrencyLedger(ctx context.Context, project, dom string) ([]LedgerKey, error) {
	var raw []byte
	err := scanRow(s.raw(ctx, `WITH k AS MATERIALIZED (SELECT DISTINCT r.project, r.domain, r.concurrency_key AS key FROM runs r
			WHERE r.project = ? AND r.domain = ? AND r.concurrency_key IS NOT NULL
			AND (r.ended_at IS NULL OR r.restart_requested_at IS NOT NULL)
			UNION SELECT r.project, r.domain, r.concurrency_key FROM actions a JOIN runs r
				ON (r.project, r.domain, r.name) = (a.project, a.domain, a.run_name)
			WHERE a.abort_requested_at IS NOT NULL AND a.project = ? AND a.domain = ? AND r.concurrency_key IS NOT NULL
				AND r.admitted_at IS NOT NULL),
		h AS MATERIALIZED (`+holdersSQL+`)
		SELECT coalesce(json_agg(json_build_object('key', k.key,
			'max_runs', (SELECT coalesce(CAST(r.spec->'concurrency'->>'max_runs' AS int), 1) FROM runs r
				WHERE (r.project, r.domain, r.concurrency_key) = (k.project, k.domain, k.key)
				AND (r.ended_at IS NULL OR r.restart_requested_at IS NOT NULL OR r.admitted_at IS NOT NULL)
				ORDER BY r.ended_at IS NOT NULL, r.created_at LIMIT 1),
			'holders', (SELECT coalesce(json_agg(json_build_object('name', r.name, 'phase', r.phase, 'created_at', r.created_at,
				'admitted_at', r.admitted_at, 'stopping', h.stopping) ORDER BY r.admitted_at, r.name), '[]')
				FROM h JOIN runs r ON (r.project, r.domain, r.name) = (h.project, h.domain, h.name)
				WHERE (h.project, h.domain, h.key) = (k.project, k.domain, k.key)),
			'waiters', (SELECT coalesce(json_agg(json_build_object('name', w.name, 'phase', w.phase, 'created_at', w.created_at,
				'place', w.place) ORDER BY w.place), '[]') FROM (SELECT r.name, r.phase, r.created_at,
					row_number() OVER (ORDER BY r.created_at, r.name) AS place FROM runs r
					WHERE (r.project, r.domain, r.concurrency_key) = (k.project, k.domain, k.key) AND `+waitingWhere+`
					ORDER BY r.created_at, r.name LIMIT `+fmt.Sprint(ledgerWaiters)+`) w),
			'waiting', (SELECT count(*) FROM runs r WHERE (r.project, r.domain, r.concurrency_key) = (k.project, k.domain, k.key)
				AND `+waitingWhere+`)) ORDER BY k.key), '[]')
		FROM k`, project, dom, project, dom), &raw)
	if err != nil {
		return nil, mapErr(err)
	}
	var out []LedgerKey
	if err := decodeRows(raw, &out); err != nil {
		return nil, fmt.Errorf("decode the ledger: %w", err)
	}
	return out, nil
}
