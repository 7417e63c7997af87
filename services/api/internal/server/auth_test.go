package server

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// routeCase is one operation of the embedded spec with a concrete path.
type routeCase struct {
	id, method, path, role string
	project, holder        bool
}

// specRoutes walks every operation the api serves (servedSpec), so
// that a new route cannot skip the tables below; path parameters get
// placeholder values of their schema (project "pa").
func specRoutes(t *testing.T) []routeCase {
	spec, err := servedSpec()
	require.NoError(t, err)
	var out []routeCase
	paths := spec.Paths.Map()
	for _, path := range slices.Sorted(maps.Keys(paths)) {
		item := paths[path]
		for _, method := range slices.Sorted(maps.Keys(item.Operations())) {
			op := item.Operations()[method]
			rc := routeCase{id: op.OperationID, method: method, role: operationRole(method, op.Extensions)}
			_, rc.holder = op.Extensions["x-capstan-holder"]
			concrete := path
			for _, p := range append(slices.Clone(item.Parameters), op.Parameters...) {
				if p.Value.In == openapi3.ParameterInPath {
					rc.project = rc.project || p.Value.Name == "project"
					concrete = strings.ReplaceAll(concrete, "{"+p.Value.Name+"}", placeholder(p.Value))
				}
			}
			rc.path = concrete
			out = append(out, rc)
		}
	}
	require.NotEmpty(t, out)
	return out
}

func placeholder(p *openapi3.Parameter) string {
	s := p.Schema.Value
	switch {
	case p.Name == "project":
		return "pa"
	case s.Type.Is("integer"):
		return "1"
	case s.Format == "uuid":
		return "00000000-0000-4000-8000-000000000001"
	case s.Pattern == "^[0-9a-f]{64}$":
		return strings.Repeat("a", 64)
	}
	return "x1"
}

// authTokens makes one token of each kind the tables use.
type authTokens struct{ reader, writer, otherProject, worker, scopedWriter string }

func newAuthTokens(t *testing.T, st *store.Store) authTokens {
	mk := func(role string, projects ...string) string {
		_, secret, err := st.Tokens().CreateToken(context.Background(), store.NewToken{Name: role, Role: role, Projects: projects})
		require.NoError(t, err)
		return secret
	}
	return authTokens{reader: mk(RoleReader), writer: mk(RoleWriter), otherProject: mk(RoleWriter, "pb"),
		worker: mk(RoleWorker), scopedWriter: mk(RoleWriter, "pa")}
}

// TestEveryRouteIsAuthorized drives every operation of the spec with no
// token (401), a reader on a write route (403), a token scoped to another
// project (404; 403 on an admin route, whose role it lacks), a worker token
// on a user route (403) and the right token
// (the route's own answer: neither 401 nor 403, never 5xx).
func TestEveryRouteIsAuthorized(t *testing.T) {
	t.Parallel()
	f := newFixtureConfig(t, Config{LogFollowMax: 300 * time.Millisecond}) // a project's event stream never ends by itself
	tok := newAuthTokens(t, f.store)
	for _, rc := range specRoutes(t) {
		name := rc.id + " " + rc.method + " " + rc.path
		status, hdr, p := f.doAs(t, "", rc.method, rc.path, "{}")
		require.Equal(t, http.StatusUnauthorized, status, "%s: %v", name, p)
		require.Equal(t, "application/problem+json", hdr.Get("Content-Type"), name)
		require.Contains(t, hdr.Get("WWW-Authenticate"), "Bearer", name)
		status, _, _ = f.doAs(t, "cap_not-a-token", rc.method, rc.path, "{}")
		require.Equal(t, http.StatusUnauthorized, status, name)
		if rc.role != RoleReader && rc.role != RoleAny {
			status, _, p = f.doAs(t, tok.reader, rc.method, rc.path, "{}")
			require.Equal(t, http.StatusForbidden, status, "reader on %s: %v", name, p)
		}
		if rc.role != RoleWorker && rc.role != RoleAny {
			status, _, p = f.doAs(t, tok.worker, rc.method, rc.path, "{}")
			require.Equal(t, http.StatusForbidden, status, "worker on %s: %v", name, p)
		}
		if rc.project {
			want := http.StatusNotFound
			if rc.role == RoleAdmin {
				want = http.StatusForbidden // the role is checked first: a writer of another project lacks it
			}
			status, _, p = f.doAs(t, tok.otherProject, rc.method, rc.path, "{}")
			require.Equal(t, want, status, "other project on %s: %v", name, p)
		}
		right := map[string]string{RoleReader: tok.reader, RoleWriter: tok.writer, RoleAdmin: testAdminToken,
			RoleWorker: testAdminToken, RoleAny: tok.worker}[rc.role]
		if rc.project && rc.role != RoleAdmin {
			right = tok.scopedWriter
		}
		status, _, p = f.doAs(t, right, rc.method, rc.path, "{}")
		require.NotContains(t, []int{401, 403}, status, "right token on %s: %v", name, p)
		require.Less(t, status, 500, "right token on %s: %v", name, p)
	}
}

// TestScopedTokensSeeOnlyTheirProjects: the list routes with a token scoped
// to project pa list pa's runs and aborts, never pb's, and pb's lists are 404.
func TestScopedTokensSeeOnlyTheirProjects(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tok := newAuthTokens(t, f.store)
	for _, project := range []string{"pa", "pb"} {
		runs := fmt.Sprintf("/v1/projects/%s/domains/dev/runs", project)
		status, _, p := f.do(t, http.MethodPost, runs, `{"name":"r1","spec":{"steps":[{"name":"a","command":"true"}]}}`)
		require.Equal(t, http.StatusCreated, status, p)
		status, _, p = f.do(t, http.MethodPost, runs+"/r1/abort", `{"reason":"test"}`)
		require.Equal(t, http.StatusAccepted, status, p)
	}
	cases := []struct {
		name, path string
		status     int
		want       []string // the projects listed
	}{
		{"own runs", "/v1/projects/pa/domains/dev/runs", 200, []string{"pa"}},
		{"other runs", "/v1/projects/pb/domains/dev/runs", 404, nil},
		{"own cache", "/v1/projects/pa/domains/dev/cache", 200, nil},
		{"other cache", "/v1/projects/pb/domains/dev/cache", 404, nil},
		{"aborts", "/v1/aborts", 200, []string{"pa"}},
		{"pending aborts", "/v1/aborts?state=pending", 200, []string{"pa"}},
	}
	for _, c := range cases {
		status, _, body := f.doAs(t, tok.scopedWriter, http.MethodGet, c.path, "")
		require.Equal(t, c.status, status, "%s: %v", c.name, body)
		var listed []string
		for _, key := range []string{"runs", "aborts"} {
			items, _ := body[key].([]any)
			for _, it := range items {
				listed = append(listed, it.(map[string]any)["project"].(string))
			}
		}
		if c.want != nil {
			require.Equal(t, c.want, slices.Compact(slices.Sorted(slices.Values(listed))), c.name)
		}
	}
	status, _, body := f.doAs(t, testAdminToken, http.MethodGet, "/v1/aborts", "")
	require.Equal(t, http.StatusOK, status)
	require.Len(t, body["aborts"], 2, "an unscoped token lists every project's aborts")
}

// TestScopesOnlyOnReaderAndWriterTokens: projects on an admin or a worker
// token are a 422 naming the field, since those roles reach every project;
// a scoped writer is made.
func TestScopesOnlyOnReaderAndWriterTokens(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, role := range []string{"admin", "worker"} {
		status, _, p := f.do(t, http.MethodPost, "/v1/tokens", `{"name":"t","role":"`+role+`","projects":["pa"]}`)
		require.Equal(t, http.StatusUnprocessableEntity, status, p)
		require.Contains(t, p["detail"], "projects: a "+role+" token reaches every project")
		status, _, p = f.do(t, http.MethodPost, "/v1/tokens", `{"name":"t","role":"`+role+`"}`)
		require.Equal(t, http.StatusCreated, status, p)
	}
	status, _, p := f.do(t, http.MethodPost, "/v1/tokens", `{"name":"t","role":"writer","projects":["pa"]}`)
	require.Equal(t, http.StatusCreated, status, p)
}

// TestRevokedAndExpiredTokensAre401: a revoked token and an expired one
// answer 401; the same token worked before.
func TestRevokedAndExpiredTokensAre401(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	status, _, created := f.do(t, http.MethodPost, "/v1/tokens", `{"name":"ci","role":"reader"}`)
	require.Equal(t, http.StatusCreated, status, created)
	secret := created["token"].(string)
	require.True(t, strings.HasPrefix(secret, "cap_"))
	status, _, _ = f.doAs(t, secret, http.MethodGet, "/v1/workers", "")
	require.Equal(t, http.StatusOK, status)
	status, _, list := f.do(t, http.MethodGet, "/v1/tokens", "")
	require.Equal(t, http.StatusOK, status)
	require.NotContains(t, fmt.Sprint(list), secret, "a list never shows secrets")
	status, _, _ = f.do(t, http.MethodDelete, "/v1/tokens/"+created["id"].(string), "")
	require.Equal(t, http.StatusNoContent, status)
	status, _, p := f.doAs(t, secret, http.MethodGet, "/v1/workers", "")
	require.Equal(t, http.StatusUnauthorized, status, p)

	past := time.Now().Add(-time.Minute)
	_, expired, err := f.store.Tokens().CreateToken(context.Background(), store.NewToken{Name: "old", Role: RoleAdmin, ExpiresAt: &past})
	require.NoError(t, err)
	status, _, p = f.doAs(t, expired, http.MethodGet, "/v1/workers", "")
	require.Equal(t, http.StatusUnauthorized, status, p)
	status, _, p = f.do(t, http.MethodPost, "/v1/tokens", `{"name":"x","role":"reader","expires_at":"2001-01-01T00:00:00Z"}`)
	require.Equal(t, http.StatusUnprocessableEntity, status, p)
}

// TestAWorkerTokenReachesOnlyItsOwnAttempts: two workers register with the
// bootstrap worker token; each gets its own token, which may heartbeat its
// worker and report, read and log its attempts, and not the other's.
// TestWorkerAddressesInsideTheWorkerNetworks: a worker registers only with
// an address whose host is, or resolves only to, an address inside
// WorkerCIDRs (default loopback and the private ranges); any other is a 422
// naming the field, and no worker is made.
func TestWorkerAddressesInsideTheWorkerNetworks(t *testing.T) {
	t.Parallel()
	const bootstrap = "test-worker-token-0123456789abcdef0123456789abcdef"
	f := newFixtureConfig(t, Config{WorkerToken: bootstrap})
	for _, c := range []struct {
		address string
		status  int
	}{
		{"http://127.0.0.1:1", http.StatusCreated},
		{"http://10.1.2.3:9090", http.StatusCreated},
		{"http://[::1]:9090", http.StatusCreated},
		{"http://localhost:9090", http.StatusCreated},
		{"http://169.254.169.254:80", http.StatusUnprocessableEntity},
		{"http://8.8.8.8:9090", http.StatusUnprocessableEntity},
		{"http://no-such-host.invalid:9090", http.StatusUnprocessableEntity},
	} {
		status, _, p := f.doAs(t, bootstrap, http.MethodPost, "/v1/workers",
			`{"name":"w","address":"`+c.address+`","slots":1}`)
		require.Equal(t, c.status, status, "%s: %v", c.address, p)
		if c.status != http.StatusCreated {
			require.Contains(t, p["detail"], "address: ", c.address)
		}
	}
	status, _, p := f.do(t, http.MethodGet, "/v1/workers", "")
	require.Equal(t, http.StatusOK, status)
	require.Len(t, p["workers"], 4, "the refused ones made no worker")
}

func TestAWorkerTokenReachesOnlyItsOwnAttempts(t *testing.T) {
	t.Parallel()
	const bootstrap = "test-worker-token-0123456789abcdef0123456789abcdef"
	f := newFixtureConfig(t, Config{WorkerToken: bootstrap})
	register := func(name string) (id, token string) {
		status, _, w := f.doAs(t, bootstrap, http.MethodPost, "/v1/workers",
			`{"name":"`+name+`","address":"http://127.0.0.1:1","slots":2}`)
		require.Equal(t, http.StatusCreated, status, w)
		return w["id"].(string), w["token"].(string)
	}
	idA, tokA := register("a")
	idB, tokB := register("b")
	key := domain.RunKey{Project: "demo", Domain: "dev", Run: "r1"}
	status, _, p := f.do(t, http.MethodPost, runsPath, `{"name":"r1","spec":{"steps":[{"name":"a","command":"true"}]}}`)
	require.Equal(t, http.StatusCreated, status, p)
	storetest.StartSteps(t, f.store, key, "a")
	d, err := f.store.Actions().GetAction(context.Background(), key.Action("a"))
	require.NoError(t, err)
	a, ok, err := storetest.AssignTask(context.Background(), f.store, d.Tasks[0].Task.ID, idA)
	require.NoError(t, err)
	require.True(t, ok)
	attempt := a.ID

	report := fmt.Sprintf("/v1/attempts/%d/report", attempt)
	status, _, p = f.doAs(t, tokB, http.MethodPost, report, `{"state":"RUNNING"}`)
	require.Equal(t, http.StatusForbidden, status, "another worker's report: %v", p)
	status, _, _ = f.doAs(t, tokB, http.MethodGet, fmt.Sprintf("/v1/attempts/%d", attempt), "")
	require.Equal(t, http.StatusForbidden, status)
	status, _, _ = f.doAs(t, tokB, http.MethodPost, fmt.Sprintf("/v1/attempts/%d/logs", attempt), `{"chunks":[]}`)
	require.Equal(t, http.StatusForbidden, status)
	status, _, _ = f.doAs(t, tokB, http.MethodPost, "/v1/workers/"+idA+"/heartbeat", `{}`)
	require.Equal(t, http.StatusForbidden, status, "heartbeat for another worker")
	status, _, _ = f.doAs(t, bootstrap, http.MethodPost, report, `{"state":"RUNNING"}`)
	require.Equal(t, http.StatusForbidden, status, "the bootstrap token only registers")

	status, _, p = f.doAs(t, tokA, http.MethodPost, report, `{"state":"RUNNING"}`)
	require.Equal(t, http.StatusOK, status, p)
	status, _, p = f.doAs(t, tokB, http.MethodPost, "/v1/workers/"+idB+"/heartbeat", `{}`)
	require.Equal(t, http.StatusOK, status, p)
	status, _, _ = f.doAs(t, tokA, http.MethodGet, "/v1/workers", "")
	require.Equal(t, http.StatusForbidden, status, "a worker token reads no user route")

	// Deleted elsewhere (the scheduler's ARC rule), its token goes with it:
	// 404 while this api still remembers the token (TokenCacheTTL), 401
	// after; an executor registers again on either.
	require.NoError(t, f.store.Workers().DeleteWorker(context.Background(), idA))
	status, _, _ = f.doAs(t, tokA, http.MethodPost, "/v1/workers/"+idA+"/heartbeat", `{}`)
	require.Contains(t, []int{http.StatusUnauthorized, http.StatusNotFound}, status, "a deleted worker is refused")
	// Deregistered through this api, it is forgotten at once.
	status, _, p = f.doAs(t, tokB, http.MethodDelete, "/v1/workers/"+idB, "")
	require.Equal(t, http.StatusNoContent, status, p)
	status, _, _ = f.doAs(t, tokB, http.MethodPost, "/v1/workers/"+idB+"/heartbeat", `{}`)
	require.Equal(t, http.StatusUnauthorized, status, "a deregistered worker's token goes with it")
}

// An executor's first read of an attempt costs one statement: the holder
// check reads the attempt with its task and action, and the handler answers
// from those rows.
func TestWorkerAttemptReadIsOneStatement(t *testing.T) {
	t.Parallel()
	const bootstrap = "test-worker-token-0123456789abcdef0123456789abcdef"
	ops := store.NewOperationSeconds()
	st, err := store.Open(context.Background(), storetest.NewURL(t), store.Config{MaxOpenConns: 4, OperationSeconds: ops})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	f := newFixtureOn(t, st, Config{WorkerToken: bootstrap}, nil)

	status, _, w := f.doAs(t, bootstrap, http.MethodPost, "/v1/workers", `{"name":"a","address":"http://127.0.0.1:1","slots":2}`)
	require.Equal(t, http.StatusCreated, status, w)
	key := domain.RunKey{Project: "demo", Domain: "dev", Run: "r1"}
	status, _, p := f.do(t, http.MethodPost, runsPath, `{"name":"r1","spec":{"steps":[{"name":"a","command":"true"}]}}`)
	require.Equal(t, http.StatusCreated, status, p)
	storetest.StartSteps(t, st, key, "a")
	d, err := st.Actions().GetAction(context.Background(), key.Action("a"))
	require.NoError(t, err)
	a, ok, err := storetest.AssignTask(context.Background(), st, d.Tasks[0].Task.ID, w["id"].(string))
	require.NoError(t, err)
	require.True(t, ok)

	reads := func() map[string]uint64 {
		out := map[string]uint64{}
		for _, op := range []string{"GetAttempt", "GetAttemptRun"} {
			m := &dto.Metric{}
			require.NoError(t, ops.WithLabelValues(op).(prometheus.Histogram).Write(m))
			out[op] = m.GetHistogram().GetSampleCount()
		}
		return out
	}
	before := reads()
	status, _, got := f.doAs(t, w["token"].(string), http.MethodGet, fmt.Sprintf("/v1/attempts/%d", a.ID), "")
	require.Equal(t, http.StatusOK, status, got)
	require.Equal(t, float64(a.ID), got["id"])
	require.Equal(t, "true", got["command"])
	after := reads()
	require.Equal(t, before["GetAttempt"], after["GetAttempt"])
	require.Equal(t, before["GetAttemptRun"]+1, after["GetAttemptRun"])
}

// TestWorkerReadsItsAttemptsTogether: GET /v1/workers/{id}/attempts answers,
// in one statement, the attempts of the ids placed on that worker (a
// repeated id once), and none of another worker's or of an unknown id,
// each with the bytes of output it shipped (read only for a started one); a
// worker's token reads no other worker's list, and bad ids are a 400.
func TestWorkerReadsItsAttemptsTogether(t *testing.T) {
	t.Parallel()
	const bootstrap = "test-worker-token-0123456789abcdef0123456789abcdef"
	ops := store.NewOperationSeconds()
	st, err := store.Open(context.Background(), storetest.NewURL(t), store.Config{MaxOpenConns: 4, OperationSeconds: ops})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	f := newFixtureOn(t, st, Config{WorkerToken: bootstrap}, nil)
	register := func(name string) (id, token string) {
		status, _, w := f.doAs(t, bootstrap, http.MethodPost, "/v1/workers",
			`{"name":"`+name+`","address":"http://127.0.0.1:1","slots":4}`)
		require.Equal(t, http.StatusCreated, status, w)
		return w["id"].(string), w["token"].(string)
	}
	idA, tokA := register("a")
	idB, tokB := register("b")
	key := domain.RunKey{Project: "demo", Domain: "dev", Run: "r1"}
	status, _, p := f.do(t, http.MethodPost, runsPath,
		`{"name":"r1","spec":{"steps":[{"name":"a","command":"true","replicas":3,"env":{"K":"v"}}]}}`)
	require.Equal(t, http.StatusCreated, status, p)
	storetest.StartSteps(t, st, key, "a")
	d, err := st.Actions().GetAction(context.Background(), key.Action("a"))
	require.NoError(t, err)
	var ids []int64
	for i, worker := range []string{idA, idA, idB} {
		a, ok, err := storetest.AssignTask(context.Background(), st, d.Tasks[i].Task.ID, worker)
		require.NoError(t, err)
		require.True(t, ok)
		ids = append(ids, a.ID)
	}

	count := func(ops *prometheus.HistogramVec, op string) uint64 {
		m := &dto.Metric{}
		require.NoError(t, ops.WithLabelValues(op).(prometheus.Histogram).Write(m))
		return m.GetHistogram().GetSampleCount()
	}
	reads := func() uint64 { return count(ops, "GetAttemptRuns") }
	before := reads()
	path := fmt.Sprintf("/v1/workers/%s/attempts?ids=%d&ids=%d&ids=%d&ids=%d&ids=999999", idA, ids[1], ids[0], ids[2], ids[0])
	status, _, got := f.doAs(t, tokA, http.MethodGet, path, "")
	require.Equal(t, http.StatusOK, status, got)
	require.Equal(t, before+1, reads(), "one statement")
	list := got["attempts"].([]any)
	require.Len(t, list, 2, "A's two attempts, once each: %v", got)
	for i, want := range ids[:2] {
		spec := list[i].(map[string]any)
		require.Equal(t, float64(want), spec["id"])
		require.Equal(t, idA, spec["worker_id"])
		require.Equal(t, "true", spec["command"])
		require.Equal(t, "v", spec["env"].(map[string]any)["K"])
		require.Equal(t, true, spec["proceed"])
		require.Equal(t, float64(0), spec["log_bytes"], "no output yet")
	}
	require.Zero(t, count(ops, "LogEnds"), "ASSIGNED attempts: no read of their output")

	f.report(t, ids[0], `{"state":"RUNNING"}`)
	f.appendLogs(t, ids[0], http.StatusNoContent, `{"stream":"stdout","data":"one\n"}`, `{"stream":"stderr","data":"é\n"}`)
	status, _, got = f.doAs(t, tokA, http.MethodGet, path, "")
	require.Equal(t, http.StatusOK, status, got)
	list = got["attempts"].([]any)
	require.Equal(t, float64(len("one\n")+len("é\n")), list[0].(map[string]any)["log_bytes"], "both streams, in bytes")
	require.Equal(t, float64(0), list[1].(map[string]any)["log_bytes"])
	require.Equal(t, uint64(1), count(ops, "LogEnds"), "one statement for the output")

	status, _, _ = f.doAs(t, tokB, http.MethodGet, path, "")
	require.Equal(t, http.StatusForbidden, status, "another worker's list")
	for _, bad := range []string{"", "?ids=x", "?ids=0"} {
		status, _, p = f.doAs(t, tokA, http.MethodGet, "/v1/workers/"+idA+"/attempts"+bad, "")
		require.Equal(t, http.StatusBadRequest, status, "%q: %v", bad, p)
	}
}
