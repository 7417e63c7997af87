package reconciler

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/executorapi"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
)

func TestWorkerGone(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	grace := 10 * time.Second
	str := func(s string) *string { return &s }
	at := func(d time.Duration) *time.Time { ts := now.Add(-d); return &ts }
	live := store.LiveAttempt{ID: 1, Address: str("http://w:9090"), WorkerState: str(store.WorkerAlive), LastHeartbeatAt: at(time.Second)}
	for name, tc := range map[string]struct {
		edit func(*store.LiveAttempt)
		want bool
	}{
		"alive, fresh heartbeat -> called":        {func(*store.LiveAttempt) {}, false},
		"heartbeat exactly grace old -> called":   {func(a *store.LiveAttempt) { a.LastHeartbeatAt = at(grace) }, false},
		"heartbeat older than grace -> dead":      {func(a *store.LiveAttempt) { a.LastHeartbeatAt = at(grace + time.Millisecond) }, true},
		"state dead -> dead":                      {func(a *store.LiveAttempt) { a.WorkerState = str(store.WorkerDead) }, true},
		"worker row deleted (no address) -> gone": {func(a *store.LiveAttempt) { a.Address, a.WorkerState, a.LastHeartbeatAt = nil, nil, nil }, true},
		"empty address -> gone":                   {func(a *store.LiveAttempt) { a.Address = str("") }, true},
		"no heartbeat recorded -> dead":           {func(a *store.LiveAttempt) { a.LastHeartbeatAt = nil }, true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a := live
			tc.edit(&a)
			require.Equal(t, tc.want, workerGone(a, now, grace))
		})
	}
}

// Already terminated is Flyte's isAlreadyTerminated — "connectErr.Code() ==
// connect.CodeNotFound", or "connectErr.Code() == connect.CodeInternal &&
// strings.Contains(connectErr.Message(), "not found")" — over the executor
// API's problems, plus the executor's own attempt_not_found. Nothing else:
// a 404 of a server that is no executor must not end a live attempt.
func TestIsAlreadyTerminated(t *testing.T) {
	t.Parallel()
	p := func(code, detail string) *executorapi.Problem {
		return &executorapi.Problem{Title: "t", Code: code, Detail: &detail}
	}
	for name, tc := range map[string]struct {
		resp executorapi.AbortAttemptResponse
		want bool
	}{
		"200 is a kill, not already terminated":                     {resp(200, nil, ""), false},
		"404 attempt_not_found: the executor holds no such attempt": {resp(404, p("attempt_not_found", "no attempt 7"), ""), true},
		"404 not_found: Flyte's CodeNotFound":                       {resp(404, p("not_found", ""), ""), true},
		"404 without a problem: some other server's page":           {resp(404, nil, "404 page not found"), false},
		"404 problem of another code: not the executor's answer":    {resp(404, p("route_missing", "not found"), ""), false},
		"500 internal whose message says not found: Flyte's CodeInternal": {resp(500, p("internal",
			"kill: process group 12 not found"), ""), true},
		"500 internal, Not Found in another case: Flyte's check is exact": {resp(500, p("internal", "pod Not Found"), ""), false},
		"500 of another code saying not found: not internal":              {resp(500, p("kill_failed", "group not found"), ""), false},
		"500 internal, not found only in the title: not the message": {resp(500, &executorapi.Problem{Title: "not found",
			Code: "internal"}, ""), false},
		"500 attempt_not_found: not documented there":                 {resp(500, p("attempt_not_found", ""), ""), false},
		"500 plain body says not found: no problem":                   {resp(500, nil, "not found"), false},
		"500 other error -> failure":                                  {resp(500, p("internal", "permission denied"), ""), false},
		"502 says not found -> failure (only 500 forwards not-found)": {resp(502, nil, "not found"), false},
		"400 -> failure": {resp(400, nil, ""), false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, isAlreadyTerminated(&tc.resp))
		})
	}
}

func resp(status int, p *executorapi.Problem, body string) executorapi.AbortAttemptResponse {
	r := executorapi.AbortAttemptResponse{HTTPResponse: &http.Response{StatusCode: status}, Body: []byte(body)}
	switch status {
	case 404:
		r.ApplicationproblemJSON404 = p
	case 500:
		r.ApplicationproblemJSON500 = p
	}
	return r
}

func TestTruncate(t *testing.T) {
	t.Parallel()
	require.Equal(t, "abc", truncate("abc", 3))
	require.Equal(t, "ab", truncate("abc", 2))
	require.Equal(t, "éé", truncate("ééé", 2))
	require.Len(t, []rune(truncate(strings.Repeat("ü", 1500), maxReasonRunes)), maxReasonRunes)
}

func TestRetryErrorAndAsynqHooks(t *testing.T) {
	t.Parallel()
	re := &RetryError{Delay: 3 * time.Second, Attempt: 2, Err: errors.New("boom")}
	wrapped := fmt.Errorf("handler: %w", re)
	require.True(t, IsRetry(wrapped))
	require.False(t, isFailure(wrapped), "a scheduled retry must not count toward asynq's MaxRetry")
	require.True(t, isFailure(errors.New("panic")))
	require.False(t, IsRetry(asynq.SkipRetry))
	delay := retryDelay(domain.FullJitter{Initial: time.Second, Max: time.Minute})
	require.Equal(t, 3*time.Second, delay(7, wrapped, nil), "the typed error's delay wins over asynq's count")
	require.LessOrEqual(t, delay(0, errors.New("panic"), nil), time.Second)
	require.ErrorContains(t, re, "abort attempt 2 failed, retry in 3s: boom")
}

func TestConfig(t *testing.T) {
	t.Parallel()
	c := Config{}.withDefaults()
	require.NoError(t, c.validate())
	require.Equal(t, Config{Queue: queue.Abort, SchedulerQueue: queue.Scheduler, Workers: 5, MaxAttempts: 10, InitialDelay: time.Second,
		MaxDelay: 5 * time.Minute, ResyncPeriod: 5 * time.Minute, CallTimeout: 10 * time.Second, CallConcurrency: 32,
		WorkerGrace: 5 * time.Second, DelayedTaskCheckInterval: 100 * time.Millisecond,
		TaskCheckInterval: 100 * time.Millisecond}, c)
	require.Equal(t, 15, Config{}.TaskMaxRetry())
	require.Equal(t, 8, Config{MaxAttempts: 3}.TaskMaxRetry())

	bad := Config{Workers: -1, InitialDelay: time.Minute, MaxDelay: time.Second}.withDefaults()
	err := bad.validate()
	require.ErrorContains(t, err, "Workers must be positive")
	require.ErrorContains(t, err, "MaxDelay (1s) must not be below InitialDelay (1m0s)")
	_, err = New(Deps{}, Config{})
	require.ErrorContains(t, err, "required")
}

func TestDueTimes(t *testing.T) {
	t.Parallel()
	var d dueTimes
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	require.Zero(t, d.remaining("a", now), "unknown: due")
	d.set("a", now.Add(300*time.Millisecond))
	d.set("b", now.Add(-2*time.Minute))
	require.Equal(t, 300*time.Millisecond, d.remaining("a", now))
	require.Equal(t, 300*time.Millisecond, d.remaining("a", now), "remembered until due")
	require.Zero(t, d.remaining("a", now.Add(300*time.Millisecond-dueSlack)), "within the slack: due")
	require.Zero(t, d.remaining("a", now), "forgotten once due")
	d.set("a", now.Add(time.Second))
	d.prune(now.Add(-time.Minute))
	require.Equal(t, time.Second, d.remaining("a", now), "pruning keeps what is still to come")
	require.Len(t, d.at, 1, "b was due long ago: pruned")
}
