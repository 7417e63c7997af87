package server

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"database/sql"
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
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/redistest"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
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
//
// This file drives the requests and checks each answer; fuzz_model_test.go
// holds the spec's operations and what the requests created (fuzzWorld),
// fuzz_gen_test.go builds each request and its mutation, and
// fuzz_integrity_test.go checks the database afterwards.
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
	// tokens are the bearer secrets requests take turns with (fuzzToken):
	// "" (none), an unknown one, a reader's scoped to another project, a
	// worker's bound to no worker, and the admin's.
	tokens []string
}

// fuzzToken is the bearer secret request i carries: one in ten each none,
// unknown, scoped reader and unbound worker; the rest the admin's, so most
// requests reach the handlers.
func (f *fuzzFixture) fuzzToken(i int) string {
	return f.tokens[min(i%10, len(f.tokens)-1)]
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
	client := asynq.NewClient(redistest.New(t))
	t.Cleanup(func() { client.Close() })
	// The server logs why it answered 500; t.Log shows it with the failure.
	log := slog.New(slog.NewTextHandler(testLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelError}))
	e := New(Deps{Store: st, Enqueuer: queue.NewEnqueuer(client, slog.New(slog.DiscardHandler)),
		Log: log, Registry: prometheus.NewRegistry(),
		Ready: func(context.Context) error { return nil }},
		// An event stream lasts until its run ends or LogFollowMax:
		// events_test.go covers them; here they end soon.
		Config{AdminToken: testAdminToken, ControlPlaneKey: testControlPlaneKey, RateLimit: 1e6, LogFollowMax: 300 * time.Millisecond})
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	_, reader, err := st.Tokens().CreateToken(context.Background(), store.NewToken{Name: "r", Role: RoleReader, Projects: []string{"elsewhere"}})
	require.NoError(t, err)
	_, worker, err := st.Tokens().CreateToken(context.Background(), store.NewToken{Name: "w", Role: RoleWorker})
	require.NoError(t, err)
	return &fuzzFixture{srv: srv, store: st, db: db, tokens: []string{"", "cap_unknown", reader, worker, testAdminToken}}
}

type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
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
	if tok := fz.f.fuzzToken(q.i); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
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

// schedule sets up what the scheduler would, so that tasks and attempts
// exist: start a run's steps and place a few pending tasks. The scheduler's
// decisions are not under test (and live in its own module); a step that
// fails is logged and counted, as asynq would retry it.
func (fz *fuzzer) schedule(r *rand.Rand) {
	ctx, st := context.Background(), fz.f.store
	if k, _, ok := fz.world.run(r); ok {
		storetest.StartSteps(fz.t, st, k)
	}
	read, err := st.Placement().PendingWork(ctx, 4, 4, time.Minute)
	tasks := read.Tasks
	fz.schedErr("pending tasks", err)
	for _, task := range tasks {
		w, ok := fz.world.worker(r)
		if !ok {
			return
		}
		a, ok, err := storetest.AssignTask(ctx, st, task.ID, w)
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

func histogram[K cmp.Ordered](m map[K]int) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%v:%d", k, m[k])
	}
	return strings.Join(parts, " ")
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
		_, _ = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer "+testAdminToken+"\r\n"+
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
