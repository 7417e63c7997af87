package store

import (
	"cmp"
	"context"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
)

// RateLimits reads and writes a project's rate limits (the buckets are
// the scheduling pass's: Placement.AdmissionState, Placement.TakeTokens).
type RateLimits struct{ *core }

// RateLimits returns the rate limits repository on s.
func (s *Store) RateLimits() RateLimits { return RateLimits{s.core} }

// RateLimit is a row of rate_limits: LimitCount tokens per PerMs
// milliseconds (domain.TokenRate).
type RateLimit struct {
	Project    string    `gorm:"primaryKey" json:"project"`
	Name       string    `gorm:"primaryKey" json:"name"`
	LimitCount int       `json:"limit_count"`
	PerMs      int64     `json:"per_ms"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// TableName is rate_limits.
func (RateLimit) TableName() string { return "rate_limits" }

// Rate is the limit as domain.TokenRate.
func (r RateLimit) Rate() domain.TokenRate {
	return domain.TokenRate{Limit: r.LimitCount, Per: time.Duration(r.PerMs) * time.Millisecond}
}

// PutRateLimit creates the rate limit project/name or replaces its rate
// (its buckets keep their tokens, cut to the new limit when next refilled),
// and reports whether it created it.
func (s RateLimits) PutRateLimit(ctx context.Context, project, name string, rate domain.TokenRate) (RateLimit, bool, error) {
	var out struct {
		RateLimit
		Created bool
	}
	now := dbNow()
	err := s.raw(ctx, `INSERT INTO rate_limits (project, name, limit_count, per_ms, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (project, name) DO UPDATE SET limit_count = excluded.limit_count, per_ms = excluded.per_ms,
			updated_at = excluded.updated_at
		RETURNING *, (xmax = 0) AS created`, project, name, rate.Limit, rate.Per.Milliseconds(), now, now).
		Scan(&out).Error
	return out.RateLimit, out.Created, mapErr(err)
}

// GetRateLimit returns a rate limit. Errors: ErrNotFound.
func (s RateLimits) GetRateLimit(ctx context.Context, project, name string) (RateLimit, error) {
	var r RateLimit
	err := s.q(ctx).Where("project = ? AND name = ?", project, name).Take(&r).Error
	return r, mapErr(err)
}

// ListRateLimits returns a page of the project's rate limits by name,
// after cursor (the last name of the previous page), and the next page's
// cursor ("" on the last); limit is 1 to 500, default 50. Errors:
// ErrBadCursor when cursor is not a rate limit's name.
func (s RateLimits) ListRateLimits(ctx context.Context, project, cursor string, limit int) ([]RateLimit, string, error) {
	if cursor != "" && !domain.ValidName(cursor) {
		return nil, "", ErrBadCursor
	}
	limit = min(max(cmp.Or(limit, 50), 1), 500)
	var rs []RateLimit
	err := s.q(ctx).Where("project = ? AND name > ?", project, cursor).Order("name").Limit(limit + 1).Find(&rs).Error
	if err != nil {
		return nil, "", mapErr(err)
	}
	if len(rs) <= limit {
		return rs, "", nil
	}
	return rs[:limit], rs[limit-1].Name, nil
}

// RateLimitNames returns the names of the project's rate limits: what a
// run's steps may take tokens of.
func (s RateLimits) RateLimitNames(ctx context.Context, project string) (map[string]bool, error) {
	var names []string
	if err := s.raw(ctx, `SELECT name FROM rate_limits WHERE project = ?`, project).Scan(&names).Error; err != nil {
		return nil, mapErr(err)
	}
	out := make(map[string]bool, len(names))
	for _, n := range names {
		out[n] = true
	}
	return out, nil
}

// DeleteRateLimit deletes a rate limit and its buckets. A task that takes
// tokens of it waits PENDING until it is put again. Errors: ErrNotFound.
func (s RateLimits) DeleteRateLimit(ctx context.Context, project, name string) error {
	res := s.q(ctx).Where("project = ? AND name = ?", project, name).Delete(&RateLimit{})
	if res.Error != nil {
		return mapErr(res.Error)
	}
	if res.RowsAffected == 0 {
		return ErrNotFound
	}
	return nil
}
