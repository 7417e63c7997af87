package plugin

import "context"

// Noop is the noop plugin: no process and no directory; an attempt succeeds
// at once with exit code 0 and each declared output empty (so a workflow's
// shape can be tried with noop steps whose consumers get their inputs).
type Noop struct{}

var (
	_ Plugin      = Noop{}
	_ WorkDirless = Noop{}
)

// WorkDirless marks Noop as needing no work directory.
func (Noop) WorkDirless() {}

// Handle answers PhaseSuccess at once.
func (Noop) Handle(_ context.Context, t *Task) (Transition, error) {
	zero := 0
	outs := make(map[string]string, len(t.Outputs))
	for _, name := range t.Outputs {
		outs[name] = ""
	}
	return Transition{Phase: PhaseSuccess, ExitCode: &zero, Outputs: outs}, nil
}

// Abort does nothing: nothing runs.
func (Noop) Abort(context.Context, *Task) error { return nil }

// Finalize does nothing: nothing is left.
func (Noop) Finalize(context.Context, *Task) error { return nil }
