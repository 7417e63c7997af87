package domain_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

// Hatchet's rate limits: a bucket of capacity limit, refilled at limit
// tokens per period; a task is placed only when its bucket holds its units.
func TestTokenBucketTake(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	perSecond10 := domain.TokenRate{Limit: 10, Per: time.Second}
	tests := []struct {
		name       string
		rate       domain.TokenRate
		bucket     domain.Bucket
		units      int
		at         time.Duration // since t0
		wantOK     bool
		wantTokens float64
	}{
		{"a new bucket is full: it gives its limit at once", perSecond10, perSecond10.FullBucket(t0), 10, 0, true, 0},
		{"an empty bucket gives nothing at once", perSecond10, domain.Bucket{At: t0}, 1, 0, false, 0},
		{"refilled at limit per period: 100 ms gives 1 of 10/s", perSecond10, domain.Bucket{At: t0}, 1,
			100 * time.Millisecond, true, 0},
		{"continuously: 50 ms gives half a token, not one", perSecond10, domain.Bucket{At: t0}, 1,
			50 * time.Millisecond, false, 0.5},
		{"never above capacity, however long it rests", perSecond10, domain.Bucket{At: t0}, 1, time.Hour, true, 9},
		{"units take that many tokens", perSecond10, domain.Bucket{Tokens: 5, At: t0}, 3, 0, true, 2},
		{"more units than tokens take none", perSecond10, domain.Bucket{Tokens: 2.5, At: t0}, 3, 0, false, 2.5},
		{"a lowered limit cuts the bucket to it", domain.TokenRate{Limit: 2, Per: time.Second},
			domain.Bucket{Tokens: 10, At: t0}, 1, 0, true, 1},
		{"per minute: 6 s gives 1 of 10/m", domain.TokenRate{Limit: 10, Per: time.Minute}, domain.Bucket{At: t0}, 1,
			6 * time.Second, true, 0},
		{"a clock that stepped back refills nothing", perSecond10, domain.Bucket{Tokens: 0.5, At: t0}, 1,
			-time.Second, false, 0.5},
		{"rounding of 100/s over 10 ms still gives a token", domain.TokenRate{Limit: 100, Per: time.Second},
			domain.Bucket{At: t0}, 1, 10 * time.Millisecond, true, 0},
	}
	for _, tc := range tests {
		b, ok := tc.rate.Take(tc.bucket, tc.units, t0.Add(tc.at))
		require.Equal(t, tc.wantOK, ok, tc.name)
		require.InDelta(t, tc.wantTokens, b.Tokens, 1e-6, tc.name)
	}
}

// When the next token is due: a waiting task is placed then, not at the
// next tick.
func TestTokenBucketDueAt(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := domain.TokenRate{Limit: 100, Per: time.Second}
	tests := []struct {
		name   string
		tokens float64
		units  int
		want   time.Duration
		wantOK bool
	}{
		{"held now: due at once", 1, 1, 0, true},
		{"one token of 100/s: 10 ms", 0, 1, 10 * time.Millisecond, true},
		{"the rest of a token", 0.75, 1, 2500 * time.Microsecond, true},
		{"several units: their sum", 0, 5, 50 * time.Millisecond, true},
		{"more units than the limit: never", 100, 101, 0, false},
	}
	for _, tc := range tests {
		at, ok := r.DueAt(domain.Bucket{Tokens: tc.tokens, At: t0}, tc.units)
		require.Equal(t, tc.wantOK, ok, tc.name)
		if ok {
			require.Equal(t, t0.Add(tc.want), at, tc.name)
			b, took := r.Take(domain.Bucket{Tokens: tc.tokens, At: t0}, tc.units, at)
			require.True(t, took, "%s: the bucket holds the units when due", tc.name)
			require.InDelta(t, 0, b.Tokens, 1e-6, tc.name)
		}
	}
}

// Over any span, a bucket of limit L per period P created full gives at
// most L + L·span/P tokens, whatever the times of the takes (Hatchet's
// rule: capacity L, continuous refill).
func TestTokenBucketBound(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := domain.TokenRate{Limit: 20, Per: time.Second}
	b := r.FullBucket(t0)
	taken := 0
	for at := time.Duration(0); at < 3*time.Second; at += 7 * time.Millisecond {
		var ok bool
		if b, ok = r.Take(b, 1, t0.Add(at)); ok {
			taken++
		}
	}
	require.LessOrEqual(t, taken, 20+60)
	require.GreaterOrEqual(t, taken, 20+60-1)
}

func TestValidateRateLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		limit  int
		per    string
		fields []string
	}{
		{100, "1s", nil},
		{1, "1m", nil},
		{5, "1h", nil},
		{0, "1s", []string{"limit"}},
		{domain.MaxRateLimit + 1, "1s", []string{"limit"}},
		{10, "2s", []string{"per"}},
		{10, "", []string{"per"}},
		{-1, "1d", []string{"limit", "per"}},
	}
	for _, tc := range tests {
		r, errs := domain.ValidateRateLimit(tc.limit, tc.per)
		var fields []string
		for _, e := range errs {
			fields = append(fields, e.Field)
		}
		require.Equal(t, tc.fields, fields, "%d per %q", tc.limit, tc.per)
		if len(errs) == 0 {
			require.Equal(t, domain.RatePeriods[tc.per], r.Per)
		}
	}
}

func TestTokenWaitReason(t *testing.T) {
	t.Parallel()
	require.Equal(t, `rate limit "paid-api": waiting for 1 token`, domain.TokenWaitReason("paid-api", "", 1))
	require.Equal(t, `rate limit "paid-api" key "eu": waiting for 3 tokens`, domain.TokenWaitReason("paid-api", "eu", 3))
}
