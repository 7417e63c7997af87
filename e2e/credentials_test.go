package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	dom "github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/pkg/workerkey"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// Each worker's own secrets, against real services: a worker anyone with
// a worker token registers learns nothing that opens another worker's
// executor, and a spec forged in Redis runs nothing.

// fakeWorker is an executor API registered as a worker by whoever holds a
// worker token: it records every call it gets and answers each abort that
// it holds no such attempt.
type fakeWorker struct {
	srv *httptest.Server
	// id, token, credential and dispatchKey are what its registration
	// answered.
	id, token, credential, dispatchKey string

	mu    sync.Mutex
	calls []fakeCall
}

// fakeCall is one request a fakeWorker got.
type fakeCall struct{ path, auth string }

// registerFakeWorker starts a fake executor API on loopback (inside the
// default worker networks) and registers it with the worker token and
// labels.
func registerFakeWorker(t *testing.T, s *Stack, labels map[string]string) *fakeWorker {
	t.Helper()
	f := &fakeWorker{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.calls = append(f.calls, fakeCall{path: r.URL.Path, auth: r.Header.Get("Authorization")})
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"type":"about:blank","title":"Not Found","status":404,"code":"attempt_not_found"}`)
	}))
	t.Cleanup(f.srv.Close)
	body, err := json.Marshal(workerapi.RegisterWorkerRequest{Name: "fake", Address: f.srv.URL, Slots: ptr(1), Labels: &labels})
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, s.APIURL+"/v1/workers", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+s.WorkerToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var w api.Worker
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&w))
	require.NotNil(t, w.Token)
	require.NotNil(t, w.ExecutorCredential)
	require.NotNil(t, w.DispatchKey)
	f.id, f.token, f.credential, f.dispatchKey = w.Id, *w.Token, *w.ExecutorCredential, *w.DispatchKey
	return f
}

func (f *fakeWorker) received() []fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeCall{}, f.calls...)
}

// postAbort POSTs an abort of attempt id to the executor at address with
// bearer secret, and returns the status.
func postAbort(t *testing.T, address string, id int64, secret string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/v1/attempts/%d/abort", address, id), strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// pool is a step constraint: only workers labeled pool=name take it.
func pool(name string) *[]api.Constraint {
	return &[]api.Constraint{{Key: "pool", Op: "EQ", Value: ptr(name)}}
}

// TestFakeWorkerGetsNoOtherWorkersCredential: a fake worker registered with
// the worker token at a loopback address is answered its own credential
// only. When a task on the real worker and one placed on the fake are
// aborted, the fake is called with its own credential alone, never the
// real worker's, and about its own attempt alone; the real executor, which
// the abort reached, refuses the fake's credential and token; GET
// /v1/workers shows no secret.
func TestFakeWorkerGetsNoOtherWorkersCredential(t *testing.T) {
	t.Parallel()
	s := Start(t, bins, Options{Executors: 1, Env: []string{"CAPSTAN_WORKER_GRACE=30s"}, // the fake never heartbeats
		ExecutorEnv: func(int) []string { return []string{"CAPSTAN_EXECUTOR_LABELS=pool=real"} }})
	real := workerID(t, s, 1)
	realAddr := workerByID(t, s, real).Address
	fake := registerFakeWorker(t, s, map[string]string{"pool": "fake"})
	require.Equal(t, s.ExecutorCredential(fake.id), fake.credential)
	realCredential := s.ExecutorCredential(real)
	require.NotEqual(t, realCredential, fake.credential)

	bait := create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "s", Command: ptr("true"), Constraints: pool("fake")}}})
	victim := create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "s", Command: ptr("sleep 600"), Constraints: pool("real")}}})
	var baitAttempt, victimAttempt api.Attempt
	s.Eventually(30*time.Second, "bait ASSIGNED on the fake, victim RUNNING on the real worker", func() bool {
		b, v := stepTasks(t, s, bait, "s"), stepTasks(t, s, victim, "s")
		if len(b) != 1 || len(v) != 1 || len(b[0].Attempts) != 1 || len(v[0].Attempts) != 1 {
			return false
		}
		baitAttempt, victimAttempt = b[0].Attempts[0], v[0].Attempts[0]
		return *baitAttempt.WorkerId == fake.id && baitAttempt.State == api.TaskStateASSIGNED &&
			*victimAttempt.WorkerId == real && victimAttempt.State == api.TaskStateRUNNING
	})
	executorLog, err := os.ReadFile(s.Proc("executor-1").Log)
	require.NoError(t, err)
	require.NotContains(t, string(executorLog), "dispatch refused", "the scheduler's own dispatch verifies")

	abortRun(t, s, bait, "test: abort the fake's attempt")
	abortRun(t, s, victim, "test: abort the real worker's attempt")
	waitOutcome(t, s, bait, 30*time.Second, "delivered")
	waitOutcome(t, s, victim, 30*time.Second, "delivered")
	s.Eventually(30*time.Second, "the victim's attempt KILLED by its executor", func() bool {
		return stepTasks(t, s, victim, "s")[0].Attempts[0].State == api.TaskStateKILLED
	})

	calls := fake.received()
	require.NotEmpty(t, calls, "the abort of its own attempt reached the fake")
	for _, c := range calls {
		require.Equal(t, "Bearer "+fake.credential, c.auth, "the fake gets its own credential only")
		require.NotContains(t, c.auth, realCredential)
		require.Equal(t, fmt.Sprintf("/v1/attempts/%d/abort", baitAttempt.Id), c.path, "and only its own attempt's abort")
	}

	for _, secret := range []string{fake.credential, fake.token, s.WorkerToken} {
		require.Equal(t, http.StatusUnauthorized, postAbort(t, realAddr, victimAttempt.Id, secret),
			"the real executor takes nothing the fake holds")
	}
	require.Equal(t, http.StatusNotFound, postAbort(t, realAddr, victimAttempt.Id, realCredential),
		"its own credential: the attempt is gone")

	req, err := http.NewRequest(http.MethodGet, s.APIURL+"/v1/workers", nil)
	require.NoError(t, err)
	s.Authorize(req)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	list, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	for _, secret := range []string{realCredential, fake.credential, fake.dispatchKey, fake.token,
		workerkey.EncodeDispatchKey(s.ControlPlaneKey.DispatchKey(real))} {
		require.NotContains(t, string(list), secret[len(secret)-20:], "GET /v1/workers shows no secret")
	}
}

// TestForgedDispatchRunsNothing: with the real executor stopped (SIGSTOP),
// its attempt's dispatch is taken off its Redis queue and replaced by
// forged messages that name the attempt with a spec of another command:
// one signed under the dispatch key of a fake worker (which anyone with a
// worker token can register), one with a made-up MAC. Continued, the
// executor consumes them and runs nothing: no process, the attempt still
// ASSIGNED, no report. The scheduler's resync dispatches it again by id,
// and its own command runs.
func TestForgedDispatchRunsNothing(t *testing.T) {
	t.Parallel()
	s := Start(t, bins, Options{Executors: 1, Env: []string{
		"CAPSTAN_WORKER_GRACE=30s",     // placeable while stopped
		"CAPSTAN_DISPATCH_GRACE=10s"}}) // the resync's re-dispatch comes well after the checks
	real := workerID(t, s, 1)
	fake := registerFakeWorker(t, s, map[string]string{"pool": "fake"})
	dir := s.SharedDir()
	forgedMarker, realMarker := filepath.Join(dir, "forged"), filepath.Join(dir, "real")
	q := queue.WorkerQueue(real)
	insp := asynq.NewInspector(s.RedisOpt())
	t.Cleanup(func() { insp.Close() })

	proc := s.Proc("executor-1")
	require.NoError(t, proc.Cmd.Process.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { _ = proc.Cmd.Process.Signal(syscall.SIGCONT) })
	name := create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "s", Command: ptr("touch " + realMarker),
		Constraints: &[]api.Constraint{{Key: "pool", Op: "NOT_EXISTS"}}}}})
	var attempt api.Attempt
	s.Eventually(30*time.Second, "the attempt ASSIGNED on the stopped executor and dispatched", func() bool {
		tasks := stepTasks(t, s, name, "s")
		if len(tasks) != 1 || len(tasks[0].Attempts) != 1 {
			return false
		}
		attempt = tasks[0].Attempts[0]
		pending, err := insp.ListPendingTasks(q)
		return err == nil && len(pending) == 1 && attempt.State == api.TaskStateASSIGNED
	})
	require.Equal(t, real, *attempt.WorkerId)
	pending, err := insp.ListPendingTasks(q)
	require.NoError(t, err)
	require.NoError(t, insp.DeleteTask(q, pending[0].ID), "the real dispatch is gone")

	spec := workerapi.AttemptSpec{Id: attempt.Id, Number: attempt.Number, Project: project, Domain: domain, Run: name,
		Action: "s", Replicas: 1, Plugin: dom.PluginShell, Command: "touch " + forgedMarker, Env: map[string]string{},
		State: api.TaskStateASSIGNED, WorkerId: &real, Proceed: true}
	fakeKey, err := workerkey.DecodeDispatchKey(fake.dispatchKey)
	require.NoError(t, err)
	underFakeKey, err := queue.SignSpec(fakeKey, spec)
	require.NoError(t, err)
	madeUp := underFakeKey
	madeUp.MAC = make([]byte, 32)
	_, _ = rand.Read(madeUp.MAC)
	client := asynq.NewClient(s.RedisOpt())
	t.Cleanup(func() { client.Close() })
	forged := []string{"forged-fake-key", "forged-made-up"}
	for i, signed := range []queue.SignedSpec{underFakeKey, madeUp} {
		payload, err := json.Marshal(queue.AttemptPayload{AttemptID: attempt.Id, Spec: &signed})
		require.NoError(t, err)
		_, err = client.Enqueue(asynq.NewTask(queue.TypeAttemptRun, payload), asynq.Queue(q), asynq.TaskID(forged[i]))
		require.NoError(t, err)
	}
	// The wake-up of the real dispatch may have been popped by the stopped
	// consumer already; what is left of it goes too.
	rc := redis.NewClient(&redis.Options{Addr: s.RedisAddr, DB: s.RedisDB})
	t.Cleanup(func() { rc.Close() })
	require.NoError(t, rc.Del(context.Background(), queue.WakeKey(q)).Err())

	require.NoError(t, proc.Cmd.Process.Signal(syscall.SIGCONT))
	s.Eventually(15*time.Second, "the forged messages consumed", func() bool {
		for _, id := range forged {
			if _, err := insp.GetTaskInfo(q, id); !errors.Is(err, asynq.ErrTaskNotFound) {
				return false
			}
		}
		return true
	})
	s.Eventually(5*time.Second, "the executor refused both", func() bool {
		b, err := os.ReadFile(proc.Log)
		return err == nil && strings.Count(string(b), "dispatch refused") == 2
	})
	run := getRun(t, s, name)
	got := action(run, "s").Tasks[0]
	require.Len(t, got.Attempts, 1)
	require.Equal(t, api.TaskStateASSIGNED, got.Attempts[0].State, "the attempt did not move")
	require.Equal(t, attempt.Number, got.Attempts[0].Number)
	require.NoFileExists(t, forgedMarker, "no process ran")

	waitPhase(t, s, name, 60*time.Second, api.PhaseSUCCEEDED)
	require.FileExists(t, realMarker, "the resync's dispatch ran the attempt's own command")
	require.NoFileExists(t, forgedMarker)
	tasks := stepTasks(t, s, name, "s")
	require.Len(t, tasks[0].Attempts, 1, "the same attempt, never started before")
}
