package domain

import (
	"fmt"
	"strings"
)

// RunKey identifies a run: project/domain/run.
type RunKey struct {
	Project string
	Domain  string
	Run     string
}

// String renders "project/domain/run".
func (k RunKey) String() string { return k.Project + "/" + k.Domain + "/" + k.Run }

// Action returns the key of the run's action named name.
func (k RunKey) Action(name string) ActionKey { return ActionKey{RunKey: k, Action: name} }

// ActionKey identifies an action: project/domain/run/action. Its string form
// is the action:abort task's asynq TaskID, the key Flyte's AbortReconciler
// dedupes its queue by.
type ActionKey struct {
	RunKey
	Action string
}

// String renders "project/domain/run/action".
func (k ActionKey) String() string { return k.RunKey.String() + "/" + k.Action }

// ParseActionKey parses "project/domain/run/action"; every part must be a
// valid name.
func ParseActionKey(s string) (ActionKey, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 4 {
		return ActionKey{}, fmt.Errorf("action key %q: want project/domain/run/action", s)
	}
	for _, p := range parts {
		if !ValidName(p) {
			return ActionKey{}, fmt.Errorf("action key %q: invalid name %q", s, p)
		}
	}
	return ActionKey{RunKey: RunKey{parts[0], parts[1], parts[2]}, Action: parts[3]}, nil
}
