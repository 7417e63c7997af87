package server

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/obs"
	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/workerapi"
)

// GetAttempt gives an executor what it needs to run an attempt.
func (h *Handlers) GetAttempt(ctx context.Context, req workerapi.GetAttemptRequestObject) (workerapi.GetAttemptResponseObject, error) {
	r, err := attemptRun(ctx, h.store, int64(req.Id))
	if p, ok := problemFor(err, subject{kind: "attempt"}); ok && p.Status == http.StatusNotFound {
		return asNotFound[workerapi.GetAttempt404ApplicationProblemPlusJSONResponse](p), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read attempt %d: %w", req.Id, err)
	}
	spec, err := h.attemptSpec(ctx, r)
	return workerapi.GetAttempt200JSONResponse(spec), err
}

// GetWorkerAttempts gives an executor what it needs to run the attempts it
// was given together, in one read: the attempts of ids placed on its
// worker, by id, each with the bytes of output it shipped (log_bytes); the
// others (unknown, or another worker's) are left out.
func (h *Handlers) GetWorkerAttempts(ctx context.Context, req workerapi.GetWorkerAttemptsRequestObject) (workerapi.GetWorkerAttemptsResponseObject, error) {
	runs, err := h.store.Attempts().GetAttemptRuns(ctx, req.Params.Ids)
	if err != nil {
		return nil, fmt.Errorf("read %d attempts of worker %s: %w", len(req.Params.Ids), req.Id, err)
	}
	runs = slices.DeleteFunc(runs, func(r store.AttemptRun) bool {
		return r.Attempt.WorkerID == nil || !strings.EqualFold(*r.Attempt.WorkerID, req.Id.String())
	})
	ends, err := h.logEnds(ctx, runs)
	if err != nil {
		return nil, fmt.Errorf("read the output of %d attempts of worker %s: %w", len(runs), req.Id, err)
	}
	out := workerapi.GetWorkerAttempts200JSONResponse{Attempts: make([]workerapi.AttemptSpec, 0, len(runs))}
	for _, r := range runs {
		spec, err := h.attemptSpec(ctx, r)
		if err != nil {
			return nil, err
		}
		spec.LogBytes = ptrTo(ends[r.Attempt.ID])
		out.Attempts = append(out.Attempts, spec)
	}
	return out, nil
}

// logEnds is the bytes of output each of runs shipped (store.LogEnds), by
// attempt id; it reads nothing when every one is ASSIGNED (not started: no
// output yet), as a dispatched attempt's read is.
func (h *Handlers) logEnds(ctx context.Context, runs []store.AttemptRun) (map[int64]int64, error) {
	var ids []int64
	for _, r := range runs {
		if r.Attempt.State != domain.TaskAssigned {
			ids = append(ids, r.Attempt.ID)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	return h.store.Logs().LogEnds(ctx, ids)
}

// attemptSpec is what an executor needs to run attempt r: its step's
// plugin fields and environment (with secret_env: only workers and admins
// read attempts) and its inputs resolved from their producers' outputs,
// with a for_each task's item (workerapi.WithItem).
func (h *Handlers) attemptSpec(ctx context.Context, r store.AttemptRun) (workerapi.AttemptSpec, error) {
	step := r.Action.Spec
	inputs, err := h.resolveInputs(ctx, domain.RunKey{Project: r.Task.Project, Domain: r.Task.Domain, Run: r.Task.RunName},
		step.Inputs)
	if err != nil {
		return workerapi.AttemptSpec{}, fmt.Errorf("resolve inputs of attempt %d: %w", r.Attempt.ID, err)
	}
	out, err := workerapi.NewAttemptSpec(r.Attempt.ID, r.Attempt.Number, domain.RunKey{Project: r.Task.Project,
		Domain: r.Task.Domain, Run: r.Task.RunName}.Action(r.Task.ActionName), r.Task.Idx, r.Attempt.WorkerID, step)
	if err != nil {
		return workerapi.AttemptSpec{}, fmt.Errorf("spec of attempt %d: %w", r.Attempt.ID, err)
	}
	out.State, out.Proceed = api.TaskState(r.Attempt.State.String()), r.Proceed
	if inputs != nil {
		out.Inputs = &inputs
	}
	workerapi.WithItem(&out, step, r.Task.Item)
	return out, nil
}

// ReportAttempt records a fact an executor reports; when the attempt ended it
// asks the scheduler to decide the task's fate. If that push fails the
// scheduler's resync finds the unevaluated attempt.
func (h *Handlers) ReportAttempt(ctx context.Context, req workerapi.ReportAttemptRequestObject) (workerapi.ReportAttemptResponseObject, error) {
	rep, bad, err := h.checkReport(ctx, int64(req.Id), req.Body)
	switch {
	case err != nil:
		return nil, err
	case bad != nil:
		return asBadRequest[workerapi.ReportAttempt400ApplicationProblemPlusJSONResponse](*bad), nil
	}
	ctx = context.WithoutCancel(ctx) // recorded even if the executor dies meanwhile (ReportAttempts)
	res, err := h.recordReport(ctx, int64(req.Id), rep)
	p, ok := problemFor(err, subject{kind: "attempt", state: rep.State.String()})
	switch {
	case ok && p.Status == http.StatusNotFound:
		return asNotFound[workerapi.ReportAttempt404ApplicationProblemPlusJSONResponse](p), nil
	case ok && p.Status == http.StatusConflict:
		return asConflict[workerapi.ReportAttempt409ApplicationProblemPlusJSONResponse](p), nil
	case err != nil:
		return nil, fmt.Errorf("record %s report of attempt %d: %w", rep.State, req.Id, err)
	}
	h.reported(rep, res)
	if res.Evaluate {
		h.evaluate(ctx, []int64{int64(req.Id)})
	}
	return workerapi.ReportAttempt200JSONResponse{Proceed: res.Proceed}, nil
}

// recordReport records rep about attempt id, from an executor not named:
// a batch of one (recordReports). Errors: store.ErrNotFound,
// store.ErrBadReport, and Postgres's.
func (h *Handlers) recordReport(ctx context.Context, id int64, rep store.Report) (store.ReportResult, error) {
	results, err := recordReports(ctx, h.store, "", []store.BatchedReport{{AttemptID: id, Report: rep}}, h.cfg.LogMaxBytes)
	if err != nil {
		return store.ReportResult{}, err
	}
	return results[0].ReportResult, results[0].Err
}

// checkReport checks an executor's report about attempt id and returns it
// in the store's form, with its logs and error masked of the attempt's
// secrets; bad is the 400 problem of a report that is not one. Errors:
// reading the secrets.
func (h *Handlers) checkReport(ctx context.Context, id int64, b *workerapi.AttemptReport) (rep store.Report, bad *api.Problem, err error) {
	state, _ := domain.ParseTaskState(string(b.State))
	if !state.IsTerminal() && state != domain.TaskPending && state != domain.TaskBuilding && state != domain.TaskRunning ||
		state == domain.TaskUnschedulable {
		const msg = "an executor reports BUILDING, RUNNING, SUCCEEDED, FAILED, KILLED, WORKER_FAILED or PREEMPTED (PENDING is ignored)"
		p := apiProblem(http.StatusBadRequest, problem.CodeInvalid, "state: "+msg, domain.FieldError{Field: "state", Message: msg})
		return rep, &p, nil
	}
	for _, f := range []struct {
		name string
		v    *int
	}{{"exit_code", b.ExitCode}, {"pid", b.Pid}} {
		if f.v != nil && (*f.v < math.MinInt32 || *f.v > math.MaxInt32) { // Postgres integer columns
			const msg = "must be a 32-bit integer"
			p := apiProblem(http.StatusBadRequest, problem.CodeInvalid, f.name+": "+msg, domain.FieldError{Field: f.name, Message: msg})
			return rep, &p, nil
		}
	}
	if errs := append(checkReport(b), checkOutputs(b.Outputs)...); len(errs) > 0 {
		p := apiProblem(http.StatusBadRequest, problem.CodeInvalid, errs[0].Field+": "+errs[0].Message, errs...)
		return rep, &p, nil
	}
	if b.Outputs != nil {
		h.metrics.payloads.Observe(obs.KindOutputs, outputsSize(*b.Outputs))
	}
	rep = toReport(state, b)
	if rep.Stdout != "" || rep.Stderr != "" || rep.Error != "" {
		secrets, err := h.store.Attempts().AttemptSecretValues(ctx, id)
		if err != nil {
			return rep, nil, fmt.Errorf("read secrets of attempt %d: %w", id, err)
		}
		rep.Stdout, rep.Stderr = domain.MaskSecrets(rep.Stdout, secrets), domain.MaskSecrets(rep.Stderr, secrets)
		rep.Error = domain.MaskSecrets(rep.Error, secrets)
	}
	return rep, nil, nil
}

// reported observes what a recorded report tells: the dispatch latency of
// an attempt that starts running.
func (h *Handlers) reported(rep store.Report, res store.ReportResult) {
	if rep.State == domain.TaskRunning && res.Proceed && res.Attempt.State != domain.TaskRunning {
		h.metrics.observeDispatch(res.Task, res.Attempt, time.Now())
	}
}

// evaluate asks the scheduler, in one message, to decide the fate of the
// tasks of attempts that ended. If that push fails the scheduler's resync
// finds the unevaluated attempts.
func (h *Handlers) evaluate(ctx context.Context, ids []int64) {
	if len(ids) == 0 {
		return
	}
	if err := h.queue.Enqueue(ctx, queue.NewTasksEvaluateTask(ids)); err != nil {
		h.log.Warn("enqueue task evaluate failed; resync will evaluate", "attempt_ids", ids, "err", err)
	}
}

// toReport is the store's form of an executor's report of state.
func toReport(state domain.TaskState, b *workerapi.ReportAttemptJSONRequestBody) store.Report {
	rep := store.Report{State: state, ExitCode: b.ExitCode, Pid: b.Pid}
	if b.Error != nil {
		rep.Error = *b.Error
	}
	if b.Cause != nil {
		rep.Cause = string(*b.Cause)
	}
	if b.Stdout != nil {
		rep.Stdout = *b.Stdout
	}
	if b.Stderr != nil {
		rep.Stderr = *b.Stderr
	}
	if b.Truncated != nil {
		rep.Truncated = *b.Truncated
	}
	if b.Outputs != nil {
		rep.Outputs = *b.Outputs
	}
	if b.PendingReason != nil && state == domain.TaskBuilding {
		rep.PendingReason = *b.PendingReason
	}
	withFailure(&rep, b)
	return rep
}

// attemptRun returns attempt id with its task and action: as the request's
// holder check read them, else from st. Errors: store.ErrNotFound.
func attemptRun(ctx context.Context, st *store.Store, id int64) (store.AttemptRun, error) {
	if p, ok := principalFrom(ctx); ok && p.attempt != nil && p.attempt.Attempt.ID == id {
		return *p.attempt, nil
	}
	return st.Attempts().GetAttemptRun(ctx, id)
}
