package server

import (
	"cmp"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/capstan-run/capstan/pkg/workerkey"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// testAdminToken is the bootstrap admin secret of every fixture's server.
const testAdminToken = "test-admin-token-0123456789abcdef0123456789abcdef"

// testControlPlaneKey is the fixtures' CAPSTAN_CONTROL_PLANE_KEY.
var testControlPlaneKey = workerkey.New("test-control-plane-key-0123456789abcdef")

type fixture struct {
	srv   *httptest.Server
	store *store.Store
	// redis is the test's own Redis database, which the server enqueues into.
	redis asynq.RedisClientOpt
	// url is the URL of store's database (newFeedFixture's; "" for the
	// others).
	url string
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	return newFixtureConfig(t, Config{})
}

// newFixtureConfig is newFixture with the server's config.
func newFixtureConfig(t testing.TB, cfg Config) *fixture {
	t.Helper()
	return newFixtureStopping(t, cfg, nil)
}

// newFixtureStopping is newFixtureConfig with Deps.Stopping.
func newFixtureStopping(t testing.TB, cfg Config, stopping <-chan struct{}) *fixture {
	t.Helper()
	return newFixtureOn(t, storetest.New(t), cfg, stopping)
}

// newFixtureOn is newFixtureStopping on store st, each of with changing
// the server's Deps.
func newFixtureOn(t testing.TB, st *store.Store, cfg Config, stopping <-chan struct{}, with ...func(*Deps)) *fixture {
	t.Helper()
	rdb := redistest.New(t)
	cfg.AdminToken = cmp.Or(cfg.AdminToken, testAdminToken)
	if cfg.ControlPlaneKey.IsZero() {
		cfg.ControlPlaneKey = testControlPlaneKey
	}
	client := asynq.NewClient(rdb)
	t.Cleanup(func() { client.Close() })
	d := Deps{Store: st, Enqueuer: queue.NewEnqueuer(client, slog.New(slog.DiscardHandler)),
		Log: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry(),
		Ready: func(context.Context) error { return nil }, Stopping: stopping}
	for _, w := range with {
		w(&d)
	}
	e := New(d, cfg)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &fixture{srv: srv, store: st, redis: rdb}
}

func (f *fixture) do(t *testing.T, method, path, body string) (int, http.Header, map[string]any) {
	t.Helper()
	return f.doAs(t, testAdminToken, method, path, body)
}

// doAs is do with the bearer secret token ("" sends none).
func (f *fixture) doAs(t *testing.T, token, method, path, body string) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	if len(raw) > 0 && raw[0] == '{' {
		require.NoError(t, json.Unmarshal(raw, &out), string(raw))
	}
	return resp.StatusCode, resp.Header, out
}

func fields(p map[string]any) []string {
	var out []string
	errs, _ := p["errors"].([]any)
	for _, e := range errs {
		out = append(out, e.(map[string]any)["field"].(string))
	}
	return out
}

const runsPath = "/v1/projects/demo/domains/dev/runs"

func TestCreateRunRejectsBadSpecsAndWritesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cases := []struct {
		name, body string
		status     int
		field      string
	}{
		{"unknown plugin", `{"spec":{"steps":[{"name":"a","plugin":"docker","command":"x"}]}}`, 400, "spec.steps[0].plugin"},
		{"missing command", `{"spec":{"steps":[{"name":"a"}]}}`, 422, "spec.steps[0].command"},
		{"duplicate step names", `{"spec":{"steps":[{"name":"a","command":"x"},{"name":"a","command":"y"}]}}`, 422, "spec.steps[1].name"},
		{"cycle in depends_on", `{"spec":{"mode":"DAG","steps":[{"name":"a","command":"x","depends_on":["b"]},{"name":"b","command":"y","depends_on":["a"]}]}}`, 422, "spec.steps[0].depends_on"},
		{"unknown dependency", `{"spec":{"mode":"DAG","steps":[{"name":"a","command":"x","depends_on":["zz"]}]}}`, 422, "spec.steps[0].depends_on[0]"},
		{"no steps", `{"spec":{"steps":[]}}`, 422, "spec.steps"},
		{"replicas out of range", `{"spec":{"steps":[{"name":"a","command":"x","replicas":0}]}}`, 422, "spec.steps[0].replicas"},
		{"bad run name", `{"name":"Bad Name","spec":{"steps":[{"name":"a","command":"x"}]}}`, 422, "name"},
		{"unknown mode", `{"spec":{"mode":"Parallel","steps":[{"name":"a","command":"x"}]}}`, 400, "spec.mode"},
		{"wrong type", `{"spec":{"steps":[{"name":"a","command":"x","replicas":"three"}]}}`, 400, "spec.steps[0].replicas"},
		{"unknown field", `{"spec":{"steps":[{"name":"a","command":"x","retries":3}]}}`, 400, "spec.steps[0]"},
		{"bad ttl", `{"spec":{"steps":[{"name":"a","command":"x"}],"ttl":{"after_success":"1d"}}}`, 422, "spec.ttl.after_success"},
		{"unknown ttl field", `{"spec":{"steps":[{"name":"a","command":"x"}],"ttl":{"after":"1s"}}}`, 400, "spec.ttl"},
		{"missing spec", `{}`, 422, "spec"},
		{"not JSON", `{"spec":`, 400, ""},
	}
	for _, c := range cases {
		status, hdr, p := f.do(t, http.MethodPost, runsPath, c.body)
		require.Equal(t, c.status, status, "%s: %v", c.name, p)
		require.Equal(t, "application/problem+json", hdr.Get("Content-Type"), c.name)
		require.NotEmpty(t, p["code"], c.name)
		if c.field != "" {
			require.Contains(t, fields(p), c.field, "%s: %v", c.name, p)
		}
	}
	runs, _, err := f.store.Runs().ListRuns(context.Background(), store.RunFilter{Project: "demo", Domain: "dev"})
	require.NoError(t, err)
	require.Empty(t, runs, "nothing is written for a refused spec")
}

func TestCreateGetListAbort(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	status, _, run := f.do(t, http.MethodPost, runsPath, `{"name":"r1","spec":{"steps":[{"name":"a","command":"echo hi"}]}}`)
	require.Equal(t, http.StatusCreated, status, run)
	require.Equal(t, "QUEUED", run["phase"])
	require.Equal(t, "StepByStep", run["spec"].(map[string]any)["mode"], "defaults are applied")
	step := run["spec"].(map[string]any)["steps"].([]any)[0].(map[string]any)
	require.Equal(t, "task", step["kind"], "Step's defaults are applied to a StepRequest")
	require.Equal(t, float64(1), step["replicas"], "Step's defaults are applied to a StepRequest")

	status, _, p := f.do(t, http.MethodPost, runsPath, `{"name":"r1","spec":{"steps":[{"name":"a","command":"echo hi"}]}}`)
	require.Equal(t, http.StatusConflict, status, p)

	status, _, got := f.do(t, http.MethodGet, runsPath+"/r1", "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "a0", got["actions"].([]any)[0].(map[string]any)["name"])

	status, _, p = f.do(t, http.MethodGet, runsPath+"/nope", "")
	require.Equal(t, http.StatusNotFound, status)
	require.Equal(t, "not_found", p["code"])

	status, _, list := f.do(t, http.MethodGet, runsPath+"?limit=10", "")
	require.Equal(t, http.StatusOK, status)
	require.Len(t, list["runs"], 1)

	status, _, p = f.do(t, http.MethodGet, runsPath+"?cursor=!!", "")
	require.Equal(t, http.StatusBadRequest, status, p)

	status, _, a := f.do(t, http.MethodPost, runsPath+"/r1/abort", `{"reason":"because"}`)
	require.Equal(t, http.StatusAccepted, status, a)
	require.Equal(t, "ABORTED", a["phase"])
	require.Equal(t, "because", a["abort"].(map[string]any)["reason"])

	status, _, p = f.do(t, http.MethodPost, runsPath+"/r1/abort", "")
	require.Equal(t, http.StatusConflict, status, p)
	require.Equal(t, "already_terminal", p["code"])

	status, _, p = f.do(t, http.MethodPost, runsPath+"/ghost/abort", "")
	require.Equal(t, http.StatusNotFound, status, p)

	pending, err := f.store.Aborts().ListPendingAborts(context.Background())
	require.NoError(t, err)
	require.Equal(t, []domain.ActionKey{{RunKey: domain.RunKey{Project: "demo", Domain: "dev", Run: "r1"}, Action: "a0"}}, pending)
}

func TestIdempotencyKeyReturnsTheFirstRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	body := `{"spec":{"steps":[{"name":"a","command":"echo hi"}]}}`
	post := func() (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodPost, f.srv.URL+runsPath, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "k-1")
		req.Header.Set("Authorization", "Bearer "+testAdminToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var out map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		return resp.StatusCode, out
	}
	s1, r1 := post()
	s2, r2 := post()
	require.Equal(t, http.StatusCreated, s1)
	require.Equal(t, http.StatusOK, s2)
	require.Equal(t, r1["name"], r2["name"])
}

func TestRoutingErrorsAreProblems(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	status, hdr, p := f.do(t, http.MethodGet, "/v1/nothing-here", "")
	require.Equal(t, http.StatusNotFound, status)
	require.Equal(t, "application/problem+json", hdr.Get("Content-Type"))
	require.Equal(t, "not_found", p["code"])

	status, _, p = f.do(t, http.MethodDelete, runsPath, "")
	require.Equal(t, http.StatusMethodNotAllowed, status, p)

	huge := `{"spec":{"steps":[{"name":"a","command":"` + strings.Repeat("x", 2<<20) + `"}]}}`
	status, _, p = f.do(t, http.MethodPost, runsPath, huge)
	require.Equal(t, http.StatusRequestEntityTooLarge, status, p)

	status, _, p = f.do(t, http.MethodPost, "/v1/workers", `{"name":"w","address":"not a url"}`)
	require.Equal(t, http.StatusUnprocessableEntity, status, p)
	require.Contains(t, fields(p), "address")

	status, _, p = f.do(t, http.MethodPost, "/v1/workers/00000000-0000-0000-0000-000000000000/heartbeat", "")
	require.Equal(t, http.StatusNotFound, status, p)
}
