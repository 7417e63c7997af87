package store

import (
	"context"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
)

// SlotKey names a step concurrency key: its tasks across the runs of a
// project and domain share its slots.
type SlotKey struct{ Project, Domain, Key string }

// RateLimitKey names a project's rate limit.
type RateLimitKey struct{ Project, Name string }

// BucketKey names one bucket of a rate limit: Key is a task's evaluated
// key ("" for the limit's one bucket).
type BucketKey struct{ Project, Name, Key string }

// TaskAdmissionState is what a scheduling pass reads of the admission of
// the tasks it may place (AdmissionState), as of Now, the database's
// clock: the tasks ASSIGNED, BUILDING or RUNNING of each of their
// concurrency keys (Held, a key with none maps to 0), the rate limits they
// take (Rates; a limit missing is not defined), and the buckets of those
// (Buckets; a bucket missing was never taken from, and is full).
type TaskAdmissionState struct {
	Now     time.Time
	Held    map[SlotKey]int
	Rates   map[RateLimitKey]domain.TokenRate
	Buckets map[BucketKey]domain.Bucket
}

// AdmissionState reads, in one statement, the admission state of tasks
// (those with admission fields: Task.HasAdmission; the others are not
// read for): the live count of each concurrency key, counted from the
// task rows (tasks_concurrency_key), never from a stored counter, and the
// rate limits and buckets they take. The caller holds the placement lock,
// so no other placement binds meanwhile. Errors: Postgres's.
func (s Placement) AdmissionState(ctx context.Context, tasks []Task) (TaskAdmissionState, error) {
	s = Placement{s.prefer(poolPass)}
	var sp, sd, sk, bp, bn, bk Strings
	for _, t := range tasks {
		if t.ConcurrencyKey != nil {
			sp, sd, sk = append(sp, t.Project), append(sd, t.Domain), append(sk, *t.ConcurrencyKey)
		}
		for _, r := range t.RateLimits {
			bp, bn, bk = append(bp, t.Project), append(bn, r.Name), append(bk, r.Key)
		}
	}
	var now time.Time
	var held, rates, buckets []byte
	err := scanRow(s.raw(ctx, admissionStateSQL, map[string]any{"sp": sp, "sd": sd, "sk": sk, "bp": bp, "bn": bn,
		"bk": bk}), &now, &held, &rates, &buckets)
	if err != nil {
		return TaskAdmissionState{}, mapErr(err)
	}
	var hs []struct {
		Project, Domain, Key string
		Held                 int
	}
	var rs []RateLimit
	var bs []struct {
		Project, Name, Key string
		Tokens             float64
		UpdatedAt          time.Time `json:"updated_at"`
	}
	if err := decodeEach([][]byte{held, rates, buckets}, &hs, &rs, &bs); err != nil {
		return TaskAdmissionState{}, fmt.Errorf("decode admission state: %w", err)
	}
	out := TaskAdmissionState{Now: now.UTC(), Held: make(map[SlotKey]int, len(hs)),
		Rates: make(map[RateLimitKey]domain.TokenRate, len(rs)), Buckets: make(map[BucketKey]domain.Bucket, len(bs))}
	for _, h := range hs {
		out.Held[SlotKey{h.Project, h.Domain, h.Key}] = h.Held
	}
	for _, r := range rs {
		out.Rates[RateLimitKey{r.Project, r.Name}] = r.Rate()
	}
	for _, b := range bs {
		out.Buckets[BucketKey{b.Project, b.Name, b.Key}] = domain.Bucket{Tokens: b.Tokens, At: b.UpdatedAt}
	}
	return out, nil
}

// admissionStateSQL is AdmissionState's statement: the slot keys (@sp,
// @sd, @sk) and the buckets (@bp, @bn, @bk) come as parallel text arrays,
// repeats allowed. A key's live count reads tasks_concurrency_key alone.
const admissionStateSQL = `WITH sk AS (SELECT DISTINCT * FROM unnest(CAST(CAST(@sp AS text) AS text[]),
		CAST(CAST(@sd AS text) AS text[]), CAST(CAST(@sk AS text) AS text[])) AS k(project, domain, key)),
	bk AS (SELECT DISTINCT * FROM unnest(CAST(CAST(@bp AS text) AS text[]),
		CAST(CAST(@bn AS text) AS text[]), CAST(CAST(@bk AS text) AS text[])) AS b(project, name, key))
SELECT clock_timestamp(),
	(SELECT coalesce(json_agg(h), '[]') FROM (SELECT sk.project, sk.domain, sk.key,
		(SELECT count(*) FROM tasks t WHERE t.project = sk.project AND t.domain = sk.domain
			AND t.concurrency_key = sk.key AND t.state IN (2, 3, 9)) AS held FROM sk) h),
	(SELECT coalesce(json_agg(r), '[]') FROM rate_limits r WHERE (r.project, r.name) IN (SELECT project, name FROM bk)),
	(SELECT coalesce(json_agg(b), '[]') FROM rate_limit_buckets b
		WHERE (b.project, b.name, b.key) IN (SELECT project, name, key FROM bk))`

// BucketTokens is a bucket's tokens as of a pass's clock, after the tokens
// its bound tasks took.
type BucketTokens struct {
	BucketKey
	Tokens float64
}

// TakeTokens writes the buckets the tasks a pass bound took from, as of
// now (TaskAdmissionState.Now), creating those never taken from, in one
// statement. Called in the pass's transaction after AssignTasks, it
// commits with the bind or not at all: no token is taken without a bind,
// no task bound without its tokens. It locks the rate limits first (KEY
// SHARE, key order), then the buckets, the order a delete of a rate limit
// locks them in; a bucket of a limit deleted meanwhile is not written.
// Errors: Postgres's.
func (s Placement) TakeTokens(ctx context.Context, now time.Time, buckets []BucketTokens) error {
	if len(buckets) == 0 {
		return nil
	}
	s = Placement{s.prefer(poolPass)}
	p, n, k := make(Strings, len(buckets)), make(Strings, len(buckets)), make(Strings, len(buckets))
	tokens := make([]float64, len(buckets))
	for i, b := range buckets {
		p[i], n[i], k[i], tokens[i] = b.Project, b.Name, b.Key, b.Tokens
	}
	return mapErr(s.exec(ctx, takeTokensSQL, map[string]any{"p": p, "n": n, "k": k, "tokens": array(tokens),
		"now": now}).Error)
}

// takeTokensSQL is TakeTokens' statement; `l` locks the rate limits
// before any bucket row (the one-time filter on its count runs first).
const takeTokensSQL = `WITH v AS (SELECT * FROM unnest(CAST(CAST(@p AS text) AS text[]), CAST(CAST(@n AS text) AS text[]),
		CAST(CAST(@k AS text) AS text[]), CAST(@tokens AS float8[])) AS v(project, name, key, tokens)),
	l AS (SELECT r.project, r.name FROM rate_limits r WHERE (r.project, r.name) IN (SELECT project, name FROM v)
		ORDER BY r.project, r.name FOR KEY SHARE)
INSERT INTO rate_limit_buckets (project, name, key, tokens, updated_at)
SELECT v.project, v.name, v.key, v.tokens, @now FROM v
WHERE (SELECT count(*) FROM l) >= 0 AND (v.project, v.name) IN (SELECT project, name FROM l)
ON CONFLICT (project, name, key) DO UPDATE SET tokens = excluded.tokens, updated_at = excluded.updated_at`

// TaskSlot is one step concurrency key of a project and domain, as its
// ledger shows it: Max is its tasks' max_tasks (the largest, when steps
// sharing the key differ), Holders the tasks that hold a slot (ASSIGNED,
// BUILDING or RUNNING, oldest first), Waiting how many tasks of it are
// PENDING.
type TaskSlot struct {
	Key     string
	Max     int
	Holders []SlotHolder
	Waiting int
}

// SlotHolder is a task holding a slot of a concurrency key.
type SlotHolder struct {
	Run    string           `json:"run"`
	Action string           `json:"action"`
	Task   int              `json:"task"`
	State  domain.TaskState `json:"state"`
}

// TaskSlots returns the step-concurrency ledger of project/domain: each
// key with an unfinished task, by key, counted from the task rows
// (tasks_concurrency_key). Errors: Postgres's.
func (s Placement) TaskSlots(ctx context.Context, project, dom string) ([]TaskSlot, error) {
	var rows []struct {
		Key     string
		Max     int
		Waiting int
		Holders []byte
	}
	err := s.raw(ctx, `SELECT concurrency_key AS key, max(concurrency_max) AS max,
			count(*) FILTER (WHERE state = 1) AS waiting,
			coalesce(json_agg(json_build_object('run', run_name, 'action', action_name, 'task', idx, 'state', state)
				ORDER BY id) FILTER (WHERE state IN (2, 3, 9)), '[]') AS holders
		FROM tasks WHERE project = ? AND domain = ? AND concurrency_key IS NOT NULL AND state IN (1, 2, 3, 9)
		GROUP BY concurrency_key ORDER BY concurrency_key`, project, dom).Scan(&rows).Error
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]TaskSlot, len(rows))
	for i, r := range rows {
		out[i] = TaskSlot{Key: r.Key, Max: r.Max, Waiting: r.Waiting}
		if err := decodeRows(r.Holders, &out[i].Holders); err != nil {
			return nil, fmt.Errorf("decode holders of %q: %w", r.Key, err)
		}
	}
	return out, nil
}
