package server

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// controlFixture is a fixture with its database also open with
// database/sql, to set up what only the scheduler writes (an approval step
// that waits, a failed run) and to read the recorded columns and events.
type controlFixture struct {
	*fixture
	db *sql.DB
}

func newControlFixture(t *testing.T) *controlFixture {
	t.Helper()
	dsn := storetest.NewURL(t)
	st, err := store.Open(context.Background(), dsn, store.Config{MaxOpenConns: 4})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	db, err := sql.Open("pgx", dsn) // registered by storetest
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	rdb := redistest.New(t)
	client := asynq.NewClient(rdb)
	t.Cleanup(func() { client.Close() })
	e := New(Deps{Store: st, Enqueuer: queue.NewEnqueuer(client, slog.New(slog.DiscardHandler)),
		Log: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry(),
		Ready: func(context.Context) error { return nil }}, Config{AdminToken: testAdminToken})
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &controlFixture{fixture: &fixture{srv: srv, store: st, redis: rdb}, db: db}
}

// startedRun creates a run of two task steps, a then b, and starts a.
func (f *controlFixture) startedRun(t *testing.T) domain.RunKey {
	t.Helper()
	name := "r-" + uuid.NewString()[:8]
	status, _, body := f.do(t, http.MethodPost, runsPath,
		`{"name":"`+name+`","spec":{"steps":[{"name":"a","command":"sleep 600"},{"name":"b","command":"true"}]}}`)
	require.Equal(t, http.StatusCreated, status, body)
	key := domain.RunKey{Project: "demo", Domain: "dev", Run: name}
	storetest.StartSteps(t, f.store, key, "a")
	return key
}

// waitForApproval makes step name an approval step that waits, as the
// scheduler leaves one.
func (f *controlFixture) waitForApproval(t *testing.T, key domain.RunKey, name string) {
	t.Helper()
	_, err := f.db.Exec(`UPDATE actions SET kind = 'approval', phase = 'PAUSED', waiting_for = 'approval',
		paused_at = now() WHERE project = $1 AND domain = $2 AND run_name = $3 AND name = $4`,
		key.Project, key.Domain, key.Run, name)
	require.NoError(t, err)
}

// events returns the types of the run's run_events rows, oldest first.
func (f *controlFixture) events(t *testing.T, key domain.RunKey) []string {
	t.Helper()
	rows, err := f.db.Query(`SELECT type FROM run_events WHERE project = $1 AND domain = $2 AND run_name = $3
		ORDER BY id`, key.Project, key.Domain, key.Run)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var typ string
		require.NoError(t, rows.Scan(&typ))
		out = append(out, typ)
	}
	require.NoError(t, rows.Err())
	return out
}

// advances counts the run:advance tasks pushed for key.
func (f *controlFixture) advances(t *testing.T, key domain.RunKey) int {
	t.Helper()
	insp := asynq.NewInspector(f.redis)
	defer insp.Close()
	tasks, err := insp.ListPendingTasks(queue.Scheduler, asynq.PageSize(1000))
	require.NoError(t, err)
	n := 0
	for _, ti := range tasks {
		var p queue.RunPayload
		if ti.Type == queue.TypeRunAdvance && json.Unmarshal(ti.Payload, &p) == nil && p.Key() == key {
			n++
		}
	}
	return n
}

func runPath(key domain.RunKey) string { return runsPath + "/" + key.Run }

// Suspend and resume record their intent (suspended shows at once, the
// phase is the scheduler's), write their events and push the run's
// advance; an ended run answers 409 already_terminal, an unknown one 404.
func TestSuspendAndResumeRun(t *testing.T) {
	t.Parallel()
	f := newControlFixture(t)
	key := f.startedRun(t)

	status, _, run := f.do(t, http.MethodPost, runPath(key)+"/suspend", "")
	require.Equal(t, http.StatusAccepted, status, run)
	require.Equal(t, true, run["suspended"])
	require.Equal(t, "RUNNING", run["phase"])
	require.Equal(t, 1, f.advances(t, key))
	got, err := f.store.Runs().GetRun(context.Background(), key)
	require.NoError(t, err)
	require.NotNil(t, got.Run.SuspendRequestedAt)

	status, _, run = f.do(t, http.MethodPost, runPath(key)+"/resume", `{}`)
	require.Equal(t, http.StatusAccepted, status, run)
	require.Equal(t, false, run["suspended"])
	require.Equal(t, 2, f.advances(t, key))
	got, err = f.store.Runs().GetRun(context.Background(), key)
	require.NoError(t, err)
	require.Nil(t, got.Run.SuspendRequestedAt)
	require.NotNil(t, got.Run.ResumeRequestedAt)
	require.Subset(t, f.events(t, key), []string{"run.suspend_requested", "run.resume_requested"})

	status, _, p := f.do(t, http.MethodPost, runPath(key)+"/suspend", `{"why":"x"}`)
	require.Equal(t, http.StatusBadRequest, status, p)

	status, _, p = f.do(t, http.MethodPost, runPath(key)+"/abort", "")
	require.Equal(t, http.StatusAccepted, status, p)
	for _, op := range []string{"suspend", "resume"} {
		status, hdr, p := f.do(t, http.MethodPost, runPath(key)+"/"+op, "")
		require.Equal(t, http.StatusConflict, status, p)
		require.Equal(t, "application/problem+json", hdr.Get("Content-Type"))
		require.Equal(t, "already_terminal", p["code"], op)
		require.Contains(t, p["detail"], "nothing to "+op)
		status, _, p = f.do(t, http.MethodPost, runsPath+"/ghost/"+op, "")
		require.Equal(t, http.StatusNotFound, status, p)
		require.Equal(t, "not_found", p["code"])
	}
}

// Approve and reject record the decision with who, when and the comment
// on an approval step that waits, show it as the action's approval, and
// push the run's advance; anything else is 409 not_waiting_for_approval.
func TestApproveAndRejectAction(t *testing.T) {
	t.Parallel()
	f := newControlFixture(t)
	key := f.startedRun(t)
	f.waitForApproval(t, key, "b")

	status, _, p := f.do(t, http.MethodPost, runPath(key)+"/actions/a/approve", "")
	require.Equal(t, http.StatusConflict, status, p)
	require.Equal(t, "not_waiting_for_approval", p["code"])

	before := time.Now()
	status, _, a := f.do(t, http.MethodPost, runPath(key)+"/actions/b/approve", `{"comment":"ship it","by":"ann"}`)
	require.Equal(t, http.StatusAccepted, status, a)
	require.Equal(t, "PAUSED", a["phase"], "the scheduler ends the step")
	require.Equal(t, "approval", a["kind"])
	require.Equal(t, "approval", a["waiting_for"])
	require.NotEmpty(t, a["paused_at"])
	require.EqualValues(t, 0, a["step_retries"])
	require.EqualValues(t, 0, a["generation"])
	ap := a["approval"].(map[string]any)
	require.Equal(t, "approved", ap["decision"])
	require.Equal(t, "ann", ap["by"])
	require.Equal(t, "ship it", ap["comment"])
	at, err := time.Parse(time.RFC3339Nano, ap["at"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, before, at, time.Minute)
	require.Equal(t, 1, f.advances(t, key))
	require.Contains(t, f.events(t, key), "action.approved")

	status, _, p = f.do(t, http.MethodPost, runPath(key)+"/actions/b/reject", `{"comment":"too late"}`)
	require.Equal(t, http.StatusConflict, status, p)
	require.Equal(t, "not_waiting_for_approval", p["code"], "already decided")

	other := f.startedRun(t)
	f.waitForApproval(t, other, "b")
	status, _, a = f.do(t, http.MethodPost, runPath(other)+"/actions/b/reject", "")
	require.Equal(t, http.StatusAccepted, status, a)
	ap = a["approval"].(map[string]any)
	require.Equal(t, "rejected", ap["decision"])
	require.Nil(t, ap["by"], "no label given")
	require.Equal(t, "admin", ap["token_id"], "the token that decided: the bootstrap admin's")
	require.Equal(t, "admin", ap["token_name"])
	require.Contains(t, f.events(t, other), "action.rejected")

	status, _, got := f.do(t, http.MethodGet, runPath(key), "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "approved", got["actions"].([]any)[2].(map[string]any)["approval"].(map[string]any)["decision"])
	require.EqualValues(t, 0, got["actions"].([]any)[1].(map[string]any)["tasks"].([]any)[0].(map[string]any)["generation"])

	for _, path := range []string{runPath(key) + "/actions/nope/approve", runsPath + "/ghost/actions/b/reject"} {
		status, _, p = f.do(t, http.MethodPost, path, "")
		require.Equal(t, http.StatusNotFound, status, p)
	}
	status, _, p = f.do(t, http.MethodPost, runPath(key)+"/actions/b/approve", `{"by":"ann","role":"admin"}`)
	require.Equal(t, http.StatusBadRequest, status, p)
}

// An approval and a rejection are recorded as the authenticated token's
// (its id and name, in the action's approval and the event), whatever the
// request's by says: by is kept as an unchecked label.
func TestApprovalRecordsTheTokensIdentity(t *testing.T) {
	t.Parallel()
	f := newControlFixture(t)
	status, _, tok := f.do(t, http.MethodPost, "/v1/tokens", `{"name":"ci-deployer","role":"writer"}`)
	require.Equal(t, http.StatusCreated, status, tok)
	id, secret := tok["id"].(string), tok["token"].(string)

	for _, decision := range []string{"approve", "reject"} {
		key := f.startedRun(t)
		f.waitForApproval(t, key, "b")
		status, _, a := f.doAs(t, secret, http.MethodPost, runPath(key)+"/actions/b/"+decision,
			`{"by":"token:admin","comment":"as someone else"}`)
		require.Equal(t, http.StatusAccepted, status, a)
		ap := a["approval"].(map[string]any)
		require.Equal(t, id, ap["token_id"], "the caller's token, not the by it claims")
		require.Equal(t, "ci-deployer", ap["token_name"])
		require.Equal(t, "token:admin", ap["by"], "kept as a label")

		act, err := f.store.Actions().GetAction(context.Background(), key.Action("b"))
		require.NoError(t, err)
		require.Equal(t, id, *act.Action.DecidedByTokenID)
		require.Equal(t, "ci-deployer", *act.Action.DecidedByTokenName)
		var data string
		require.NoError(t, f.db.QueryRow(`SELECT data FROM run_events WHERE run_name = $1
			AND type IN ('action.approved', 'action.rejected')`, key.Run).Scan(&data))
		require.JSONEq(t, fmt.Sprintf(`{"by": "token:admin", "token_id": %q, "token_name": "ci-deployer",
			"comment": "as someone else"}`, id), data)
	}
}

// Restart is recorded only for a run that ended in failure (409
// not_restartable), with no abort still being delivered (409
// abort_pending), from a step of the run (422 naming from_step).
func TestRestartRun(t *testing.T) {
	t.Parallel()
	f := newControlFixture(t)
	ctx := context.Background()
	key := f.startedRun(t)

	status, _, p := f.do(t, http.MethodPost, runPath(key)+"/restart", "")
	require.Equal(t, http.StatusConflict, status, p)
	require.Equal(t, "not_restartable", p["code"])

	status, _, p = f.do(t, http.MethodPost, runPath(key)+"/abort", "")
	require.Equal(t, http.StatusAccepted, status, p)
	status, _, p = f.do(t, http.MethodPost, runPath(key)+"/restart", "")
	require.Equal(t, http.StatusConflict, status, p)
	require.Equal(t, "abort_pending", p["code"])
	require.NoError(t, f.store.Aborts().ClearAbortRequest(ctx, key.Action(domain.RootActionName), store.AbortDelivered))

	status, _, p = f.do(t, http.MethodPost, runPath(key)+"/restart", `{"from_step":"zz"}`)
	require.Equal(t, http.StatusUnprocessableEntity, status, p)
	require.Equal(t, "invalid_request", p["code"])
	require.Equal(t, []string{"from_step"}, fields(p))

	status, _, run := f.do(t, http.MethodPost, runPath(key)+"/restart", `{"from_step":"b"}`)
	require.Equal(t, http.StatusAccepted, status, run)
	require.Equal(t, "ABORTED", run["phase"], "the scheduler moves the run back to RUNNING")
	require.Equal(t, 1, f.advances(t, key))
	got, err := f.store.Runs().GetRun(ctx, key)
	require.NoError(t, err)
	require.NotNil(t, got.Run.RestartRequestedAt)
	require.Equal(t, "b", *got.Run.RestartFrom)
	require.Contains(t, f.events(t, key), "run.restart_requested")

	done := f.startedRun(t)
	require.NoError(t, f.store.Runs().SetRunPhase(ctx, done, domain.PhaseSucceeded, time.Now().UTC()))
	status, _, p = f.do(t, http.MethodPost, runPath(done)+"/restart", `{}`)
	require.Equal(t, http.StatusConflict, status, p)
	require.Equal(t, "not_restartable", p["code"])
	status, _, p = f.do(t, http.MethodPost, runsPath+"/ghost/restart", "")
	require.Equal(t, http.StatusNotFound, status, p)
	status, _, p = f.do(t, http.MethodPost, runPath(key)+"/restart", `{"from":"b"}`)
	require.Equal(t, http.StatusBadRequest, status, p)
}
