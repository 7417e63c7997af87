package server

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// TestAPIFuzz sends fuzzRequests malformed, boundary and valid requests,
// generated from the embedded OpenAPI spec, to the real handler (real Postgres,
// real Redis) from fuzzConcurrency clients, and checks that no answer is a
// 5xx, that every 4xx is a problem+json with type, title, status and code, and
// that the database is whole afterwards (fuzzIntegrity). Request i is built
// from its own math/rand stream seeded with (seed, i), so the same seed
// rebuilds the same request; which existing run, worker or attempt it names
// depends on what earlier requests created, so a failure prints the request
// itself. CAPSTAN_FUZZ_SEED replays a seed, CAPSTAN_FUZZ_REQUESTS changes the
// count.
func TestAPIFuzz(t *testing.T) {
	t.Parallel()
	seed := fuzzEnvUint(t, "CAPSTAN_FUZZ_SEED", uint64(time.Now().UnixNano()))
	n := int(fuzzEnvUint(t, "CAPSTAN_FUZZ_REQUESTS", fuzzRequests))
	t.Logf("fuzz seed %d (replay with CAPSTAN_FUZZ_SEED=%d)", seed, seed)

	f := newFuzzFixture(t)
	fz := &fuzzer{t: t, seed: seed, ops: fuzzOps(t), world: newFuzzWorld(), f: f,
		client: &http.Client{Timeout: 30 * time.Second,
			Transport: &http.Transport{MaxIdleConnsPerHost: fuzzConcurrency, DisableCompression: true}},
		statuses: map[int]int{}, mutations: map[string]int{}, succeeded: map[string]int{}}
	start := time.Now()
	fz.run(n)
	elapsed := time.Since(start)
	t.Logf("fuzz: %d requests in %s (seed %d); status histogram: %s", fz.sent.Load(), elapsed.Round(time.Millisecond),
		seed, histogram(fz.statuses))
	t.Logf("fuzz: requests by mutation: %s", histogram(fz.mutations))
	t.Logf("fuzz: 2xx answers by operation: %s", histogram(fz.succeeded))
	t.Logf("fuzz: %d scheduler steps failed", fz.schedErrs.Load())
	for _, s := range fz.slowest {
		t.Logf("fuzz: slow: %s took %s", s.what, s.d.Round(time.Millisecond))
	}
	if t.Failed() {
		return
	}
	fuzzIntegrity(t, f.db, fz.created.Load())
}

const (
	// fuzzRequests is how many requests TestAPIFuzz sends by default.
	fuzzRequests = 10_000
	// fuzzConcurrency is how many clients send them at once.
	fuzzConcurrency = 8
	// fuzzMaxBody is the server's body limit (Config.MaxBodyBytes default).
	fuzzMaxBody = 1 << 20
)

func fuzzEnvUint(t *testing.T, name string, def uint64) uint64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	require.NoError(t, err, name)
	return n
}

// fuzzFixture is newFixture with the database's URL kept, so the integrity
// check can query it with database/sql.
type fuzzFixture struct {
	srv   *httptest.Server
	store *store.Store
	db    *sql.DB
}

func newFuzzFixture(t *testing.T) *fuzzFixture {
	t.Helper()
	dsn := storetest.NewURL(t)
	st, err := store.Open(context.Background(), dsn, store.Config{MaxOpenConns: 2 * fuzzConcurrency})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	db, err := sql.Open("pgx", dsn) // registered by storetest
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: "127.0.0.1:56379", DB: redisDB})
	t.Cleanup(func() { client.Close() })
	// The server logs why it answered 500; t.Log shows it with the failure.
	log := slog.New(slog.NewTextHandler(testLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelError}))
	e := New(Deps{Store: st, Enqueuer: queue.NewEnqueuer(client, slog.New(slog.DiscardHandler)),
		Log: log, Registry: prometheus.NewRegistry(),
		Ready: func(context.Context) error { return nil }}, Config{})
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &fuzzFixture{srv: srv, store: st, db: db}
}

type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// fuzzOp is one operation of the spec with what a request to it carries.
type fuzzOp struct {
	id, method, path string
	params           []*openapi3.Parameter
	body             *openapi3.Schema // nil when the operation takes no body
	bodyRequired     bool
	methods          []string // every method the path declares
}

// fuzzOps walks the embedded spec's paths and operations, in a fixed order.
func fuzzOps(t *testing.T) []fuzzOp {
	spec, err := api.GetSwagger()
	require.NoError(t, err)
	var ops []fuzzOp
	paths := spec.Paths.Map()
	for _, path := range slices.Sorted(maps.Keys(paths)) {
		item := paths[path]
		declared := slices.Sorted(maps.Keys(item.Operations()))
		for _, method := range declared {
			op := item.Operations()[method]
			o := fuzzOp{id: op.OperationID, method: method, path: path, methods: declared}
			for _, p := range append(slices.Clone(item.Parameters), op.Parameters...) {
				o.params = append(o.params, p.Value)
			}
			if rb := op.RequestBody; rb != nil {
				o.body = rb.Value.Content.Get("application/json").Schema.Value
				o.bodyRequired = rb.Value.Required
			}
			ops = append(ops, o)
		}
	}
	require.NotEmpty(t, ops)
	return ops
}

// fuzzWorld is what valid requests created, for later requests to name.
type fuzzWorld struct {
	mu       sync.Mutex
	runs     []domain.RunKey
	steps    map[domain.RunKey][]string
	workers  []string
	attempts []int64
	cursors  []string
	idemKeys []string
}

func newFuzzWorld() *fuzzWorld { return &fuzzWorld{steps: map[domain.RunKey][]string{}} }

func pick[T any](r *rand.Rand, xs []T) (T, bool) {
	var zero T
	if len(xs) == 0 {
		return zero, false
	}
	return xs[r.IntN(len(xs))], true
}

func (w *fuzzWorld) run(r *rand.Rand) (domain.RunKey, []string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k, ok := pick(r, w.runs)
	return k, w.steps[k], ok
}

func (w *fuzzWorld) worker(r *rand.Rand) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return pick(r, w.workers)
}

func (w *fuzzWorld) attempt(r *rand.Rand) (int64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return pick(r, w.attempts)
}

func (w *fuzzWorld) heldAttempts(r *rand.Rand) []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []int64
	for range r.IntN(4) {
		if id, ok := pick(r, w.attempts); ok {
			out = append(out, id)
		}
	}
	return out
}

func (w *fuzzWorld) cursor(r *rand.Rand) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return pick(r, w.cursors)
}

func (w *fuzzWorld) idemKey(r *rand.Rand) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if k, ok := pick(r, w.idemKeys); ok && r.IntN(2) == 0 {
		return k
	}
	k := fmt.Sprintf("key-%d", r.Uint32())
	w.idemKeys = append(w.idemKeys, k)
	return k
}

// learn records what a successful response created.
func (w *fuzzWorld) learn(op string, status int, body []byte) {
	if op != "CreateRun" && op != "RegisterWorker" && op != "ListRuns" {
		return
	}
	var out struct {
		Project, Domain, Name, ID string
		NextCursor                string `json:"next_cursor"`
		Spec                      struct{ Steps []struct{ Name string } }
	}
	if json.Unmarshal(body, &out) != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case op == "CreateRun" && status == http.StatusCreated:
		k := domain.RunKey{Project: out.Project, Domain: out.Domain, Run: out.Name}
		w.runs = append(w.runs, k)
		for _, s := range out.Spec.Steps {
			w.steps[k] = append(w.steps[k], s.Name)
		}
	case op == "RegisterWorker" && status == http.StatusCreated:
		w.workers = append(w.workers, out.ID)
	case op == "ListRuns" && status == http.StatusOK && out.NextCursor != "":
		w.cursors = append(w.cursors, out.NextCursor)
	}
}

// fuzzReq is one request as sent, kept to print when it fails.
type fuzzReq struct {
	i        int
	op, mut  string // operationId; mutation, e.g. "body-field/null"
	detail   string // what the mutation did, e.g. "at body.spec.mode"
	method   string
	target   string // escaped path and query, sent as is
	ctype    string // "" sends no Content-Type
	idemKey  string
	body     []byte
	hasBody  bool
	chunked  bool
	wantBody bool // the response must carry a body (not HEAD)
}

func (q fuzzReq) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "request #%d (%s, %s %s)\n%s %s\n", q.i, q.op, q.mut, q.detail, q.method, q.target)
	if q.ctype != "" {
		fmt.Fprintf(&b, "Content-Type: %s\n", q.ctype)
	}
	if q.idemKey != "" {
		fmt.Fprintf(&b, "Idempotency-Key: %q\n", q.idemKey)
	}
	if q.chunked {
		b.WriteString("Transfer-Encoding: chunked\n")
	}
	body := q.body
	if len(body) > 2048 {
		body = body[:2048]
	}
	fmt.Fprintf(&b, "body (%d bytes): %q", len(q.body), body)
	if len(q.body) > len(body) {
		b.WriteString("…")
	}
	return b.String()
}

// fuzzer sends the requests and tallies the answers.
type fuzzer struct {
	t         *testing.T
	seed      uint64
	ops       []fuzzOp
	world     *fuzzWorld
	f         *fuzzFixture
	client    *http.Client
	sent      atomic.Int64
	created   atomic.Int64 // 201 answers to CreateRun
	failures  atomic.Int64
	mu        sync.Mutex
	statuses  map[int]int
	mutations map[string]int
	succeeded map[string]int // 2xx answers by operation
	slowest   []slowReq
	schedErrs atomic.Int64 // the scheduler's steps that failed
}

// run sends n requests from fuzzConcurrency goroutines; every 16th request
// a client also plays the scheduler, so attempts exist to report on.
func (fz *fuzzer) run(n int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range fuzzConcurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || fz.failures.Load() >= 5 {
					return
				}
				r := rand.New(rand.NewPCG(fz.seed, uint64(i)))
				if i%16 == 0 {
					fz.schedule(r)
				}
				fz.send(fz.generate(i, r))
			}
		})
	}
	wg.Wait()
}

func (fz *fuzzer) fail(format string, args ...any) {
	if fz.failures.Add(1) <= 5 {
		fz.t.Errorf("seed %d: "+format, append([]any{fz.seed}, args...)...)
	}
}

func (fz *fuzzer) send(q fuzzReq) {
	req, err := fz.newRequest(q)
	if err != nil {
		fz.fail("building %s: %v", q, err)
		return
	}
	start := time.Now()
	resp, err := fz.client.Do(req)
	fz.timed(q, time.Since(start))
	if err != nil {
		fz.fail("%s\nno response: %v", q, err)
		return
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		fz.fail("%s\nreading the response: %v", q, err)
		return
	}
	fz.sent.Add(1)
	fz.mu.Lock()
	fz.statuses[resp.StatusCode]++
	fz.mutations[q.mut]++
	if resp.StatusCode < 300 {
		fz.succeeded[q.op]++
	}
	fz.mu.Unlock()
	if q.op == "CreateRun" && resp.StatusCode == http.StatusCreated {
		fz.created.Add(1)
	}
	if err := checkAnswer(resp, body, q.wantBody); err != nil {
		fz.fail("%s\ngot %d %s: %v\n%.2048s", q, resp.StatusCode, resp.Header.Get("Content-Type"), err, body)
		return
	}
	if resp.StatusCode < 300 {
		fz.world.learn(q.op, resp.StatusCode, body)
	}
}

// timed keeps the slowest requests, to show where the time goes.
func (fz *fuzzer) timed(q fuzzReq, d time.Duration) {
	fz.mu.Lock()
	defer fz.mu.Unlock()
	fz.slowest = append(fz.slowest, slowReq{fmt.Sprintf("#%d %s %s %s", q.i, q.op, q.mut, q.detail), d})
	slices.SortFunc(fz.slowest, func(a, b slowReq) int { return cmp.Compare(b.d, a.d) })
	fz.slowest = fz.slowest[:min(len(fz.slowest), 3)]
}

type slowReq struct {
	what string
	d    time.Duration
}

func (fz *fuzzer) newRequest(q fuzzReq) (*http.Request, error) {
	var body io.Reader
	if q.hasBody {
		body = bytes.NewReader(q.body)
		if q.chunked {
			body = struct{ io.Reader }{body} // unknown length: chunked
		}
	}
	req, err := http.NewRequest(q.method, fz.f.srv.URL, body)
	if err != nil {
		return nil, err
	}
	path, query, _ := strings.Cut(q.target, "?")
	req.URL.Opaque, req.URL.RawQuery = path, query // sent byte for byte
	if q.ctype != "" {
		req.Header.Set("Content-Type", q.ctype)
	}
	if q.idemKey != "" {
		req.Header.Set("Idempotency-Key", q.idemKey)
	}
	return req, nil
}

// checkAnswer: no 5xx; a 4xx is a problem+json whose status is the answer's.
func checkAnswer(resp *http.Response, body []byte, wantBody bool) error {
	if resp.StatusCode >= 500 {
		return errors.New("server error")
	}
	if resp.StatusCode < 400 {
		return nil
	}
	if ct := resp.Header.Get("Content-Type"); ct != problem.ContentType {
		return fmt.Errorf("a %d has Content-Type %q, want %s", resp.StatusCode, ct, problem.ContentType)
	}
	if !wantBody {
		return nil
	}
	var p struct {
		Type, Title, Code *string
		Status            *int
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return fmt.Errorf("problem body: %w", err)
	}
	switch {
	case p.Type == nil || *p.Type == "":
		return errors.New("problem without type")
	case p.Title == nil:
		return errors.New("problem without title")
	case p.Status == nil || *p.Status != resp.StatusCode:
		return fmt.Errorf("problem status %v, answer %d", p.Status, resp.StatusCode)
	case p.Code == nil || *p.Code == "":
		return errors.New("problem without code")
	}
	return nil
}

// schedule does what the scheduler would, so that tasks and attempts exist:
// advance a run, evaluate finished attempts, place a few pending tasks. The
// scheduler is not under test: a step that fails (a deadlock between its own
// transactions) is logged and counted, as asynq would retry it.
func (fz *fuzzer) schedule(r *rand.Rand) {
	ctx, st := context.Background(), fz.f.store
	if k, _, ok := fz.world.run(r); ok {
		_, err := st.AdvanceRun(ctx, k)
		fz.schedErr("advance", err)
	}
	ids, err := st.UnevaluatedAttempts(ctx, 8)
	fz.schedErr("unevaluated attempts", err)
	for _, id := range ids {
		ev, err := st.EvaluateAttempt(ctx, id, domain.Table{0})
		if err == nil && ev.Done {
			_, err = st.AdvanceRun(ctx, ev.Run)
		}
		fz.schedErr("evaluate", err)
	}
	tasks, err := st.PendingTasks(ctx, 4)
	fz.schedErr("pending tasks", err)
	for _, task := range tasks {
		w, ok := fz.world.worker(r)
		if !ok {
			return
		}
		a, ok, err := st.AssignTask(ctx, task.ID, w)
		fz.schedErr("assign", err)
		if ok {
			fz.world.mu.Lock()
			fz.world.attempts = append(fz.world.attempts, a.ID)
			fz.world.mu.Unlock()
		}
	}
}

func (fz *fuzzer) schedErr(step string, err error) {
	if err != nil && fz.schedErrs.Add(1) <= 5 {
		fz.t.Logf("fuzz: scheduler step %s failed (not under test): %v", step, err)
	}
}

// A mutation turns a valid request into a malformed or boundary one; ok is
// false when it does not apply to the operation.
type mutation struct {
	name   string
	weight int
	apply  func(g *gen, q *fuzzReq) (ok bool)
}

var mutations = []mutation{
	{"valid", 25, func(*gen, *fuzzReq) bool { return true }},
	{"schema-random", 5, (*gen).schemaRandom},
	{"body-field", 30, (*gen).mutateField},
	{"body-raw", 8, (*gen).rawBody},
	{"content-type", 4, (*gen).contentType},
	{"path-param", 12, (*gen).pathParam},
	{"query", 6, (*gen).badQuery},
	{"header", 2, (*gen).header},
	{"stray-body", 2, (*gen).strayBody},
	{"method", 4, (*gen).wrongMethod},
	{"unrouted", 4, (*gen).unrouted},
}

// gen builds request i: a valid request to a random operation, then one
// mutation.
type gen struct {
	r      *rand.Rand
	op     fuzzOp
	world  *fuzzWorld
	vals   map[string]string // path parameter values, sent as they are
	query  url.Values
	value  any // the body, decoded; marshalled by finish
	raw    map[string][]byte
	kind   string // a mutation's variant, e.g. "null" for body-field
	detail string // what it did
}

func (fz *fuzzer) generate(i int, r *rand.Rand) fuzzReq {
	g := &gen{r: r, op: fz.ops[r.IntN(len(fz.ops))], world: fz.world, vals: map[string]string{},
		query: url.Values{}, raw: map[string][]byte{}}
	q := g.valid(i)
	total := 0
	for _, m := range mutations {
		total += m.weight
	}
	for {
		n := r.IntN(total)
		for _, m := range mutations {
			if n -= m.weight; n < 0 {
				if m.apply(g, &q) {
					q.mut, q.detail = m.name, g.detail
					if g.kind != "" {
						q.mut += "/" + g.kind
					}
					g.finish(&q)
					return q
				}
				break
			}
		}
	}
}

// valid fills q (and g) with a valid request to g.op.
func (g *gen) valid(i int) fuzzReq {
	q := fuzzReq{i: i, op: g.op.id, method: g.op.method, wantBody: true}
	k, steps, haveRun := g.world.run(g.r)
	if !haveRun || g.r.IntN(8) == 0 {
		k = domain.RunKey{Project: "demo", Domain: "dev", Run: g.name()}
	}
	for _, p := range g.op.params {
		switch p.In {
		case openapi3.ParameterInPath:
			g.vals[p.Name] = g.pathValue(p, k, steps)
		case openapi3.ParameterInQuery:
			if v, ok := g.queryValue(p); ok {
				g.query.Set(p.Name, v)
			}
		case openapi3.ParameterInHeader:
			if p.Name == "Idempotency-Key" && g.r.IntN(3) == 0 {
				q.idemKey = g.world.idemKey(g.r)
			}
		}
	}
	if g.op.body != nil && (g.op.bodyRequired || g.r.IntN(3) > 0) {
		q.hasBody, q.ctype = true, "application/json"
		g.value = g.validBody(i)
	}
	return q
}

func (g *gen) pathValue(p *openapi3.Parameter, k domain.RunKey, steps []string) string {
	s := p.Schema.Value
	switch {
	case p.Name == "project":
		return k.Project
	case p.Name == "domain":
		return k.Domain
	case p.Name == "run":
		return k.Run
	case p.Name == "action":
		if st, ok := pick(g.r, steps); ok && g.r.IntN(2) == 0 {
			return st
		}
		return domain.RootActionName
	case s.Format == "uuid":
		if w, ok := g.world.worker(g.r); ok && g.r.IntN(6) > 0 {
			return w
		}
		return g.uuid()
	case p.Name == "id":
		if a, ok := g.world.attempt(g.r); ok && g.r.IntN(6) > 0 {
			return strconv.FormatInt(a, 10)
		}
	case p.Name == "task" && g.r.IntN(4) > 0:
		return "0"
	case p.Name == "attempt" && g.r.IntN(4) > 0:
		return "1"
	}
	return fmt.Sprint(g.genValue(s, 0))
}

func (g *gen) queryValue(p *openapi3.Parameter) (string, bool) {
	if g.r.IntN(2) == 0 {
		return "", false
	}
	if p.Name == "cursor" {
		return g.world.cursor(g.r)
	}
	return fmt.Sprint(g.genValue(p.Schema.Value, 0)), true
}

// validBody is a body the handler accepts, where the spec alone cannot say
// what that is (names that exist, specs that pass validation).
func (g *gen) validBody(i int) any {
	switch g.op.id {
	case "CreateRun":
		body := map[string]any{"spec": g.validSpec()}
		switch g.r.IntN(5) {
		case 0, 1:
			body["name"] = fmt.Sprintf("f%d-%s", i, g.name())
		case 2:
			if k, _, ok := g.world.run(g.r); ok {
				body["name"] = k.Run // taken: 409, unless another project
			}
		}
		return body
	case "AbortRun", "AbortAction":
		return map[string]any{"reason": "fuzz " + g.oddString()}
	case "RegisterWorker":
		return map[string]any{"name": "w" + g.name(), "address": fmt.Sprintf("http://127.0.0.1:%d", 9000+g.r.IntN(999)),
			"slots": 1 + g.r.IntN(8), "labels": map[string]any{"zone": "a"},
			"resources": map[string]any{"cpu_millis": g.r.IntN(8000), "memory_bytes": g.r.Int64N(1 << 34)}}
	case "Heartbeat":
		var held []any
		for _, id := range g.world.heldAttempts(g.r) {
			held = append(held, map[string]any{"id": id, "state": "RUNNING"})
		}
		return map[string]any{"draining": g.r.IntN(10) == 0, "attempts": held}
	case "ReportAttempt":
		state, _ := pick(g.r, []string{"BUILDING", "RUNNING", "RUNNING", "SUCCEEDED", "FAILED", "KILLED"})
		body := map[string]any{"state": state}
		if state != "BUILDING" && state != "RUNNING" {
			body["exit_code"], body["stdout"], body["cause"] = g.r.IntN(2), "out "+g.oddString(), "user"
		}
		return body
	}
	return g.genValue(g.op.body, 0)
}

func (g *gen) validSpec() map[string]any {
	mode, _ := pick(g.r, []string{"StepByStep", "DAG"})
	n := 1 + g.r.IntN(3)
	steps := make([]any, n)
	for i := range steps {
		st := map[string]any{"name": fmt.Sprintf("s%d", i), "command": "echo " + g.oddString()}
		if g.r.IntN(2) == 0 {
			st["replicas"] = 1 + g.r.IntN(3)
		}
		if mode == "DAG" && i > 0 {
			st["depends_on"] = []any{fmt.Sprintf("s%d", g.r.IntN(i))}
		}
		g.optionalStepFields(st)
		steps[i] = st
	}
	return map[string]any{"mode": mode, "steps": steps}
}

func (g *gen) optionalStepFields(st map[string]any) {
	extra := map[string]any{
		"env":                    map[string]any{"GREETING": g.oddString()},
		"max_retries_failure":    g.r.IntN(3),
		"max_retries_preemption": g.r.IntN(200),
		"max_task_failures":      g.r.IntN(2),
		"timeout":                "10m",
		"scheduling_timeout":     "5m",
		"priority":               []string{"production", "interactive", "batch"}[g.r.IntN(3)],
		"resources":              map[string]any{"cpu_millis": g.r.IntN(4000), "memory_bytes": g.r.IntN(1 << 30)},
		"constraints":            []any{map[string]any{"key": "zone", "op": "EQ", "value": "a"}},
		"coscheduled":            g.r.IntN(2) == 0,
	}
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		if g.r.IntN(4) == 0 {
			st[k] = extra[k]
		}
	}
}

// genValue generates a value the schema accepts, from the schema alone.
func (g *gen) genValue(s *openapi3.Schema, depth int) any {
	if len(s.Enum) > 0 {
		v, _ := pick(g.r, s.Enum)
		return v
	}
	switch {
	case s.Type.Is("object"):
		return g.genObject(s, depth)
	case s.Type.Is("array"):
		out := []any{}
		for range g.r.IntN(3) {
			if depth < 4 && s.Items != nil {
				out = append(out, g.genValue(s.Items.Value, depth+1))
			}
		}
		return out
	case s.Type.Is("integer"):
		lo, hi := int64(-5), int64(1000)
		if s.Min != nil {
			lo = int64(*s.Min)
		}
		if s.Max != nil {
			hi = int64(*s.Max)
		}
		return lo + g.r.Int64N(hi-lo+1)
	case s.Type.Is("boolean"):
		return g.r.IntN(2) == 0
	case s.Format == "uuid":
		return g.uuid()
	case s.Pattern != "":
		return g.matching(s.Pattern)
	}
	n := g.r.IntN(12)
	if s.MaxLength != nil {
		n = min(n, int(*s.MaxLength))
	}
	return g.letters(n)
}

func (g *gen) genObject(s *openapi3.Schema, depth int) map[string]any {
	out := map[string]any{}
	for _, k := range slices.Sorted(maps.Keys(s.Properties)) {
		if slices.Contains(s.Required, k) || (depth < 4 && g.r.IntN(2) == 0) {
			out[k] = g.genValue(s.Properties[k].Value, depth+1)
		}
	}
	if add := s.AdditionalProperties.Schema; add != nil && depth < 4 {
		for range g.r.IntN(3) {
			out[g.letters(1+g.r.IntN(8))] = g.genValue(add.Value, depth+1)
		}
	}
	return out
}

var patternCache sync.Map

// matching returns a name-like string that matches pattern, or "a".
func (g *gen) matching(pattern string) string {
	re, ok := patternCache.Load(pattern)
	if !ok {
		re, _ = patternCache.LoadOrStore(pattern, regexp.MustCompile(pattern))
	}
	if s := g.name(); re.(*regexp.Regexp).MatchString(s) {
		return s
	}
	return "a"
}

// name is a valid Name: 2-12 of [a-z0-9-], starting and ending with [a-z0-9].
func (g *gen) name() string {
	const edge, mid = "abcdefghijklmnopqrstuvwxyz0123456789", "abcdefghijklmnopqrstuvwxyz0123456789-"
	b := []byte{edge[g.r.IntN(len(edge))]}
	for range g.r.IntN(10) {
		b = append(b, mid[g.r.IntN(len(mid))])
	}
	return string(append(b, edge[g.r.IntN(len(edge))]))
}

func (g *gen) letters(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-./"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[g.r.IntN(len(alphabet))]
	}
	return string(b)
}

func (g *gen) uuid() string {
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", g.r.Uint32(), g.r.IntN(1<<16), g.r.IntN(1<<12),
		g.r.IntN(1<<12), g.r.Int64N(1<<48))
}

// weirdStrings are valid JSON strings that stress storage and rendering:
// NUL, control characters, bidi overrides, astral and combining runes.
var weirdStrings = []string{
	"", " ", "hi", "\x00", "a\x00b", "\x01\x02\x1f\x7f", "\t\r\n", "\u2028\u2029", "\u202eevil", "\ufeffbom",
	"😀🚀", "e\u0301", "\uFFFD", "名前", "👩‍👩‍👧", `\`, `"`, "${HOME}", "$(id)", "'; DROP TABLE runs; --",
	"%s%n%x", "<script>alert(1)</script>", "\\u0000", strings.Repeat("é", 300),
}

func (g *gen) weirdString() string { s, _ := pick(g.r, weirdStrings); return s }

// oddString is a weird string the API accepts: any but those with NUL.
func (g *gen) oddString() string {
	for {
		if s := g.weirdString(); !strings.ContainsRune(s, 0) {
			return s
		}
	}
}

// rawJSON returns a placeholder that finish replaces with raw bytes, for
// values json.Marshal cannot produce (invalid UTF-8, lone surrogates, deep
// nesting).
func (g *gen) rawJSON(b []byte) string {
	token := fmt.Sprintf("@@raw%d@@", len(g.raw))
	g.raw[token] = b
	return token
}

// finish renders the target and the body.
func (g *gen) finish(q *fuzzReq) {
	path := g.op.path
	for k, v := range g.vals {
		path = strings.ReplaceAll(path, "{"+k+"}", v)
	}
	if q.target == "" {
		q.target = path
		if enc := g.query.Encode(); enc != "" {
			q.target += "?" + enc
		}
	}
	if q.hasBody && q.body == nil {
		b, err := json.Marshal(g.value) // a nil value is the body "null"
		if err != nil {
			panic(err)
		}
		for token, raw := range g.raw {
			b = bytes.ReplaceAll(b, []byte(`"`+token+`"`), raw)
		}
		q.body = b
	}
}

// schemaRandom replaces the body with a value generated from the schema
// alone: it passes the spec, mostly not the handler's own checks.
func (g *gen) schemaRandom(*fuzzReq) bool {
	if g.op.body == nil {
		return false
	}
	g.value = g.genValue(g.op.body, 0)
	return true
}

// slot is a value in the body with the schema that describes it (nil when
// none does).
type slot struct {
	path   []any // object keys and array indexes from the root
	schema *openapi3.Schema
}

func collectSlots(v any, s *openapi3.Schema, path []any, out *[]slot) {
	*out = append(*out, slot{path: path, schema: s})
	switch x := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			var sub *openapi3.Schema
			if s != nil && s.Properties[k] != nil {
				sub = s.Properties[k].Value
			} else if s != nil && s.AdditionalProperties.Schema != nil {
				sub = s.AdditionalProperties.Schema.Value
			}
			collectSlots(x[k], sub, append(slices.Clone(path), k), out)
		}
	case []any:
		for i, e := range x {
			var sub *openapi3.Schema
			if s != nil && s.Items != nil {
				sub = s.Items.Value
			}
			collectSlots(e, sub, append(slices.Clone(path), i), out)
		}
	}
}

func (g *gen) get(path []any) any {
	v := g.value
	for _, p := range path {
		switch k := p.(type) {
		case string:
			v = v.(map[string]any)[k]
		case int:
			v = v.([]any)[k]
		}
	}
	return v
}

func (g *gen) set(path []any, nv any) {
	if len(path) == 0 {
		g.value = nv
		return
	}
	parent := g.get(path[:len(path)-1])
	switch k := path[len(path)-1].(type) {
	case string:
		parent.(map[string]any)[k] = nv
	case int:
		parent.([]any)[k] = nv
	}
}

func pathString(path []any) string {
	var b strings.Builder
	b.WriteString("body")
	for _, p := range path {
		if i, ok := p.(int); ok {
			fmt.Fprintf(&b, "[%d]", i)
		} else {
			fmt.Fprintf(&b, ".%s", p)
		}
	}
	return b.String()
}

// fieldMutations change one value of the body, chosen by what its schema
// says it is; each returns false when the slot does not suit it.
var fieldMutations = []struct {
	name  string
	apply func(g *gen, s slot) bool
}{
	{"wrong-type", (*gen).wrongType},
	{"null", func(g *gen, s slot) bool { g.set(s.path, nil); return true }},
	{"missing-required", (*gen).dropRequired},
	{"unknown-field", (*gen).unknownField},
	{"unknown-enum", (*gen).unknownEnum},
	{"huge-string", (*gen).hugeString},
	{"weird-string", (*gen).weirdField},
	{"number", (*gen).number},
	{"deep-nesting", func(g *gen, s slot) bool { g.set(s.path, g.rawJSON(nested(g.depth()))); return true }},
}

// mutateField applies one field mutation to one value of a valid body.
func (g *gen) mutateField(q *fuzzReq) bool {
	if g.op.body == nil {
		return false
	}
	if !q.hasBody {
		q.hasBody, q.ctype, g.value = true, "application/json", g.validBody(q.i)
	}
	var slots []slot
	collectSlots(g.value, g.op.body, nil, &slots)
	m := fieldMutations[g.r.IntN(len(fieldMutations))]
	for _, at := range g.r.Perm(len(slots)) {
		if m.apply(g, slots[at]) {
			g.kind, g.detail = m.name, "at "+pathString(slots[at].path)
			return true
		}
	}
	return false
}

func (g *gen) wrongType(s slot) bool {
	others := []any{"x", json.Number("1.5"), json.Number("7"), true, []any{}, map[string]any{}, nil}
	for {
		v, _ := pick(g.r, others)
		if s.schema == nil || !schemaTakes(s.schema, v) {
			g.set(s.path, v)
			return true
		}
	}
}

// schemaTakes reports whether v is of the schema's JSON type.
func schemaTakes(s *openapi3.Schema, v any) bool {
	switch x := v.(type) {
	case string:
		return s.Type.Is("string")
	case json.Number:
		_, err := x.Int64()
		return s.Type.Is("number") || s.Type.Is("integer") && err == nil
	case bool:
		return s.Type.Is("boolean")
	case []any:
		return s.Type.Is("array")
	case map[string]any:
		return s.Type.Is("object")
	}
	return s.Nullable
}

func (g *gen) dropRequired(s slot) bool {
	obj, ok := g.get(s.path).(map[string]any)
	if !ok || s.schema == nil {
		return false
	}
	for _, k := range s.schema.Required {
		if _, present := obj[k]; present {
			delete(obj, k)
			return true
		}
	}
	return false
}

func (g *gen) unknownField(s slot) bool {
	obj, ok := g.get(s.path).(map[string]any)
	if !ok {
		return false
	}
	key, _ := pick(g.r, []string{"retries", "Name", "STEPS", "__proto__", "", "spec ", "\x00", "é", "constructor"})
	obj[key] = g.weirdString()
	return true
}

func (g *gen) unknownEnum(s slot) bool {
	if s.schema == nil || len(s.schema.Enum) == 0 {
		return false
	}
	v, _ := pick(g.r, s.schema.Enum)
	str := fmt.Sprint(v)
	bad, _ := pick(g.r, []string{"NOT_A_VALUE", strings.ToLower(str), str + " ", " " + str, "", str + "\x00"})
	g.set(s.path, bad)
	return true
}

func (g *gen) hugeString(s slot) bool {
	if s.schema == nil || !s.schema.Type.Is("string") {
		return false
	}
	// Past maxLength, else past the command limit or just long; rarely past
	// the body limit. Sizes are kept down because megabytes cost much under
	// -race, and a long string where no limit applies (labels, logs) is
	// stored and sent again by every later list.
	n := 1<<10 + 1
	switch {
	case g.r.IntN(20) == 0:
		n = 2 * fuzzMaxBody
	case s.schema.MaxLength != nil:
		n = int(*s.schema.MaxLength) + 1
	case g.r.IntN(4) == 0:
		n = 64<<10 + 1 // MaxCommandBytes + 1
	}
	huge := make([]byte, n+2) // raw, not marshalled: cheaper under -race
	huge[0], huge[n+1] = '"', '"'
	copy(huge[1:], bytes.Repeat([]byte("x"), n))
	g.set(s.path, g.rawJSON(huge))
	return true
}

func (g *gen) weirdField(s slot) bool {
	if obj, ok := g.get(s.path).(map[string]any); ok && s.schema != nil && s.schema.AdditionalProperties.Schema != nil {
		obj[g.weirdString()+"K"] = g.weirdString() // a map key: env names, labels
		return true
	}
	if s.schema == nil || !s.schema.Type.Is("string") {
		return false
	}
	switch g.r.IntN(7) {
	case 0:
		g.set(s.path, g.rawJSON([]byte("\"\xff\xfe bad utf-8\"")))
	case 1:
		g.set(s.path, g.rawJSON([]byte(`"lone \ud800 surrogate"`)))
	case 2:
		g.set(s.path, g.rawJSON([]byte("\"raw \x00\x01\n control\""))) // not JSON
	default:
		g.set(s.path, g.weirdString())
	}
	return true
}

// boundaryNumbers are negative, huge, past-int64 and fractional numbers.
var boundaryNumbers = []string{
	"-1", "0", "-0", "1", "2147483647", "2147483648", "-2147483649", "4294967296", "9223372036854775807",
	"9223372036854775808", "-9223372036854775809", "100000000000000000000", "1e20", "1e308", "-1e308",
	"1.5", "0.1", "1.0", "1e-7", "123456789012345678901234567890",
}

func (g *gen) number(s slot) bool {
	if s.schema == nil || !s.schema.Type.Is("integer") && !s.schema.Type.Is("number") {
		return false
	}
	n, _ := pick(g.r, boundaryNumbers)
	g.set(s.path, json.Number(n))
	return true
}

func (g *gen) depth() int {
	d, _ := pick(g.r, []int{64, 1000, 9999, 10_000, 10_001})
	return d
}

func nested(depth int) []byte {
	return []byte(strings.Repeat("[", depth) + strings.Repeat("]", depth))
}

// rawBody replaces the whole body: empty, not JSON, deeply nested, or too
// large (with and without a Content-Length).
func (g *gen) rawBody(q *fuzzReq) bool {
	if g.op.body == nil {
		return false
	}
	q.hasBody, q.ctype = true, "application/json"
	valid, err := json.Marshal(g.validBody(q.i))
	if err != nil {
		panic(err)
	}
	bodies := map[string]func() []byte{
		"empty":    func() []byte { return []byte{} },
		"not-json": func() []byte { s, _ := pick(g.r, notJSON); return []byte(s) },
		"scalar": func() []byte {
			s, _ := pick(g.r, []string{"null", "[]", `"spec"`, "0", "true", "{}"})
			return []byte(s)
		},
		"truncated": func() []byte {
			return valid[:g.r.IntN(len(valid))]
		},
		"trailing": func() []byte { return append(slices.Clone(valid), "x"...) },
		"two-docs": func() []byte { return append(append(slices.Clone(valid), '\n'), valid...) },
		"bom":      func() []byte { return append([]byte("\xef\xbb\xbf"), valid...) },
		"dup-keys": func() []byte { return append([]byte(`{"spec":1,`), valid[1:]...) },
		"deep":     func() []byte { return nested(g.depth()) },
		"deep-obj": func() []byte { return []byte(strings.Repeat(`{"a":`, 10_000) + "1" + strings.Repeat("}", 10_000)) },
		"size":     func() []byte { return padTo(valid, g.bodySize()) },
	}
	name, _ := pick(g.r, slices.Sorted(maps.Keys(bodies)))
	if name == "size" && g.r.IntN(4) > 0 { // megabytes cost much under -race
		name = "empty"
	}
	q.body = bodies[name]()
	q.chunked = g.r.IntN(4) == 0
	g.kind, g.detail = name, fmt.Sprintf("%d bytes", len(q.body))
	return true
}

// strayBody sends a body to an operation that takes none.
func (g *gen) strayBody(q *fuzzReq) bool {
	if g.op.body != nil {
		return false
	}
	q.hasBody, q.ctype, q.chunked = true, "application/json", g.r.IntN(2) == 0
	q.body = []byte(`{"spec":{"steps":[]}}`)
	if g.r.IntN(8) == 0 {
		q.body = padTo(q.body, 2*fuzzMaxBody)
	}
	g.detail = fmt.Sprintf("%d bytes", len(q.body))
	return true
}

var notJSON = []string{"not json", "{", "}", `{"spec":}`, "<xml/>", "spec=1", "{'spec': 1}", "\x00\x01\x02",
	"\xff\xfe\xfd", "NaN", "Infinity", `{"spec":{"steps":[{"name":"a","command":"x"}]}`, "--", `{"a" "b"}`}

// bodySize is a body length at and around the 1 MiB limit.
func (g *gen) bodySize() int {
	n, _ := pick(g.r, []int{fuzzMaxBody - 1, fuzzMaxBody, fuzzMaxBody + 1, 2 * fuzzMaxBody})
	return n
}

// padTo pads a JSON document with trailing whitespace to n bytes.
func padTo(doc []byte, n int) []byte {
	if len(doc) >= n {
		return doc
	}
	return append(slices.Clone(doc), bytes.Repeat([]byte(" "), n-len(doc))...)
}

var contentTypes = []string{"", "text/plain", "application/xml", "application/x-www-form-urlencoded",
	"multipart/form-data; boundary=x", "application/json; charset=utf-16", "application/jsonx", "APPLICATION/JSON",
	"application/problem+json", "application/json;;", "*/*", "application/json; charset=utf-8", "json"}

func (g *gen) contentType(q *fuzzReq) bool {
	if g.op.body == nil {
		return false
	}
	if !q.hasBody {
		q.hasBody, g.value = true, g.validBody(q.i)
	}
	q.ctype, _ = pick(g.r, contentTypes)
	g.detail = fmt.Sprintf("%q", q.ctype)
	return true
}

// pathParam replaces one path parameter by a value its schema refuses, or an
// edge one it accepts; values are sent already escaped.
func (g *gen) pathParam(*fuzzReq) bool {
	var params []*openapi3.Parameter
	for _, p := range g.op.params {
		if p.In == openapi3.ParameterInPath {
			params = append(params, p)
		}
	}
	p, ok := pick(g.r, params)
	if !ok {
		return false
	}
	s := p.Schema.Value
	var bad []string
	switch {
	case s.Format == "uuid":
		bad = []string{"not-a-uuid", strings.ToUpper(g.uuid()), "{" + g.uuid() + "}", strings.ReplaceAll(g.uuid(), "-", ""),
			g.uuid() + "0", "00000000-0000-0000-0000-00000000000g", "..", "%00", "00000000-0000-0000-0000-000000000000"}
	case s.Type.Is("integer"):
		bad = []string{"0", "-1", "1.5", "1e3", "abc", "%20", "+1", "0x10", "9223372036854775807", "9223372036854775808",
			"2147483647", "2147483648", "4294967296", "100000000000000000000", "-9223372036854775809", "%00", "1%2F2"}
	default:
		bad = []string{"UPPER", "Demo", strings.Repeat("a", 64), strings.Repeat("a", 63), "..", ".", "%2F", "a%2Fb",
			"%2e%2e", "%00", "a%00", "%0A", "%C3%A9", "%FF", "-a", "a-", "a_b", "%20", "a.b", "a0", "%F0%9F%98%80", "~"}
		if s.MaxLength != nil {
			bad = append(bad, strings.Repeat("b", int(*s.MaxLength)+1))
		}
	}
	v, _ := pick(g.r, bad)
	g.vals[p.Name] = v
	g.kind, g.detail = p.Name, p.Name+"="+v
	return true
}

// badQuery sets one query parameter to a value its schema refuses, or an edge
// value it accepts.
func (g *gen) badQuery(*fuzzReq) bool {
	var params []*openapi3.Parameter
	for _, p := range g.op.params {
		if p.In == openapi3.ParameterInQuery {
			params = append(params, p)
		}
	}
	p, ok := pick(g.r, params)
	if !ok {
		return false
	}
	s := p.Schema.Value
	var vals []string
	switch {
	case s.Type.Is("integer"):
		vals = []string{"0", "-1", "1", "500", "501", "100000000000000000000", "1.5", "abc", "", "9223372036854775808"}
	case len(s.Enum) > 0:
		vals = []string{"NOT_A_PHASE", "queued", "", "RUNNING,FAILED", "\x00"}
	default:
		vals = []string{"!!", "", "\x00", "garbage", strings.Repeat("A", 201), cursorOf("not a time|x"),
			cursorOf("2020-01-01T00:00:00Z|"), cursorOf("2020-01-01T00:00:00Z|\x00"), cursorOf("2020-01-01T00:00:00Z|\xff"),
			cursorOf("9999-12-31T23:59:59Z|zzz"), cursorOf("0001-01-01T00:00:00Z|a"), cursorOf("|")}
	}
	v, _ := pick(g.r, vals)
	if g.r.IntN(5) == 0 {
		g.query.Add(p.Name, v) // repeated
	} else {
		g.query.Set(p.Name, v)
	}
	if g.r.IntN(4) == 0 {
		g.query.Set("unknown", "1")
	}
	g.kind, g.detail = p.Name, fmt.Sprintf("%s=%q", p.Name, v)
	return true
}

func cursorOf(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func (g *gen) header(q *fuzzReq) bool {
	if g.op.id != "CreateRun" {
		return false
	}
	if !q.hasBody {
		q.hasBody, q.ctype, g.value = true, "application/json", g.validBody(q.i)
	}
	q.idemKey, _ = pick(g.r, []string{strings.Repeat("k", 200), strings.Repeat("k", 201), " ", "é😀", "a b"})
	g.detail = fmt.Sprintf("Idempotency-Key of %d bytes", len(q.idemKey))
	return true
}

func (g *gen) wrongMethod(q *fuzzReq) bool {
	var others []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete,
		http.MethodOptions, http.MethodHead} {
		if !slices.Contains(g.op.methods, m) {
			others = append(others, m)
		}
	}
	m, ok := pick(g.r, others)
	if !ok {
		return false
	}
	q.method, q.wantBody = m, m != http.MethodHead
	return true
}

// unroutedPaths match no operation. The dashboard's files under /ui/ are left
// out: http.FileServer answers a missing one with a text/plain 404, outside
// the API's problem+json contract.
var unroutedPaths = []string{"/v1/projects/demo/domains/dev/runs/", "/v1/projects/demo/domains/dev", "/v1//workers",
	"/v1/workers/../workers", "/v1/projects/demo/domains/dev/runs/x/actions", "/v1/projects/%2e%2e/domains/dev/runs",
	"/v1/attempts/", "/v1/attempts/1/report/extra", "/V1/WORKERS", "/v1/workers/", "/v1", "/v2/workers",
	"/v1/projects/demo/domains/dev/runs/x/actions/a0/tasks/0/attempts/1", "/healthz", "/readyz", "/metrics",
	"/v1/projects/demo/domains/dev/runs/%00", "/v1/%F0%9F%98%80"}

func (g *gen) unrouted(q *fuzzReq) bool {
	q.target, _ = pick(g.r, unroutedPaths)
	g.detail = q.target
	return true
}

func histogram[K cmp.Ordered](m map[K]int) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%v:%d", k, m[k])
	}
	return strings.Join(parts, " ")
}

// fuzzIntegrity checks the database after the fuzzing with SQL: the rules
// the API must never break, however it is called, and one run per 201.
func fuzzIntegrity(t *testing.T, db *sql.DB, created int64) {
	broken, err := integrityViolations(context.Background(), db)
	require.NoError(t, err)
	require.Empty(t, broken, "integrity")
	var runs int64
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM runs`).Scan(&runs))
	require.Equal(t, created, runs, "integrity: one run per 201 answer to CreateRun")
	t.Logf("fuzz: integrity holds over %d runs", runs)
}

// integrityViolations returns, by rule, a description of each row that
// breaks one of integrityRules or holds a spec domain.WorkflowSpec.Validate
// refuses (the API must not have written it).
func integrityViolations(ctx context.Context, db *sql.DB) (map[string][]string, error) {
	broken := map[string][]string{}
	for _, rule := range integrityRules {
		rows, err := db.QueryContext(ctx, rule.query)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", rule.name, err)
		}
		for rows.Next() {
			var what string
			if err := rows.Scan(&what); err != nil {
				rows.Close()
				return nil, err
			}
			broken[rule.name] = append(broken[rule.name], what)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	rows, err := db.QueryContext(ctx, `SELECT project || '/' || domain || '/' || name, spec FROM runs`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var raw []byte
		if err := rows.Scan(&key, &raw); err != nil {
			return nil, err
		}
		if msg := refusedSpec(raw); msg != "" {
			broken["no run has a spec the API refuses"] = append(broken["no run has a spec the API refuses"], key+": "+msg)
		}
	}
	return broken, rows.Err()
}

// refusedSpec says why a stored spec is not one the API accepts, or "".
func refusedSpec(raw []byte) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var spec domain.WorkflowSpec
	if err := dec.Decode(&spec); err != nil {
		return err.Error()
	}
	if errs := spec.Validate("spec"); len(errs) > 0 {
		return errs[0].Error()
	}
	return ""
}

// integrityRules each select a description of every row that breaks them.
var integrityRules = []struct{ name, query string }{
	{"every run has exactly one root action a0", `
		SELECT r.project || '/' || r.domain || '/' || r.name FROM runs r
		WHERE (SELECT count(*) FROM actions a WHERE a.project = r.project AND a.domain = r.domain
			AND a.run_name = r.name AND a.name = 'a0' AND a.parent_action_name IS NULL) <> 1`},
	{"only a0 has no parent", `
		SELECT project || '/' || domain || '/' || run_name || '/' || name FROM actions
		WHERE (name = 'a0') <> (parent_action_name IS NULL)`},
	{"no action without its run", `
		SELECT a.project || '/' || a.domain || '/' || a.run_name || '/' || a.name FROM actions a
		WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.project = a.project AND r.domain = a.domain AND r.name = a.run_name)`},
	{"no action without its parent action", `
		SELECT a.project || '/' || a.domain || '/' || a.run_name || '/' || a.name FROM actions a
		WHERE a.parent_action_name IS NOT NULL AND NOT EXISTS (SELECT 1 FROM actions p WHERE p.project = a.project
			AND p.domain = a.domain AND p.run_name = a.run_name AND p.name = a.parent_action_name)`},
	{"no task without its action", `
		SELECT 'task ' || t.id FROM tasks t WHERE NOT EXISTS (SELECT 1 FROM actions a WHERE a.project = t.project
			AND a.domain = t.domain AND a.run_name = t.run_name AND a.name = t.action_name)`},
	{"no attempt without its task", `
		SELECT 'attempt ' || at.id FROM attempts at WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.id = at.task_id)`},
	{"no logs without their attempt", `
		SELECT 'logs of attempt ' || l.attempt_id FROM attempt_logs l
		WHERE NOT EXISTS (SELECT 1 FROM attempts at WHERE at.id = l.attempt_id)`},
	{"task states are Iris values", `
		SELECT 'task ' || id || ' state ' || state FROM tasks WHERE state NOT BETWEEN 0 AND 10`},
	{"attempt states are Iris values", `
		SELECT 'attempt ' || id || ' state ' || state FROM attempts WHERE state NOT BETWEEN 0 AND 10`},
	{"a run's phase is its a0's", `
		SELECT r.project || '/' || r.domain || '/' || r.name || ': run ' || r.phase || ', a0 ' || a.phase FROM runs r
		JOIN actions a ON a.project = r.project AND a.domain = r.domain AND a.run_name = r.name AND a.name = 'a0'
		WHERE r.phase <> a.phase`},
}

// TestAPIFuzzFindings replays, one by one, the requests with which TestAPIFuzz
// found server errors, with the answers they must get now.
func TestAPIFuzzFindings(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cases := []struct {
		name, method, path, body string
		status                   int
		field                    string
	}{
		{"NUL in a command", http.MethodPost, runsPath, `{"spec":{"steps":[{"name":"a","command":"echo \u0000"}]}}`,
			http.StatusBadRequest, "spec.steps[0].command"},
		{"NUL in an env key", http.MethodPost, runsPath, `{"spec":{"steps":[{"name":"a","command":"x","env":{"A\u0000":"1"}}]}}`,
			http.StatusBadRequest, "spec.steps[0].env.A\x00"},
		{"NUL in an abort reason", http.MethodPost, runsPath + "/ghost/abort", `{"reason":"a\u0000b"}`, http.StatusBadRequest, "reason"},
		{"NUL in a worker label", http.MethodPost, "/v1/workers", `{"name":"w","address":"http://h:1","labels":{"k":"\u0000"}}`,
			http.StatusBadRequest, "labels.k"},
		{"NUL in attempt output", http.MethodPost, "/v1/attempts/1/report", `{"state":"FAILED","stdout":"\u0000"}`,
			http.StatusBadRequest, "stdout"},
		{"data after the document", http.MethodPost, runsPath, `{"spec":{"steps":[{"name":"a","command":"x"}]}}x`,
			http.StatusBadRequest, "body"},
		{"a second document", http.MethodPost, runsPath + "/ghost/abort", `{"reason":"a"} {"reason":"b"}`,
			http.StatusBadRequest, "body"},
		{"whitespace after the document", http.MethodPost, runsPath, "{\"spec\":{\"steps\":[{\"name\":\"a\",\"command\":\"x\"}]}} \n\t",
			http.StatusCreated, ""},
		{"an escaped backslash-u is no NUL", http.MethodPost, runsPath, `{"spec":{"steps":[{"name":"a","command":"echo \\u0000"}]}}`,
			http.StatusCreated, ""},
		{"task index past int4", http.MethodGet, runsPath + "/r/actions/a/tasks/2147483648/attempts/1/logs", "", http.StatusNotFound, ""},
		{"attempt number past int4", http.MethodGet, runsPath + "/r/actions/a/tasks/0/attempts/9223372036854775807/logs", "",
			http.StatusNotFound, ""},
		{"exit code past int4", http.MethodPost, "/v1/attempts/1/report", `{"state":"FAILED","exit_code":2147483648}`,
			http.StatusBadRequest, "exit_code"},
		{"pid below int4", http.MethodPost, "/v1/attempts/1/report", `{"state":"RUNNING","pid":-2147483649}`,
			http.StatusBadRequest, "pid"},
		{"cursor naming NUL", http.MethodGet, runsPath + "?cursor=" + cursorOf("2020-01-01T00:00:00Z|\x00"), "", http.StatusBadRequest, "cursor"},
		{"cursor of invalid UTF-8", http.MethodGet, runsPath + "?cursor=" + cursorOf("2020-01-01T00:00:00Z|\xff"), "",
			http.StatusBadRequest, "cursor"},
		{"abort cursor naming NUL", http.MethodGet, "/v1/aborts?cursor=" + cursorOf("2020-01-01T00:00:00Z|\x00"), "",
			http.StatusBadRequest, "cursor"},
	}
	for _, c := range cases {
		status, hdr, p := f.do(t, c.method, c.path, c.body)
		require.Equal(t, c.status, status, "%s: %v", c.name, p)
		if status >= 400 {
			require.Equal(t, problem.ContentType, hdr.Get("Content-Type"), c.name)
		}
		if c.field != "" {
			require.Contains(t, fields(p), c.field, "%s: %v", c.name, p)
		}
	}
}

// TestOversizedChunkedBodyClosesTheConnection: the rest of a chunked body
// past the limit must not be read as the next request on the connection.
func TestOversizedChunkedBodyClosesTheConnection(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.srv.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	go func() { // the server stops reading midway: ignore write errors
		chunk := strings.Repeat(" ", 256<<10)
		_, _ = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
			"Transfer-Encoding: chunked\r\n\r\n1\r\n{\r\n", runsPath)
		for range 8 { // 2 MiB
			if _, err := fmt.Fprintf(conn, "%x\r\n%s\r\n", len(chunk), chunk); err != nil {
				return
			}
		}
		_, _ = fmt.Fprint(conn, "1\r\n}\r\n0\r\n\r\n")
	}()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	next, err := r.ReadString('\n')
	require.Error(t, err, "the server answered again on the connection: %q", next)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the connection stayed open: %v", err)
}

// TestIntegrityRulesCatchBreakage breaks each rule fuzzIntegrity checks, with
// foreign keys off, and expects integrityViolations to report it.
func TestIntegrityRulesCatchBreakage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sql.Open("pgx", storetest.NewURL(t))
	require.NoError(t, err)
	defer db.Close()
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	const spec = `{"mode":"StepByStep","steps":[{"name":"s","kind":"task","plugin":"shell","command":"x","priority":"interactive"}]}`
	for _, q := range []string{
		`SET session_replication_role = replica`, // no foreign keys
		`INSERT INTO runs (project, domain, name, spec) VALUES ('p', 'd', 'no-root', '` + spec + `'),
			('p', 'd', 'phases', '` + spec + `'), ('p', 'd', 'bad-spec', '{"steps": []}')`,
		`INSERT INTO actions (project, domain, run_name, name, parent_action_name, kind, phase) VALUES
			('p', 'd', 'phases', 'a0', NULL, 'workflow', 'RUNNING'), ('p', 'd', 'bad-spec', 'a0', NULL, 'workflow', 'QUEUED'),
			('p', 'd', 'phases', 'orphan', 'gone', 'task', 'QUEUED'), ('p', 'd', 'phases', 'loose', NULL, 'task', 'QUEUED'),
			('p', 'd', 'ghost', 'a0', NULL, 'workflow', 'QUEUED')`,
		`INSERT INTO tasks (id, project, domain, run_name, action_name, idx, state) VALUES
			(1, 'p', 'd', 'phases', 'orphan', 0, 11), (2, 'p', 'd', 'phases', 'gone', 0, 1)`,
		`INSERT INTO attempts (id, task_id, number, state) VALUES (1, 1, 1, -1), (2, 99, 1, 1)`,
		`INSERT INTO attempt_logs (attempt_id) VALUES (99)`,
	} {
		_, err := conn.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	broken, err := integrityViolations(ctx, db)
	require.NoError(t, err)
	for _, rule := range integrityRules {
		require.NotEmpty(t, broken[rule.name], rule.name)
	}
	require.NotEmpty(t, broken["no run has a spec the API refuses"])
}
