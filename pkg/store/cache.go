package store

import (
	"cmp"
	"context"
	"database/sql"
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

// CacheFilter selects a page of cache entries.
type CacheFilter struct {
	Project, Domain string
	// Cursor is the NextCursor of the previous page.
	Cursor string
	// Limit is the page size, 1 to 500. Default 50.
	Limit int
}

// ListCacheEntries returns a page of a project's and domain's entries,
// newest first (then by key), each with its key's reservation, and the
// cursor of the next page ("" on the last). Errors: ErrBadCursor.
func (s Cache) ListCacheEntries(ctx context.Context, f CacheFilter) ([]CacheEntryDetail, string, error) {
	limit := min(max(cmp.Or(f.Limit, 50), 1), 500)
	q := s.q(ctx).Where("project = ? AND domain = ? AND "+sqlListedByCreation, f.Project, f.Domain)
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
