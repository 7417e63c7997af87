package store

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"time"
	"unicode/utf8"
)

// RunFilter selects runs for ListRuns.
type RunFilter struct {
	Project, Domain string
	// Phase, when set, keeps runs in that phase.
	Phase string
	// NameContains, when set, keeps runs whose name contains it (a plain
	// substring, no pattern).
	NameContains string
	// Cursor is the NextCursor of the previous page.
	Cursor string
	// Limit is the page size, 1 to 500. Default 50.
	Limit int
}

// ErrBadCursor: the cursor was not produced by ListRuns.
var ErrBadCursor = errors.New("invalid cursor")

// ListRuns returns a page of runs, newest first, and the cursor of the next
// page ("" on the last). Errors: ErrBadCursor.
func (s Runs) ListRuns(ctx context.Context, f RunFilter) ([]Run, string, error) {
	limit := min(max(cmp.Or(f.Limit, 50), 1), 500)
	q := s.q(ctx).Where("project = ? AND domain = ? AND "+sqlListedByCreation, f.Project, f.Domain)
	if f.Phase != "" {
		q = q.Where("phase = ?", f.Phase)
	}
	if f.NameContains != "" {
		q = q.Where("strpos(name, ?) > 0", f.NameContains)
	}
	if f.Cursor != "" {
		at, name, err := decodeCursor(f.Cursor)
		if err != nil {
			return nil, "", err
		}
		q = q.Where("(created_at, name) < (?, ?)", at, name)
	}
	var runs []Run
	if err := q.Order("created_at DESC, name DESC").Limit(limit + 1).Find(&runs).Error; err != nil {
		return nil, "", mapErr(err)
	}
	if len(runs) <= limit {
		return runs, "", nil
	}
	last := runs[limit-1]
	return runs[:limit], encodeCursor(last.CreatedAt, last.Name), nil
}

func encodeCursor(at time.Time, name string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(at.UTC().Format(time.RFC3339Nano) + "|" + name))
}

func decodeCursor(c string) (time.Time, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", ErrBadCursor
	}
	ts, name, ok := strings.Cut(string(raw), "|")
	at, err := time.Parse(time.RFC3339Nano, ts)
	// Postgres refuses NUL and invalid UTF-8 in a text parameter; no key we
	// encode holds either.
	if !ok || err != nil || !utf8.ValidString(name) || strings.ContainsRune(name, 0) {
		return time.Time{}, "", ErrBadCursor
	}
	return at, name, nil
}
