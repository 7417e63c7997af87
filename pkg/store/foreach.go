package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"gorm.io/gorm"
)

// The statements of a for_each step (domain.ForEach): the items its
// earlier generation already succeeded at, and the cache entries of its
// items, each looked up and written by its own key.

// SucceededItem is a task of a for_each step's generation that SUCCEEDED:
// its index, its item, its outputs (its own when it succeeded without
// running, else its current attempt's) and whether it ran.
type SucceededItem struct {
	Idx     int               `json:"idx"`
	Item    *string           `json:"item"`
	Outputs map[string]string `json:"outputs"`
	Ran     bool              `json:"ran"`
}

// SucceededItems returns the SUCCEEDED tasks of action key's generation, in
// index order, in one statement (the tasks by their (action, generation,
// idx) key, each one's current attempt by (task_id, number)). Errors:
// Postgres's.
func (s Tasks) SucceededItems(ctx context.Context, key domain.ActionKey, generation int) ([]SucceededItem, error) {
	var raw []byte
	err := scanRow(s.raw(ctx, `SELECT coalesce(json_agg(json_build_object('idx', t.idx, 'item', t.item,
			'outputs', coalesce(t.outputs, at.outputs), 'ran', t.outputs IS NULL) ORDER BY t.idx), '[]')
		FROM tasks t LEFT JOIN attempts at ON at.task_id = t.id AND at.number = t.attempt_count
		WHERE (t.project, t.domain, t.run_name, t.action_name, t.generation) = (@p, @d, @r, @a, @g)
		  AND t.state = @succeeded`,
		sql.Named("p", key.Project), sql.Named("d", key.Domain), sql.Named("r", key.Run), sql.Named("a", key.Action),
		sql.Named("g", generation), sql.Named("succeeded", domain.TaskSucceeded)), &raw)
	if err != nil {
		return nil, mapErr(err)
	}
	var out []SucceededItem
	if err := decodeRows(raw, &out); err != nil {
		return nil, fmt.Errorf("decode succeeded items of %s: %w", key, err)
	}
	return out, nil
}

// GetCacheEntries returns the entries of keys in project and dom, expired
// or not, by key, in one statement; a key without an entry is missing.
func (s Cache) GetCacheEntries(ctx context.Context, project, dom string, keys []string) (map[string]CacheEntry, error) {
	var es []CacheEntry
	if err := s.q(ctx).Where("project = ? AND domain = ? AND key IN ?", project, dom, keys).Find(&es).Error; err != nil {
		return nil, mapErr(err)
	}
	out := make(map[string]CacheEntry, len(es))
	for _, e := range es {
		out[e.Key] = e
	}
	return out, nil
}

// PutCacheEntries writes entries (one action's, its items' entries) as
// PutCacheEntry does each, in one statement, and one "cache.populated"
// event for the action with their number. None: nothing.
func (s Cache) PutCacheEntries(ctx context.Context, entries []CacheEntry, now time.Time) error {
	if len(entries) == 0 {
		return nil
	}
	for i := range entries {
		entries[i].CreatedAt = now
	}
	rows, err := encodeRows(entries)
	if err != nil {
		return err
	}
	err = s.exec(ctx, `INSERT INTO cache_entries AS c
		(project, domain, key, version, run_name, action_name, outputs, created_at, expires_at)
		SELECT j."Project", j."Domain", j."Key", j."Version", j."RunName", j."ActionName", j."Outputs",
			j."CreatedAt", j."ExpiresAt"
		FROM jsonb_to_recordset(CAST(@rows AS jsonb)) AS j("Project" text, "Domain" text, "Key" text,
			"Version" text, "RunName" text, "ActionName" text, "Outputs" jsonb, "CreatedAt" timestamptz,
			"ExpiresAt" timestamptz)
		ON CONFLICT (project, domain, key) DO UPDATE SET version = excluded.version, run_name = excluded.run_name,
			action_name = excluded.action_name, outputs = excluded.outputs, created_at = excluded.created_at,
			expires_at = excluded.expires_at`, sql.Named("rows", string(rows))).Error
	if err != nil {
		return mapErr(err)
	}
	e := entries[0]
	run := domain.RunKey{Project: e.Project, Domain: e.Domain, Run: e.RunName}
	return s.event(ctx, run, e.ActionName, "cache.populated", map[string]any{"entries": len(entries),
		"expires_at": e.ExpiresAt})
}

// EndAtStart ends a step as it starts, running no task or child (a
// for_each over no item, or whose items all succeeded already; or one
// whose list is not one): phase to (from from), started and ended now,
// with reason ("" for none) and outputs (nil: none on the action; a
// workflow step's are there), its wait cleared; it writes an
// "action.phase" event.
func (s Actions) EndAtStart(ctx context.Context, key domain.ActionKey, from, to domain.Phase, reason string,
	outputs map[string]string, now time.Time) error {
	set := map[string]any{"phase": string(to), "started_at": now, "ended_at": now, "reason": strPtr(reason),
		"waiting_for": nil, "not_before": nil, "updated_at": now, "version": gorm.Expr("version + 1")}
	if outputs != nil {
		set["outputs"] = jsonText(outputs)
	}
	if err := s.q(ctx).Model(&Action{}).Where(actionWhere, actionArgs(key)...).Updates(set).Error; err != nil {
		return mapErr(err)
	}
	return s.event(ctx, key.RunKey, key.Action, "action.phase", map[string]any{"from": from, "to": to, "reason": reason})
}
