package domain

import (
	"fmt"
	"math"
	"time"
)

// RatePeriods maps the periods a rate limit may be given per ("1s", "1m",
// "1h", Hatchet's SECOND, MINUTE, HOUR) to their durations.
var RatePeriods = map[string]time.Duration{"1s": time.Second, "1m": time.Minute, "1h": time.Hour}

// MaxRateLimit bounds a rate limit's limit.
const MaxRateLimit = 1_000_000

// TokenRate is a rate limit (Hatchet's): a token bucket of capacity Limit,
// refilled continuously at Limit tokens per Per.
type TokenRate struct {
	Limit int
	Per   time.Duration
}

// ValidateRateLimit checks a rate limit as PUT gives it: limit 1 to
// MaxRateLimit, per one of RatePeriods. It returns the rate and the field
// errors naming "limit" and "per".
func ValidateRateLimit(limit int, per string) (TokenRate, []FieldError) {
	var errs []FieldError
	if limit < 1 || limit > MaxRateLimit {
		errs = append(errs, FieldError{"limit", fmt.Sprintf("must be between 1 and %d, got %d", MaxRateLimit, limit)})
	}
	d, ok := RatePeriods[per]
	if !ok {
		errs = append(errs, FieldError{"per", fmt.Sprintf("must be one of 1s, 1m, 1h; got %q", clipText(per))})
	}
	return TokenRate{Limit: limit, Per: d}, errs
}

// Bucket is a token bucket's state: Tokens as of At. A bucket never taken
// from is full: FullBucket.
type Bucket struct {
	Tokens float64
	At     time.Time
}

// tokenEpsilon absorbs the rounding of continuous refill: a bucket within
// it of n tokens holds n (a refill of 100/s over 10 ms is 0.9999999999).
const tokenEpsilon = 1e-9

// FullBucket is the bucket of r created at now: Limit tokens.
func (r TokenRate) FullBucket(now time.Time) Bucket {
	return Bucket{Tokens: float64(r.Limit), At: now}
}

// Refill returns b as of now: its tokens plus Limit per Per for the time
// since b.At, at most Limit (a bucket over the limit, whose limit was
// lowered, is cut to it). A now before b.At (a clock that stepped back)
// refills nothing and keeps b.At.
func (r TokenRate) Refill(b Bucket, now time.Time) Bucket {
	if now.After(b.At) {
		b.Tokens += float64(now.Sub(b.At)) * float64(r.Limit) / float64(r.Per)
		b.At = now
	}
	b.Tokens = min(b.Tokens, float64(r.Limit))
	return b
}

// Take refills b to now and takes units tokens when it holds them: it
// returns the bucket after and whether it took. A bucket that does not hold
// units is returned refilled, unchanged otherwise.
func (r TokenRate) Take(b Bucket, units int, now time.Time) (Bucket, bool) {
	b = r.Refill(b, now)
	if b.Tokens+tokenEpsilon < float64(units) {
		return b, false
	}
	b.Tokens = max(b.Tokens-float64(units), 0)
	return b, true
}

// DueAt returns when b (refilled to b.At) holds units tokens: b.At when it
// does, and ok false when it never will (units exceed Limit).
func (r TokenRate) DueAt(b Bucket, units int) (at time.Time, ok bool) {
	if units > r.Limit {
		return time.Time{}, false
	}
	missing := float64(units) - b.Tokens
	if missing <= tokenEpsilon {
		return b.At, true
	}
	wait := time.Duration(math.Ceil(missing * float64(r.Per) / float64(r.Limit)))
	return b.At.Add(wait), true
}

// TokenWaitReason is the pending_reason of a task waiting for units tokens
// of rate limit name (bucket key, "" for the limit's one bucket):
// `rate limit "paid-api": waiting for 1 token`.
func TokenWaitReason(name, key string, units int) string {
	tokens := "tokens"
	if units == 1 {
		tokens = "token"
	}
	if key != "" {
		return fmt.Sprintf("rate limit %q key %q: waiting for %d %s", name, key, units, tokens)
	}
	return fmt.Sprintf("rate limit %q: waiting for %d %s", name, units, tokens)
}

// TokenNeverReason is the pending_reason of a task that takes more units
// of rate limit name than its limit holds: it waits until the limit is
// raised.
func TokenNeverReason(name string, units, limit int) string {
	return fmt.Sprintf("rate limit %q: takes %d tokens, more than its limit of %d", name, units, limit)
}

// UndefinedRateLimitReason is the pending_reason of a task whose rate
// limit was deleted after its run was created: it waits until the limit
// is put again.
func UndefinedRateLimitReason(name string) string {
	return fmt.Sprintf("rate limit %q is not defined in the project", name)
}
