package agent_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/pkg/workerkey"
	"github.com/google/uuid"
)

// fakeAPI is a recording fake of the few api endpoints the executor calls
// (register, heartbeat, get attempt, report), standing in for the api
// service that is written concurrently.
type fakeAPI struct {
	*httptest.Server

	mu        sync.Mutex
	workers   []string // registered ids, in order
	regs      []workerapi.RegisterWorkerRequest
	deleted   []string        // deregistered ids, in order
	forgotten map[string]bool // ids whose heartbeat answers 404
	revoked   map[string]bool // ids whose bound token answers 401
	beats     []workerapi.HeartbeatReport
	riders    int     // heartbeats that came with a batch
	stop      []int64 // returned by the next heartbeat
	attempts  map[int64]workerapi.AttemptSpec
	gets      []int64
	// readSizes is the number of ids of each GET /v1/workers/{id}/attempts,
	// in order; readLatency how long each takes to answer.
	readSizes   []int
	readLatency time.Duration
	reports     map[int64][]workerapi.AttemptReport
	batches     []int // the size of each report batch, in order
	// batchLatency is how long a report batch takes to answer.
	batchLatency time.Duration
	// hold, while not nil, keeps report batches from answering until it
	// is closed; holding counts those it keeps.
	hold    chan struct{}
	holding int
	// withoutSecrets answers registrations without an executor credential
	// and a dispatch key.
	withoutSecrets bool
	// failRegistrations and failReports answer 503 that many times first.
	failRegistrations, failReports int
	// logs holds the chunks appended per attempt, and appendedAfter how
	// many reports of the attempt had arrived when each append did.
	logs          map[int64][]workerapi.LogChunk
	appendedAfter map[int64][]int
	// runs are the runs that exist and live the attempts that are live,
	// as the sweep's questions answer; asked is the number of runs of each
	// runs question, in order.
	runs  map[domain.RunKey]bool
	live  map[int64]bool
	asked []int
}

func newFakeAPI() *fakeAPI {
	f := &fakeAPI{forgotten: map[string]bool{}, revoked: map[string]bool{}, attempts: map[int64]workerapi.AttemptSpec{}, reports: map[int64][]workerapi.AttemptReport{},
		logs: map[int64][]workerapi.LogChunk{}, appendedAfter: map[int64][]int{}, runs: map[domain.RunKey]bool{},
		live: map[int64]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/workers", f.register)
	mux.HandleFunc("POST /v1/workers/{id}/heartbeat", f.heartbeat)
	mux.HandleFunc("DELETE /v1/workers/{id}", f.deregister)
	mux.HandleFunc("GET /v1/attempts/{id}", f.getAttempt)
	mux.HandleFunc("GET /v1/workers/{id}/attempts", f.getAttempts)
	mux.HandleFunc("POST /v1/attempts/{id}/report", f.report)
	mux.HandleFunc("POST /v1/workers/{id}/reports", f.reportBatch)
	mux.HandleFunc("POST /v1/attempts/{id}/logs", f.appendLogs)
	mux.HandleFunc("POST /v1/workers/{id}/runs/existing", f.existingRuns)
	mux.HandleFunc("POST /v1/workers/{id}/attempts/live", f.liveAttempts)
	f.Server = httptest.NewServer(f.authorize(mux))
	return f
}

// fakeControlPlaneKey is the key the fake derives each worker's executor
// credential and dispatch key from, as the api does.
var fakeControlPlaneKey = workerkey.New("fake-control-plane-key-0123456789abcdef")

// fakeWorkerToken is the bootstrap worker token the fake accepts for
// registrations; every other call must carry the token a registration
// answered ("bound-<id>"), as the api requires.
const fakeWorkerToken = "boot"

func (f *fakeAPI) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		f.mu.Lock()
		ok := strings.HasPrefix(auth, "Bearer bound-") && !f.revoked[strings.TrimPrefix(auth, "Bearer bound-")]
		f.mu.Unlock()
		if r.Method == http.MethodPost && r.URL.Path == "/v1/workers" {
			ok = auth == "Bearer "+fakeWorkerToken
		}
		if !ok {
			problem.Write(w, problem.New(http.StatusUnauthorized, problem.CodeUnauthorized, "bad token "+auth))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (f *fakeAPI) register(w http.ResponseWriter, r *http.Request) {
	var req workerapi.RegisterWorkerRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		problem.Write(w, problem.New(http.StatusBadRequest, problem.CodeBadRequest, err.Error()))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failRegistrations > 0 {
		f.failRegistrations--
		problem.Write(w, problem.New(http.StatusServiceUnavailable, problem.CodeUnavailable, "starting"))
		return
	}
	id := uuid.NewString()
	f.workers = append(f.workers, id)
	f.regs = append(f.regs, req)
	token := "bound-" + id
	credential := fakeControlPlaneKey.Credential(id)
	dispatchKey := workerkey.EncodeDispatchKey(fakeControlPlaneKey.DispatchKey(id))
	out := api.Worker{Id: id, Name: req.Name, Address: req.Address, Slots: *req.Slots,
		State: "alive", CreatedAt: time.Now(), LastHeartbeatAt: time.Now(), Token: &token,
		ExecutorCredential: &credential, DispatchKey: &dispatchKey}
	if f.withoutSecrets {
		out.ExecutorCredential, out.DispatchKey = nil, nil
	}
	writeJSON(w, http.StatusCreated, out)
}

func (f *fakeAPI) heartbeat(w http.ResponseWriter, r *http.Request) {
	var rep workerapi.HeartbeatReport
	_ = json.NewDecoder(r.Body).Decode(&rep)
	f.mu.Lock()
	defer f.mu.Unlock()
	stop, ok := f.beatLocked(r.PathValue("id"), rep)
	if !ok {
		problem.Write(w, problem.New(http.StatusNotFound, problem.CodeNotFound, "no such worker"))
		return
	}
	writeJSON(w, http.StatusOK, workerapi.HeartbeatReply{Stop: stop})
}

// beatLocked records heartbeat rep of worker id (f.mu held) and returns the
// attempts to stop; ok is false for a forgotten worker.
func (f *fakeAPI) beatLocked(id string, rep workerapi.HeartbeatReport) (stop []int64, ok bool) {
	if f.forgotten[id] {
		return nil, false
	}
	f.beats = append(f.beats, rep)
	stop = append([]int64{}, f.stop...)
	f.stop = nil
	return stop, true
}

func (f *fakeAPI) deregister(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = append(f.deleted, r.PathValue("id"))
	w.WriteHeader(http.StatusNoContent)
}

func (f *fakeAPI) getAttempt(w http.ResponseWriter, r *http.Request) {
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gets = append(f.gets, id)
	spec, ok := f.attempts[id]
	if !ok {
		problem.Write(w, problem.New(http.StatusNotFound, problem.CodeNotFound, "no such attempt"))
		return
	}
	writeJSON(w, http.StatusOK, spec)
}

// getAttempts answers the attempts of the ids given that are placed on the
// worker (or on none), as the api does, after readLatency.
func (f *fakeAPI) getAttempts(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	latency := f.readLatency
	f.mu.Unlock()
	<-time.After(latency) // a slow api: reads made meanwhile queue up
	out := workerapi.AttemptSpecList{Attempts: []workerapi.AttemptSpec{}}
	ids := r.URL.Query()["ids"]
	f.mu.Lock()
	defer f.mu.Unlock()
	f.readSizes = append(f.readSizes, len(ids))
	for _, text := range ids {
		id, _ := strconv.ParseInt(text, 10, 64)
		f.gets = append(f.gets, id)
		spec, ok := f.attempts[id]
		if ok && (spec.WorkerId == nil || *spec.WorkerId == r.PathValue("id")) {
			out.Attempts = append(out.Attempts, spec)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// reads returns the number of ids of each batched read, in order.
func (f *fakeAPI) readBatches() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.readSizes...)
}

func (f *fakeAPI) report(w http.ResponseWriter, r *http.Request) {
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	var rep workerapi.AttemptReport
	if err := json.NewDecoder(r.Body).Decode(&rep); err != nil {
		problem.Write(w, problem.New(http.StatusBadRequest, problem.CodeBadRequest, err.Error()))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failReports > 0 {
		f.failReports--
		problem.Write(w, problem.New(http.StatusServiceUnavailable, problem.CodeUnavailable, "database restarting"))
		return
	}
	f.recordLocked(id, rep)
	writeJSON(w, http.StatusOK, workerapi.AttemptReportResponse{Proceed: true})
}

// recordLocked records report rep of attempt id (f.mu held); once the
// attempt ended, a read of it answers its state and proceed false, as the
// api's does.
func (f *fakeAPI) recordLocked(id int64, rep workerapi.AttemptReport) {
	f.reports[id] = append(f.reports[id], rep)
	if spec, ok := f.attempts[id]; ok && rep.State != api.TaskStateBUILDING && rep.State != api.TaskStateRUNNING {
		spec.State, spec.Proceed = rep.State, false
		f.attempts[id] = spec
	}
}

// reportBatch records a batch's reports and logs in order, as the api does; a
// failing report fails the whole batch (503), as a database error would.
func (f *fakeAPI) reportBatch(w http.ResponseWriter, r *http.Request) {
	var b workerapi.ReportBatch
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
		problem.Write(w, problem.New(http.StatusBadRequest, problem.CodeBadRequest, err.Error()))
		return
	}
	f.mu.Lock()
	latency, hold := f.batchLatency, f.hold
	if hold != nil {
		f.holding++
	}
	f.mu.Unlock()
	if hold != nil {
		<-hold // an api waiting on a lock
	}
	<-time.After(latency) // a slow api: reports made meanwhile queue up
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failReports > 0 {
		f.failReports--
		problem.Write(w, problem.New(http.StatusServiceUnavailable, problem.CodeUnavailable, "database restarting"))
		return
	}
	f.batches = append(f.batches, len(b.Reports))
	out := workerapi.ReportBatchResult{Results: make([]workerapi.BatchedReportResult, len(b.Reports))}
	for i, it := range b.Reports {
		out.Results[i] = workerapi.BatchedReportResult{AttemptId: it.AttemptId, Proceed: true}
		if it.Logs != nil {
			if _, ok := f.attempts[it.AttemptId]; !ok {
				p := api.Problem{Status: http.StatusNotFound, Title: "Not Found", Code: "not_found"}
				out.Results[i] = workerapi.BatchedReportResult{AttemptId: it.AttemptId, Error: &p}
				continue
			}
			f.logs[it.AttemptId] = append(f.logs[it.AttemptId], *it.Logs...)
			f.appendedAfter[it.AttemptId] = append(f.appendedAfter[it.AttemptId], len(f.reports[it.AttemptId]))
			continue
		}
		f.recordLocked(it.AttemptId, *it.Report)
	}
	if b.Heartbeat != nil {
		stop, ok := f.beatLocked(r.PathValue("id"), *b.Heartbeat)
		if !ok {
			problem.Write(w, problem.New(http.StatusNotFound, problem.CodeNotFound, "no such worker"))
			return
		}
		f.riders++
		out.Stop = &stop
	}
	writeJSON(w, http.StatusOK, out)
}

// holdBatches keeps report batches from answering until release is called.
func (f *fakeAPI) holdBatches() (release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	hold := make(chan struct{})
	f.hold = hold
	return sync.OnceFunc(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.hold = nil
		close(hold)
	})
}

// heldBatches returns how many report batches holdBatches held.
func (f *fakeAPI) heldBatches() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.holding
}

// aloneBeats returns how many heartbeats came alone, not with a batch.
func (f *fakeAPI) aloneBeats() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.beats) - f.riders
}

// ridingBeats returns how many heartbeats rode along with a batch.
func (f *fakeAPI) ridingBeats() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.riders
}

// batchSizes returns the size of each report batch so far.
func (f *fakeAPI) batchSizes() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.batches...)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// addAttempt makes GET /v1/attempts/{id} answer spec.
func (f *fakeAPI) addAttempt(spec workerapi.AttemptSpec) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts[spec.Id] = spec
}

// forget makes worker id's heartbeats answer 404.
// revoke makes worker id's bound token answer 401, as the api does once the
// worker's record (and so its token) is deleted.
func (f *fakeAPI) revoke(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.revoked[id] = true
}

func (f *fakeAPI) forget(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgotten[id] = true
}

// stopOnNextBeat makes the next heartbeat ask for ids to be stopped.
func (f *fakeAPI) stopOnNextBeat(ids ...int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stop = append(f.stop, ids...)
}

func (f *fakeAPI) registered() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string{}, f.workers...)
}

// reads counts the reads of attempt id.
func (f *fakeAPI) reads(id int64) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, g := range f.gets {
		if g == id {
			n++
		}
	}
	return n
}

func (f *fakeAPI) fetched(id int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, g := range f.gets {
		if g == id {
			return true
		}
	}
	return false
}

func (f *fakeAPI) reportsOf(id int64) []workerapi.AttemptReport {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]workerapi.AttemptReport{}, f.reports[id]...)
}

func (f *fakeAPI) states(id int64) []api.TaskState {
	var out []api.TaskState
	for _, r := range f.reportsOf(id) {
		out = append(out, r.State)
	}
	return out
}

// sawBeatWith reports whether a heartbeat listed attempt id in state st.
func (f *fakeAPI) sawBeatWith(id int64, st api.TaskState) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range f.beats {
		if b.Attempts == nil {
			continue
		}
		for _, a := range *b.Attempts {
			if a.Id == id && a.State == st {
				return true
			}
		}
	}
	return false
}

// deregistered returns the ids deregistered, in order.
func (f *fakeAPI) deregistered() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string{}, f.deleted...)
}

// registrations returns the registration requests, in order.
func (f *fakeAPI) registrations() []workerapi.RegisterWorkerRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]workerapi.RegisterWorkerRequest{}, f.regs...)
}

// sawDrainingBeat reports whether a heartbeat said the worker is draining.
func (f *fakeAPI) sawDrainingBeat() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range f.beats {
		if b.Draining != nil && *b.Draining {
			return true
		}
	}
	return false
}

func (f *fakeAPI) appendLogs(w http.ResponseWriter, r *http.Request) {
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	var body workerapi.LogChunks
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		problem.Write(w, problem.New(http.StatusBadRequest, problem.CodeBadRequest, err.Error()))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.attempts[id]; !ok {
		problem.Write(w, problem.New(http.StatusNotFound, problem.CodeNotFound, "no such attempt"))
		return
	}
	f.logs[id] = append(f.logs[id], body.Chunks...)
	f.appendedAfter[id] = append(f.appendedAfter[id], len(f.reports[id]))
	w.WriteHeader(http.StatusNoContent)
}

// logsOf returns attempt id's appended output per stream and, for each
// append, how many reports of it had arrived before.
func (f *fakeAPI) logsOf(id int64) (map[string]string, []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]string{}
	for _, c := range f.logs[id] {
		out[string(c.Stream)] += c.Data
	}
	return out, append([]int(nil), f.appendedAfter[id]...)
}

// existingRuns answers which of the runs asked about are in f.runs, as the
// api does (up to 1,000 a request).
func (f *fakeAPI) existingRuns(w http.ResponseWriter, r *http.Request) {
	var req workerapi.ExistingRunsRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Runs) == 0 || len(req.Runs) > 1000 {
		problem.Write(w, problem.New(http.StatusBadRequest, problem.CodeBadRequest, "runs: 1 to 1000"))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, len(req.Runs))
	out := workerapi.RunRefList{Runs: []workerapi.RunRef{}}
	for _, k := range req.Runs {
		if f.runs[domain.RunKey{Project: k.Project, Domain: k.Domain, Run: k.Run}] {
			out.Runs = append(out.Runs, k)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// liveAttempts answers which of the attempts asked about are in f.live.
func (f *fakeAPI) liveAttempts(w http.ResponseWriter, r *http.Request) {
	var req workerapi.LiveAttemptsRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Attempts) == 0 || len(req.Attempts) > 1000 {
		problem.Write(w, problem.New(http.StatusBadRequest, problem.CodeBadRequest, "attempts: 1 to 1000"))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := workerapi.AttemptIDList{Attempts: []int64{}}
	for _, id := range req.Attempts {
		if f.live[id] {
			out.Attempts = append(out.Attempts, id)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// askedRuns returns the number of runs of each runs question so far.
func (f *fakeAPI) askedRuns() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.asked...)
}
