package supervisor

import (
	"cmp"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/services/executor/internal/runner"
)

// maxErrorBytes is the API's bound on a report's error.
const maxErrorBytes = 4000

// systemFailure is the final report of an attempt the platform could not
// run (no work dir, no shell): FAILED, cause system.
func systemFailure(err error) api.AttemptReport {
	return api.AttemptReport{State: api.TaskStateFAILED, Cause: ptr(api.System), Error: ptr(clip(err.Error()))}
}

// userFailure is the final report of an attempt its step's own spec cannot
// run (an invalid output or input name): FAILED, cause user.
func userFailure(err error) api.AttemptReport {
	return api.AttemptReport{State: api.TaskStateFAILED, Cause: ptr(api.User), Error: ptr(clip(err.Error()))}
}

// killed is the final report of a stopped attempt, with the stop's cause
// and reason, and the process's exit and output when it had started. Its
// state follows the cause: worker_lost is WORKER_FAILED and preempted is
// PREEMPTED, which the scheduler retries under the preemption budget; aborted
// and timeout are KILLED, which it never retries.
func killed(r stopReason, res *runner.Result) api.AttemptReport {
	rep := api.AttemptReport{State: stateOf(r.cause), Cause: ptr(r.cause),
		Error: ptr(clip(cmp.Or(r.reason, "killed: "+string(r.cause))))}
	if res != nil {
		withOutput(&rep, *res)
	}
	return rep
}

func stateOf(cause api.AttemptReportCause) api.TaskState {
	switch cause {
	case api.WorkerLost:
		return api.TaskStateWORKERFAILED
	case api.Preempted:
		return api.TaskStatePREEMPTED
	}
	return api.TaskStateKILLED
}

// exitReport is the final report of a process that ended by itself:
// SUCCEEDED on exit 0, else FAILED with cause user.
func exitReport(res runner.Result) api.AttemptReport {
	rep := api.AttemptReport{State: api.TaskStateSUCCEEDED}
	if res.ExitCode != 0 {
		msg := fmt.Sprintf("exit status %d", res.ExitCode)
		if res.Signal != 0 {
			msg = fmt.Sprintf("killed by signal %d (%v)", int(res.Signal), res.Signal)
		}
		rep = api.AttemptReport{State: api.TaskStateFAILED, Cause: ptr(api.User), Error: ptr(msg)}
	}
	withOutput(&rep, res)
	return rep
}

func withOutput(rep *api.AttemptReport, res runner.Result) {
	rep.ExitCode = ptr(res.ExitCode)
	rep.Stdout, rep.Stderr = ptr(logText(res.Stdout, res.Truncated)), ptr(logText(res.Stderr, res.Truncated))
	rep.Truncated = ptr(res.Truncated)
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
