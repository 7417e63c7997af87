package domain_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

// Flyte's AbortReconciler: the dedupe queue's key is "formatted as
// project/domain/run/actionName"; Capstan writes every action key as
// project/domain/run/action.
func TestActionKeyString(t *testing.T) {
	t.Parallel()
	run := domain.RunKey{Project: "proj", Domain: "dev", Run: "r-1"}
	require.Equal(t, "proj/dev/r-1", run.String())
	root := run.Action(domain.RootActionName)
	require.Equal(t, "proj/dev/r-1/a0", root.String())
	require.Equal(t, run, root.RunKey)
	require.Equal(t, "a0", root.Action)
}

func TestParseActionKey(t *testing.T) {
	t.Parallel()
	k, err := domain.ParseActionKey("proj/dev/r-1/build")
	require.NoError(t, err)
	require.Equal(t, domain.ActionKey{RunKey: domain.RunKey{Project: "proj", Domain: "dev", Run: "r-1"}, Action: "build"}, k)

	// Round trip.
	in := domain.RunKey{Project: "p", Domain: "d", Run: "r"}.Action("a0")
	out, err := domain.ParseActionKey(in.String())
	require.NoError(t, err)
	require.Equal(t, in, out)

	for _, bad := range []string{
		"", "p/d/r", "p/d/r/a/x", "p//r/a", "p/d/r/", "/d/r/a",
		"P/d/r/a", "p/d/r/A", "p/d_x/r/a", "p/d/r/-a", "p/d/r/a b",
	} {
		_, err := domain.ParseActionKey(bad)
		require.Error(t, err, "ParseActionKey(%q)", bad)
	}
}
