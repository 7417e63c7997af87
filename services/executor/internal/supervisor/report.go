package supervisor

import (
	"cmp"
	"strings"
	"unicode/utf8"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/services/executor/internal/plugin"
)

// maxErrorBytes is the API's bound on a report's error.
const maxErrorBytes = 4000

// codeInvalidOutputs: a declared output or input name is invalid, or an
// output was not written as it must be.
const codeInvalidOutputs = "InvalidOutputs"

// systemFailure is the final report of an attempt the platform could not
// run (no work dir, a program that cannot be executed, a container runtime
// that failed): FAILED, cause system, with code.
func systemFailure(code string, err error) workerapi.AttemptReport {
	return failure(workerapi.System, code, err.Error())
}

// permanentFailure is the final report of an attempt whose spec can never
// run (an unknown plugin, invalid fields): FAILED, cause permanent, with
// code.
func permanentFailure(code string, err error) workerapi.AttemptReport {
	return failure(workerapi.Permanent, code, err.Error())
}

// userFailure is the final report of an attempt its step's own spec cannot
// run (an invalid output or input name): FAILED, cause user, with code.
func userFailure(code string, err error) workerapi.AttemptReport {
	return failure(workerapi.User, code, err.Error())
}

func failure(cause workerapi.AttemptReportCause, code, msg string) workerapi.AttemptReport {
	return workerapi.AttemptReport{State: api.TaskStateFAILED, Cause: ptr(cause), Code: ptr(code), Error: ptr(clip(msg))}
}

// killed is the final report of a stopped attempt, with the stop's cause
// and reason, and the work's exit and output when it had started (last). Its
// state follows the cause: worker_lost is WORKER_FAILED and preempted is
// PREEMPTED, which the scheduler retries under the preemption budget; aborted
// and timeout are KILLED, which it never retries.
func killed(r stopReason, last *plugin.Transition) workerapi.AttemptReport {
	rep := workerapi.AttemptReport{State: stateOf(r.cause), Cause: ptr(r.cause),
		Error: ptr(clip(cmp.Or(r.reason, "killed: "+string(r.cause))))}
	if last != nil {
		withOutput(&rep, *last)
	}
	return rep
}

func stateOf(cause workerapi.AttemptReportCause) api.TaskState {
	switch cause {
	case workerapi.WorkerLost:
		return api.TaskStateWORKERFAILED
	case workerapi.Preempted:
		return api.TaskStatePREEMPTED
	}
	return api.TaskStateKILLED
}

// withTransition is the final report of work that ended by itself:
// SUCCEEDED, or FAILED with cause user (PhaseRetryableFailure), permanent
// (PhasePermanentFailure) or waiting (PhaseWaiting) and the transition's
// code, or WORKER_FAILED with cause worker_lost (PhaseLost). A SUCCEEDED
// report gets the declared outputs: the transition's, or else those read
// from t.OutputsDir (see withOutputs), each a file of owner's when it is not
// negative.
func withTransition(tr plugin.Transition, t *plugin.Task, owner int) workerapi.AttemptReport {
	var rep workerapi.AttemptReport
	switch tr.Phase {
	case plugin.PhaseSuccess:
		rep.State = api.TaskStateSUCCEEDED
	case plugin.PhasePermanentFailure:
		rep = failure(workerapi.Permanent, tr.Code, tr.Err)
	case plugin.PhaseWaiting:
		rep = failure(workerapi.Waiting, tr.Code, tr.Err)
	case plugin.PhaseLost:
		rep = failure(workerapi.WorkerLost, tr.Code, tr.Err)
		rep.State = api.TaskStateWORKERFAILED
	default:
		rep = failure(workerapi.User, tr.Code, tr.Err)
	}
	withOutput(&rep, tr)
	if tr.Outputs != nil {
		if rep.State == api.TaskStateSUCCEEDED && len(tr.Outputs) > 0 {
			rep.Outputs = &tr.Outputs
		}
		return rep
	}
	return withOutputs(rep, t.Dir, owner, t.Outputs)
}

// withOutput adds the work's exit code (when a process ran) and output.
func withOutput(rep *workerapi.AttemptReport, tr plugin.Transition) {
	rep.ExitCode = tr.ExitCode
	rep.Stdout, rep.Stderr = ptr(logText(tr.Stdout, tr.Truncated)), ptr(logText(tr.Stderr, tr.Truncated))
	rep.Truncated = ptr(tr.Truncated)
}

// logText turns kept output into text Postgres accepts: a rune cut by the
// truncation is dropped, invalid UTF-8 becomes U+FFFD and NUL bytes are
// removed.
func logText(b []byte, truncated bool) string {
	if truncated {
		for i := 0; i < utf8.UTFMax-1 && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
			b = b[1:]
		}
	}
	return strings.ReplaceAll(strings.ToValidUTF8(string(b), "\uFFFD"), "\x00", "")
}

// clip bounds s to maxErrorBytes without cutting a rune.
func clip(s string) string {
	if len(s) <= maxErrorBytes {
		return s
	}
	return strings.ToValidUTF8(s[:maxErrorBytes], "")
}

func ptr[T any](v T) *T { return &v }
