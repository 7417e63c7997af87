package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/problem"
)

// FaultPlan is what a FaultProxy does to the abort calls of one attempt.
// The zero plan forwards every call to the executor.
type FaultPlan struct {
	// Fail answers the first Fail calls 500 (a kill that failed), then
	// forwards.
	Fail int
	// Status, when set, answers every call (after the Fail ones) with it
	// instead of forwarding: 500 for an executor that never manages, 404 for
	// one that no longer holds the attempt.
	Status int
	// Latency delays every answer, injected or forwarded.
	Latency time.Duration
}

// ProxyCall is one abort call the proxy received.
type ProxyCall struct {
	At        time.Time
	AttemptID int64
	Cause     string
	Reason    string
	// Status is what the proxy answered (injected or the executor's).
	Status int
	// Forwarded is true when the executor handled the call.
	Forwarded bool
	// Took is how long the call took to answer.
	Took time.Duration
}

// FaultProxy stands between the control plane and one real executor: the
// executor advertises the proxy's URL, the proxy forwards everything to the
// executor's listen address, and injects faults into
// POST /v1/attempts/{id}/abort per attempt, recording every such call.
type FaultProxy struct {
	srv    *httptest.Server
	target string
	rp     *httputil.ReverseProxy

	mu          sync.Mutex
	plans       map[int64]FaultPlan
	calls       []ProxyCall
	inFlight    map[int64]int
	maxInFlight map[int64]int
}

var abortPath = regexp.MustCompile(`^/v1/attempts/([0-9]+)/abort$`)

// NewFaultProxy listens on 127.0.0.1 and forwards to a port it picks for
// the executor (ExecutorAddr); it closes when t ends.
func NewFaultProxy(t *testing.T) *FaultProxy {
	t.Helper()
	port := FreePort(t)
	p := &FaultProxy{target: "127.0.0.1:" + strconv.Itoa(port), plans: map[int64]FaultPlan{},
		inFlight: map[int64]int{}, maxInFlight: map[int64]int{}}
	p.rp = httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: p.target})
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

// ExecutorEnv is the environment that puts the proxy in front of an
// executor: it listens on the proxy's target and advertises the proxy.
func (p *FaultProxy) ExecutorEnv() []string {
	return []string{"CAPSTAN_EXECUTOR_ADDR=" + p.target, "CAPSTAN_EXECUTOR_ADVERTISE_URL=" + p.srv.URL}
}

// URL is the address the executor advertises.
func (p *FaultProxy) URL() string { return p.srv.URL }

// Plan sets the plan of attempt id's abort calls.
func (p *FaultProxy) Plan(id int64, plan FaultPlan) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.plans[id] = plan
}

// Calls returns the abort calls for attempt id so far.
func (p *FaultProxy) Calls(id int64) []ProxyCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []ProxyCall
	for _, c := range p.calls {
		if c.AttemptID == id {
			out = append(out, c)
		}
	}
	return out
}

// AllCalls returns every abort call so far.
func (p *FaultProxy) AllCalls() []ProxyCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]ProxyCall(nil), p.calls...)
}

// MaxInFlight is the most abort calls for attempt id that were ever being
// handled at once.
func (p *FaultProxy) MaxInFlight(id int64) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.maxInFlight[id]
}

func (p *FaultProxy) serve(w http.ResponseWriter, r *http.Request) {
	m := abortPath.FindStringSubmatch(r.URL.Path)
	if r.Method != http.MethodPost || m == nil {
		p.rp.ServeHTTP(w, r)
		return
	}
	id, _ := strconv.ParseInt(m[1], 10, 64)
	call := ProxyCall{At: time.Now(), AttemptID: id}
	raw, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(raw))
	var body struct{ Cause, Reason string }
	_ = json.Unmarshal(raw, &body)
	call.Cause, call.Reason = body.Cause, body.Reason

	p.mu.Lock()
	p.inFlight[id]++
	p.maxInFlight[id] = max(p.maxInFlight[id], p.inFlight[id])
	n := 1
	for _, c := range p.calls {
		if c.AttemptID == id {
			n++
		}
	}
	plan := p.plans[id]
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.inFlight[id]--
		call.Took = time.Since(call.At)
		p.calls = append(p.calls, call)
		p.mu.Unlock()
	}()

	if plan.Latency > 0 {
		select {
		case <-time.After(plan.Latency): // the injected fault, not a test wait
		case <-r.Context().Done():
		}
	}
	switch {
	case n <= plan.Fail:
		call.Status = http.StatusInternalServerError
	case plan.Status != 0:
		call.Status = plan.Status
	default:
		rec := &statusRecorder{ResponseWriter: w}
		p.rp.ServeHTTP(rec, r)
		call.Status, call.Forwarded = rec.status, true
		return
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(call.Status)
	detail, code := "injected fault: kill failed", "injected"
	if call.Status == http.StatusNotFound { // as the executor answers it
		detail, code = fmt.Sprintf("this executor holds no attempt %d", id), problem.CodeAttemptNotFound
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": http.StatusText(call.Status),
		"status": call.Status, "code": code, "detail": detail})
}

// statusRecorder remembers the status the executor answered.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}
