package domain

import (
	"math"
	"math/rand/v2"
	"time"
)

// Backoff gives the delay before retry number n (n >= 1).
type Backoff interface {
	Delay(n int) time.Duration
}

var (
	_ Backoff = FullJitter{}
	_ Backoff = KubeVela{}
	_ Backoff = Table(nil)
)

// FullJitter is exponential backoff with full jitter, as Flyte's abort
// reconciler uses it: Delay(n) is uniform in [0, min(Max, Initial·2^(n-1))].
// Source: Flyte's AbortReconciler, whose ceiling is InitialDelay·2^(n-1)
// capped at MaxDelay and whose delay is drawn uniformly up to the ceiling.
type FullJitter struct {
	// Initial is the first ceiling. Default 1s.
	Initial time.Duration
	// Max caps every ceiling. Default 5m.
	Max time.Duration
	// Rand returns a uniform value in [0, n); nil uses math/rand/v2.
	Rand func(n int64) int64
}

// Ceiling returns min(Max, Initial·2^(n-1)), the largest delay for retry n.
func (f FullJitter) Ceiling(n int) time.Duration {
	initial, limit := f.Initial, f.Max
	if initial <= 0 {
		initial = time.Second
	}
	if limit <= 0 {
		limit = 5 * time.Minute
	}
	if n < 1 {
		n = 1
	}
	c := initial
	for i := 1; i < n && c < limit; i++ {
		if c > limit/2 {
			return limit
		}
		c *= 2
	}
	return min(c, limit)
}

// Delay returns a uniform random delay in [0, Ceiling(n)].
func (f FullJitter) Delay(n int) time.Duration {
	r := f.Rand
	if r == nil {
		r = rand.Int64N
	}
	c := int64(f.Ceiling(n))
	if c == math.MaxInt64 {
		return time.Duration(r(c))
	}
	return time.Duration(r(c + 1))
}

// KubeVela is KubeVela's workflow backoff: int(0.05·2^(n-1)) seconds, at
// least 1 s, at most Cap (60 s while waiting, 300 s after a failure).
// Source: KubeVela's workflow backoff time for a waiting or failed step.
type KubeVela struct {
	// Cap is the largest delay. Default 300s (KubeVelaFailedCap).
	Cap time.Duration
}

// KubeVela's workflow limits: the backoff cap while a step waits, the cap
// after it failed, and the failed retries before the workflow suspends.
const (
	KubeVelaWaitCap   = 60 * time.Second
	KubeVelaFailedCap = 300 * time.Second
	// KubeVelaMaxRetries is how many failed retries before the workflow
	// suspends (or fails, per on_failure).
	KubeVelaMaxRetries = 10
)

// Delay returns int(0.05·2^(n-1)) s floored at 1 s and capped at Cap.
func (k KubeVela) Delay(n int) time.Duration {
	limit := k.Cap
	if limit <= 0 {
		limit = KubeVelaFailedCap
	}
	if n < 1 {
		n = 1
	}
	secs := math.Floor(0.05 * math.Pow(2, float64(n-1)))
	if secs >= limit.Seconds() {
		return limit
	}
	return min(time.Duration(max(secs, 1))*time.Second, limit)
}

// Table is a fixed backoff table indexed by n, its last entry repeating.
type Table []time.Duration

// ARCTable is Actions Runner Controller's failedRunnerBackoff:
// 0, 5, 10, 20, 40, 80 s, indexed by a runner's failure count. Source:
// actions-runner-controller PR #4059, self-healing ephemeral runners.
var ARCTable = Table{0, 5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second}

// Delay returns t[n], or the last entry past the end; 0 for an empty table.
func (t Table) Delay(n int) time.Duration {
	if len(t) == 0 {
		return 0
	}
	return t[min(max(n, 0), len(t)-1)]
}
