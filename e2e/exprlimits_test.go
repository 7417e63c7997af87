package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
)

// celList is a CEL list literal of n ones.
func celList(n int) string { return "[" + strings.TrimSuffix(strings.Repeat("1,", n), ",") + "]" }

// celNested is depth comprehensions over [1, ..., 50], nested in one
// another: its estimated cost is 50^depth.
func celNested(depth int) string {
	expr := "true"
	for i := depth; i > 0; i-- {
		expr = fmt.Sprintf("%s.all(x%d, %s)", celList(50), i, expr)
	}
	return expr
}

// condSpec is a run of one noop step whose `if` is cond.
func condSpec(cond string) api.WorkflowSpec {
	return api.WorkflowSpec{Steps: []api.Step{{Name: "s", Plugin: ptr("noop"), If: &cond}}}
}

// TestExprLimits is the bound on CEL against the real api: a 10 MiB `if`
// is refused by the api's body limit (413, a problem, before any CEL);
// five nested comprehensions are refused at create (422 naming the step's
// if: the static cost estimate).
func TestExprLimits(t *testing.T) {
	t.Parallel()
	s := Start(t, bins, Options{Executors: 1})
	ctx := context.Background()
	runs := fmt.Sprintf("%s/v1/projects/%s/domains/%s/runs", s.APIURL, project, domain)

	t.Run("a 10 MiB if is refused by the body limit", func(t *testing.T) {
		body, err := json.Marshal(api.CreateRunRequest{Spec: ptr(condSpec(`"` + strings.Repeat("x", 10<<20) + `" == "y"`))})
		require.NoError(t, err)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, runs, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		s.Authorize(req)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "%s", raw)
		require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
		var p api.Problem
		require.NoError(t, json.Unmarshal(raw, &p), "%s", raw)
		require.Equal(t, http.StatusRequestEntityTooLarge, p.Status)
		t.Logf("10 MiB if: %d %s: %v", p.Status, p.Code, deref(p.Detail))
	})

	t.Run("five nested comprehensions are refused at create", func(t *testing.T) {
		resp, err := s.Client.CreateRunWithResponse(ctx, project, domain, nil, api.CreateRunRequest{Spec: ptr(condSpec(celNested(5)))})
		require.NoError(t, err)
		require.NotNil(t, resp.ApplicationproblemJSON422, "%d %s", resp.StatusCode(), resp.Body)
		p := resp.ApplicationproblemJSON422
		require.NotNil(t, p.Errors)
		require.Equal(t, "spec.steps[0].if", (*p.Errors)[0].Field)
		require.Contains(t, (*p.Errors)[0].Message, "may cost")
	})
}

// TestExprMemory: 1,000 distinct `if` expressions near 4 KiB are each
// accepted (and decided by the scheduler) or refused, while what the
// scheduler — a release build, as deployed: the race detector's shadow
// memory would multiply what it holds — holds stays within 50 MiB of what
// it held before them: its heap after a collection (HeapAlloc, read over
// pprof with gc=1). Its resident memory is logged: each compilation of
// such an expression makes about 2 MB of garbage, which the collector
// (GOGC=400, a 100 MiB soft limit: pkg/svc) lets pile up towards its soft
// limit, so the peak is checked against that limit, not 50 MiB.
func TestExprMemory(t *testing.T) {
	t.Parallel()
	root, err := RepoRoot()
	require.NoError(t, err)
	release, err := WithRelease(root, t.TempDir(), bins, "scheduler")
	require.NoError(t, err)
	pprof := fmt.Sprintf("127.0.0.1:%d", FreePort(t))
	s := Start(t, release, Options{Executors: 1, ServiceEnv: func(name string) []string {
		if name == "scheduler" {
			return []string{"CAPSTAN_PPROF_ADDR=" + pprof}
		}
		return nil
	}})
	testManyLargeConditions(t, s, pprof, 1000)
}

// heapAfterGC is the heap (runtime.MemStats.HeapAlloc, bytes) of the
// process serving pprof at addr, right after the collection its heap
// profile runs first (gc=1).
func heapAfterGC(t *testing.T, addr string) int64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap?gc=1&debug=1")
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(raw), "\n# HeapAlloc = ")
	require.True(t, ok, "no HeapAlloc in the heap profile")
	n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, '\n')], 10, 64)
	require.NoError(t, err)
	return n
}

// largeCondition is the i-th of many distinct `if` expressions near 4 KiB:
// every tenth one nests five comprehensions (refused), the others are
// false (their step is SKIPPED, their run SUCCEEDED).
func largeCondition(i int) (cond string, refused bool) {
	head := fmt.Sprintf(`"%04d" == "x"`, i)
	if i%10 == 0 {
		return head + " || " + celNested(5) + strings.Repeat(" ", 4000-len(head)-4-len(celNested(5))), true
	}
	return head + strings.Repeat(" || run.failed", (4000-len(head))/len(" || run.failed")), false
}

// testManyLargeConditions creates n runs whose `if` is largeCondition,
// from 4 clients, and checks each answer (201, or 422 for a refused one),
// that the scheduler decides every accepted run (SUCCEEDED, its step
// SKIPPED), the scheduler's heap after a collection (over its pprof at
// addr) against the one before, and its peak resident memory against its
// collector's soft limit.
func testManyLargeConditions(t *testing.T, s *Stack, pprof string, n int) {
	ctx := context.Background()
	db, err := sql.Open("pgx", s.DBURL)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	sched := s.Proc("scheduler").Cmd.Process.Pid
	warm := create(t, s, condSpec(`"warm" == "x" || run.failed`)) // the CEL environment and its paths loaded
	waitPhase(t, s, warm, 30*time.Second, api.PhaseSUCCEEDED)
	baseRSS, ok := vmRSS(sched)
	require.True(t, ok)
	baseHeap := heapAfterGC(t, pprof)

	var accepted, refused atomic.Int32
	next, failed := make(chan int), make(chan string, n)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range next {
				cond, wantRefused := largeCondition(i)
				resp, err := s.Client.CreateRunWithResponse(ctx, project, domain, nil,
					api.CreateRunRequest{Name: ptr(fmt.Sprintf("large-%04d", i)), Spec: ptr(condSpec(cond))})
				switch {
				case err != nil:
					failed <- fmt.Sprintf("%d: %v", i, err)
				case wantRefused && resp.StatusCode() == http.StatusUnprocessableEntity:
					refused.Add(1)
				case !wantRefused && resp.StatusCode() == http.StatusCreated:
					accepted.Add(1)
				default:
					failed <- fmt.Sprintf("%d (%d bytes, refused %t): %d %s", i, len(cond), wantRefused, resp.StatusCode(), resp.Body)
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(failed)
	for f := range failed {
		t.Error(f)
	}
	require.Equal(t, int32(n), accepted.Load()+refused.Load())
	s.Eventually(5*time.Minute, "every accepted run decided", func() bool {
		var done int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM runs WHERE name LIKE 'large-%' AND phase = 'SUCCEEDED'`).Scan(&done))
		return done == int(accepted.Load())
	})
	run := getRun(t, s, "large-0001")
	require.Equal(t, api.PhaseSKIPPED, action(run, "s").Phase)

	peak, ok := vmHWM(sched)
	require.True(t, ok)
	heap := heapAfterGC(t, pprof)
	t.Logf("scheduler: heap after a collection %.1f MiB before, %.1f MiB after; RSS %.1f MiB before, peak %.1f MiB "+
		"(%d accepted, %d refused)", float64(baseHeap)/(1<<20), float64(heap)/(1<<20), float64(baseRSS)/1024,
		float64(peak)/1024, accepted.Load(), refused.Load())
	require.LessOrEqual(t, heap-baseHeap, int64(50<<20), "what the scheduler holds grows by 50 MiB at most")
	require.LessOrEqual(t, peak-baseRSS, int64(100<<10), "its resident memory within its collector's soft limit")
}
