package store

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
)

// The catalog (Flyte's): entries hold a discoverable step's outputs by key
// within a project and domain; a reservation names the one action that
// executes a serializable key now. Both sit after workers in the lock order
// (docs/design-notes.md): a transaction takes them last, one key at a time.

// CacheEntry is a row of cache_entries.
type CacheEntry struct {
	Project    string `gorm:"primaryKey"`
	Domain     string `gorm:"primaryKey"`
	Key        string `gorm:"primaryKey"`
	Version    string
	RunName    string
	ActionName string
	// Outputs are the step's outputs (name → value) as StepOutputs gave them.
	Outputs   map[string]string `gorm:"serializer:json"`
	CreatedAt time.Time
	// ExpiresAt is CreatedAt + the writer's max_age; nil = never.
	ExpiresAt *time.Time
}

// CacheReservation is a row of cache_reservations: the action (RunName,
// ActionName) that executes a serializable key until ExpiresAt.
type CacheReservation struct {
	Project    string `gorm:"primaryKey"`
	Domain     string `gorm:"primaryKey"`
	Key        string `gorm:"primaryKey"`
	RunName    string
	ActionName string
	ExpiresAt  time.Time
	CreatedAt  time.Time
}

// CacheEntryDetail is an entry with its key's reservation, if any.
type CacheEntryDetail struct {
	CacheEntry
	Reservation *CacheReservation
}

// GetCacheEntry returns the entry of key in project and dom, expired or
// not. Errors: ErrNotFound.
func (s Cache) GetCacheEntry(ctx context.Context, project, dom, key string) (CacheEntry, error) {
	var e CacheEntry
	err := s.q(ctx).Where("project = ? AND domain = ? AND key = ?", project, dom, key).Take(&e).Error
	return e, mapErr(err)
}

// PutCacheEntry writes e, replacing the entry of its key, with created_at
// now, and writes a "cache.populated" event for the action that wrote it.
func (s Cache) PutCacheEntry(ctx context.Context, e CacheEntry, now time.Time) error {
	e.CreatedAt = now
	err := s.exec(ctx, `INSERT INTO cache_entries AS c
		(project, domain, key, version, run_name, action_name, outputs, created_at, expires_at)
		VALUES (@project, @domain, @key, @version, @run, @action, @outputs, @now, @expires)
		ON CONFLICT (project, domain, key) DO UPDATE SET version = excluded.version, run_name = excluded.run_name,
			action_name = excluded.action_name, outputs = excluded.outputs, created_at = excluded.created_at,
			expires_at = excluded.expires_at`,
		sql.Named("project", e.Project), sql.Named("domain", e.Domain), sql.Named("key", e.Key),
		sql.Named("version", e.Version), sql.Named("run", e.RunName), sql.Named("action", e.ActionName),
		sql.Named("outputs", jsonText(e.Outputs)), sql.Named("now", now), sql.Named("expires", e.ExpiresAt)).Error
	if err != nil {
		return mapErr(err)
	}
	run := domain.RunKey{Project: e.Project, Domain: e.Domain, Run: e.RunName}
	return s.event(ctx, run, e.ActionName, "cache.populated", map[string]any{"key": e.Key, "expires_at": e.ExpiresAt})
}

// DeleteCacheEntry evicts the entry of key in project and dom (its
// reservation, if any, stays: the owner still runs). Errors: ErrNotFound.
func (s Cache) DeleteCacheEntry(ctx context.Context, project, dom, key string) error {
	res := s.q(ctx).Where("project = ? AND domain = ? AND key = ?", project, dom, key).Delete(&CacheEntry{})
	if res.Error != nil {
		return mapErr(res.Error)
	}
	if res.RowsAffected == 0 {
		return ErrNotFound
	}
	return nil
}

// CacheFilter selects cache entries of a project and domain: a page of
// them (ListCacheEntries) or a batch to delete (DeleteCacheEntries). Each
// filter that is set narrows the selection; none selects every entry.
type CacheFilter struct {
	Project, Domain string
	// Version keeps the entries of this cache version ("": any).
	Version string
	// Run keeps the entries this run wrote ("": any).
	Run string
	// Step keeps the entries this step (its action's name) wrote ("": any).
	Step string
	// CreatedBefore keeps the entries written before it (zero: any).
	CreatedBefore time.Time
	// Cursor is the NextCursor of the previous page (ListCacheEntries).
	Cursor string
	// Limit is the page size, 1 to 500. Default 50 (ListCacheEntries).
	Limit int
}

// where is f's selection as a condition on cache_entries with its named
// values (@project, @domain, …): the project's and domain's entries as the
// listing index cache_entries_created reads them (sqlListedByCreation),
// narrowed by each filter that is set.
func (f CacheFilter) where() (string, []any) {
	conds := []string{"project = @project", "domain = @domain", sqlListedByCreation}
	args := []any{sql.Named("project", f.Project), sql.Named("domain", f.Domain)}
	for _, c := range []struct {
		set  bool
		cond string
		arg  sql.NamedArg
	}{
		{f.Version != "", "version = @version", sql.Named("version", f.Version)},
		{f.Run != "", "run_name = @run", sql.Named("run", f.Run)},
		{f.Step != "", "action_name = @step", sql.Named("step", f.Step)},
		{!f.CreatedBefore.IsZero(), "created_at < @before", sql.Named("before", f.CreatedBefore)},
	} {
		if c.set {
			conds, args = append(conds, c.cond), append(args, c.arg)
		}
	}
	return strings.Join(conds, " AND "), args
}

// ListCacheEntries returns a page of the entries f selects, newest first
// (then by key), each with its key's reservation, and the cursor of the
// next page ("" on the last). Errors: ErrBadCursor.
func (s Cache) ListCacheEntries(ctx context.Context, f CacheFilter) ([]CacheEntryDetail, string, error) {
	limit := min(max(cmp.Or(f.Limit, 50), 1), 500)
	cond, args := f.where()
	q := s.q(ctx).Where(cond, args...)
	if f.Cursor != "" {
		at, key, err := decodeCursor(f.Cursor)
		if err != nil {
			return nil, "", err
		}
		q = q.Where("(created_at, key) < (?, ?)", at, key)
	}
	var rows []CacheEntry
	if err := q.Order("created_at DESC, key DESC").Limit(limit + 1).Find(&rows).Error; err != nil {
		return nil, "", mapErr(err)
	}
	next := ""
	if len(rows) > limit {
		rows = rows[:limit]
		next = encodeCursor(rows[limit-1].CreatedAt, rows[limit-1].Key)
	}
	out, err := s.withReservations(ctx, f.Project, f.Domain, rows)
	return out, next, err
}

// CacheMark is where a batch of DeleteCacheEntries starts: after the entry
// written at CreatedAt with Key, in its order. The zero mark starts at the
// oldest entry.
type CacheMark struct {
	CreatedAt time.Time
	Key       string
}

// deleteCacheEntriesSQL deletes up to @limit entries of the condition %s
// (CacheFilter.where), oldest first after the mark (@at, @key) in the order
// of cache_entries_created read backwards (created_at, then key
// descending), and returns each one's created_at and key. Its rows are
// named by ctid, read under their locks in the same statement, so that the
// delete is a TID scan whatever a generic plan guesses of @limit (a join on
// the key read the whole table). It skips the rows another transaction
// holds (an entry being written now), so it waits for no transaction; a
// write of the same key waits for this one's commit, a batch's time.
const deleteCacheEntriesSQL = `DELETE FROM cache_entries WHERE ctid = ANY(ARRAY(
	SELECT ctid FROM cache_entries
	WHERE %s AND created_at >= @at AND (created_at > @at OR key < @key)
	ORDER BY created_at, key DESC LIMIT @limit FOR UPDATE SKIP LOCKED))
RETURNING created_at, key`

// DeleteCacheEntries deletes up to limit (1 to 1000) of the entries f
// selects (its Cursor and Limit unused) that come after mark, the oldest
// first, in one statement (deleteCacheEntriesSQL: its own short transaction
// unless s is one); their reservations stay (an owner still runs). It
// returns how many it deleted and the mark of the next batch: a batch that
// deleted fewer than limit left none after it, but for entries being
// written as it ran.
func (s Cache) DeleteCacheEntries(ctx context.Context, f CacheFilter, mark CacheMark, limit int) (int64, CacheMark, error) {
	cond, args := f.where()
	var rows []CacheMark
	err := s.raw(ctx, fmt.Sprintf(deleteCacheEntriesSQL, cond), append(args, sql.Named("at", mark.CreatedAt),
		sql.Named("key", mark.Key), sql.Named("limit", min(max(limit, 1), 1000)))...).Scan(&rows).Error
	if err != nil {
		return 0, mark, mapErr(err)
	}
	for _, r := range rows {
		if r.CreatedAt.After(mark.CreatedAt) || r.CreatedAt.Equal(mark.CreatedAt) && r.Key < mark.Key {
			mark = r
		}
	}
	return int64(len(rows)), mark, nil
}

// withReservations pairs entries with their keys' reservations, read in one
// statement.
func (s *core) withReservations(ctx context.Context, project, dom string, rows []CacheEntry) ([]CacheEntryDetail, error) {
	out := make([]CacheEntryDetail, len(rows))
	keys := make([]string, len(rows))
	for i, e := range rows {
		out[i].CacheEntry, keys[i] = e, e.Key
	}
	if len(rows) == 0 {
		return out, nil
	}
	var res []CacheReservation
	if err := s.q(ctx).Where("project = ? AND domain = ? AND key IN ?", project, dom, keys).Find(&res).Error; err != nil {
		return nil, mapErr(err)
	}
	for i := range out {
		for j := range res {
			if res[j].Key == out[i].Key {
				out[i].Reservation = &res[j]
			}
		}
	}
	return out, nil
}
