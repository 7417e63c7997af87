package domain

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The cache holds what its byte budget allows, charging each expression by
// its length, and evicts the least recently used first.
func TestExprCacheEvictsByBytes(t *testing.T) {
	t.Parallel()
	key := func(i int) string { return fmt.Sprintf("%d:%s", i, strings.Repeat("x", 1000)) }
	one := exprHeap(key(0))
	c := newExprCache(3 * one)
	for i := range 3 {
		c.put(key(i), i)
	}
	n, used := c.size()
	require.Equal(t, 3, n)
	require.Equal(t, 3*one, used)
	_, ok := c.get(key(0)) // 0 is now the most recently used: 1 goes first
	require.True(t, ok)
	c.put(key(3), 3)
	_, ok = c.get(key(1))
	require.False(t, ok, "the least recently used was evicted")
	for _, i := range []int{0, 2, 3} {
		v, ok := c.get(key(i))
		require.True(t, ok, "key %d", i)
		require.Equal(t, i, v)
	}
	n, used = c.size()
	require.Equal(t, 3, n)
	require.LessOrEqual(t, used, 3*one)

	c.put(strings.Repeat("y", 10*int(one)), "huge") // larger than the whole budget: kept by none
	n, used = c.size()
	require.Zero(t, n)
	require.Zero(t, used)
}

// Compiling and evaluating 200 distinct expressions near MaxExprBytes
// (about 140 KiB of heap each), as a scheduler fed them does, leaves the
// shared cache within exprCacheBytes (about 50 of them; a bound on the
// count alone would keep them all), and the heap the package holds
// afterwards grows by no more than the cache's bound: its estimate is an
// upper bound. (The e2e TestExprMemory feeds a scheduler 1,000.) It measures the heap, so it does not
// run in parallel.
func TestExprCacheBoundsLargeExpressions(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 200 {
		expr := fmt.Sprintf("params.x == %d", i) + strings.Repeat(" || params.y == 1", 230)
		require.Greater(t, len(expr), 3900)
		c, err := CompileCondition(expr)
		require.NoError(t, err)
		ok, err := c.Eval(CondVars{Params: map[string]any{"x": 1, "y": 0}})
		require.NoError(t, err)
		require.Equal(t, i == 1, ok)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	n, used := exprs.size()
	require.LessOrEqual(t, used, int64(exprCacheBytes))
	require.Less(t, n, 60)
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("200 expressions of 3,923 bytes: %d cached, charged %.1f MiB; heap %.1f MiB → %.1f MiB (%+.1f MiB)",
		n, float64(used)/(1<<20), float64(before.HeapAlloc)/(1<<20), float64(after.HeapAlloc)/(1<<20), float64(grown)/(1<<20))
	require.LessOrEqual(t, grown, int64(exprCacheBytes), "the heap held grows by at most the cache's bound")
}

// expiredCtx is a context whose deadline passed, as an evaluation sees it
// when the deadline passes while it runs: the first Err (the budget's check
// before it starts) is nil, and its comprehension finds Done closed.
type expiredCtx struct {
	context.Context
	errs int
}

func (c *expiredCtx) Done() <-chan struct{} {
	done := make(chan struct{})
	close(done)
	return done
}

func (c *expiredCtx) Err() error {
	if c.errs++; c.errs == 1 {
		return nil
	}
	return context.DeadlineExceeded
}

// An evaluation past the decision's deadline is interrupted inside its
// comprehension (long before its cost limit), and one that would start
// after it fails at once.
func TestExprBudgetDeadline(t *testing.T) {
	t.Parallel()
	c, err := CompileCondition("params.l.all(a, params.l.all(b, a + b >= 0))")
	require.NoError(t, err)
	l := make([]any, 300)
	for i := range l {
		l[i] = float64(i)
	}
	b := exprBudget{ctx: &expiredCtx{Context: context.Background()}, cancel: func() {}}
	_, err = c.eval(&b, CondVars{Params: map[string]any{"l": l}})
	require.ErrorIs(t, err, ErrExprLimit)
	require.ErrorContains(t, err, "ran past 100ms together")
	require.Less(t, b.spent, uint64(MaxExprCost), "interrupted before its cost limit")
	c, err = CompileCondition("true")
	require.NoError(t, err)
	_, err = c.eval(&b, CondVars{})
	require.ErrorContains(t, err, "ran past", "a cheap expression after the deadline fails too")

	var fresh exprBudget // a real deadline: the budget's own timer
	defer fresh.done()
	_, err = c.eval(&fresh, CondVars{})
	require.NoError(t, err)
	deadline, ok := fresh.ctx.Deadline()
	require.True(t, ok)
	require.WithinDuration(t, time.Now().Add(MaxBatchTime), deadline, MaxBatchTime)
}
