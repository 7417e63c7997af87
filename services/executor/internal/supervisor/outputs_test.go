package supervisor_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/services/executor/internal/supervisor"
	"github.com/stretchr/testify/require"
)

// withIO is spec(id, command) with declared outputs and resolved inputs.
func withIO(id int64, command string, outputs []string, inputs map[string]string) workerapi.AttemptSpec {
	s := spec(id, command)
	if outputs != nil {
		s.Outputs = &outputs
	}
	if inputs != nil {
		s.Inputs = &inputs
	}
	return s
}

func TestOutputsAreReadAndReportedAsWritten(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	data := t.TempDir()
	s := newSupervisor(t, rec, supervisor.Config{DataDir: data})
	cmd := `printf 3 > "$CAPSTAN_OUTPUTS_DIR/count"
		echo hello > "$CAPSTAN_OUTPUTS_DIR/msg"
		printf 'two\n\n' > "$CAPSTAN_OUTPUTS_DIR/lines"
		: > "$CAPSTAN_OUTPUTS_DIR/empty"
		head -c 1048000 /dev/zero | tr '\0' x > "$CAPSTAN_OUTPUTS_DIR/max"
		echo "$CAPSTAN_OUTPUTS_DIR $CAPSTAN_INPUTS_DIR"`
	require.NoError(t, s.Start(withIO(1, cmd, []string{"count", "msg", "lines", "empty", "max"}, nil)))

	final := rec.await(t, 1, api.TaskStateSUCCEEDED)
	require.NotNil(t, final.Outputs)
	outs := *final.Outputs
	require.Equal(t, strings.Repeat("x", 1048000), outs["max"], "a value near 1 MiB is allowed")
	delete(outs, "max")
	require.Equal(t, map[string]string{"count": "3", "msg": "hello", "lines": "two\n", "empty": ""},
		outs, "values are kept as written less one trailing newline")
	work := filepath.Join(data, "attempts", "1")
	require.Equal(t, filepath.Join(work, ".capstan", "outputs")+" "+filepath.Join(work, ".capstan", "inputs")+"\n",
		*final.Stdout, "the directories are the attempt's own, inside its work directory")
	require.Nil(t, final.Cause)
}

func TestMissingOutputFailsTheAttemptNamingIt(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	s := newSupervisor(t, rec, supervisor.Config{})
	require.NoError(t, s.Start(withIO(1, `echo 3 > "$CAPSTAN_OUTPUTS_DIR/count"; echo done`,
		[]string{"count", "total"}, nil)))

	final := rec.await(t, 1, api.TaskStateFAILED)
	require.Equal(t, workerapi.User, *final.Cause)
	require.Equal(t, `output "total" was not written to $CAPSTAN_OUTPUTS_DIR/total`, *final.Error)
	require.Equal(t, 0, *final.ExitCode, "the process itself succeeded")
	require.Equal(t, "done\n", *final.Stdout)
	require.Nil(t, final.Outputs, "a failed attempt reports no outputs")
}

func TestOutputsOutOfBoundsFailTheAttempt(t *testing.T) {
	t.Parallel()
	// 17 outputs of 64 KiB: each within its bound, together past 1 MiB.
	many := make([]string, 17)
	for i := range many {
		many[i] = "o" + strconv.Itoa(i)
	}
	cases := []struct {
		name, cmd string
		outputs   []string
		err       string
	}{
		{"over 1 MiB a value", `head -c 1048577 /dev/zero | tr '\0' x > "$CAPSTAN_OUTPUTS_DIR/big"`, []string{"big"},
			`output "big" is over 1048576 bytes (1 MiB)`},
		{"over 1 MiB a task", `for n in $(seq 0 16); do head -c 65536 /dev/zero | tr '\0' x > "$CAPSTAN_OUTPUTS_DIR/o$n"; done`,
			many, `outputs pass 1048576 bytes (1 MiB) a task at output "o16"`},
		{"NUL", `printf 'a\000b' > "$CAPSTAN_OUTPUTS_DIR/bin"`, []string{"bin"}, `output "bin" contains a NUL byte`},
		{"not UTF-8", `printf '\377' > "$CAPSTAN_OUTPUTS_DIR/bin"`, []string{"bin"}, `output "bin" is not UTF-8 text`},
		{"symlink", `ln -s /etc/hostname "$CAPSTAN_OUTPUTS_DIR/link"`, []string{"link"},
			`output "link" is not a readable regular file in $CAPSTAN_OUTPUTS_DIR`},
		{"FIFO", `mkfifo "$CAPSTAN_OUTPUTS_DIR/pipe"`, []string{"pipe"},
			`output "pipe" is not a regular file in $CAPSTAN_OUTPUTS_DIR`},
		{"bad name", `true`, []string{"../etc"}, `output name "../etc" is not an environment-variable name`},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			s := newSupervisor(t, rec, supervisor.Config{})
			id := int64(i + 1)
			require.NoError(t, s.Start(withIO(id, c.cmd, c.outputs, nil)))
			final := rec.await(t, id, api.TaskStateFAILED)
			require.Equal(t, workerapi.User, *final.Cause)
			require.Equal(t, c.err, *final.Error)
			require.Nil(t, final.Outputs)
		})
	}
}

func TestInputsArriveAsEnvAndFiles(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	s := newSupervisor(t, rec, supervisor.Config{})
	big := strings.Repeat("y", 200<<10) // past Linux's bound on one environment string
	inputs := map[string]string{"COUNT": "3\n", "GREETING": "from input", "BIG": big}
	cmd := `printf '[%s]' "$COUNT" "$GREETING" "${BIG-unset}"
		cat "$CAPSTAN_INPUTS_DIR/COUNT"
		wc -c < "$CAPSTAN_INPUTS_DIR/BIG" | tr -d ' '`
	require.NoError(t, s.Start(withIO(1, cmd, nil, inputs)))

	final := rec.await(t, 1, api.TaskStateSUCCEEDED)
	size := strconv.Itoa(len(big))
	require.Equal(t, "[3\n][from input][unset]3\n"+size+"\n", *final.Stdout,
		"an input wins over the step's env of the same name; one too large for the environment is a file only")
	require.Nil(t, final.Outputs)
}

func TestBadInputNameFailsBeforeStarting(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	s := newSupervisor(t, rec, supervisor.Config{})
	require.NoError(t, s.Start(withIO(1, "touch started", nil, map[string]string{"a/b": "x"})))
	final := rec.await(t, 1, api.TaskStateFAILED)
	require.Equal(t, workerapi.User, *final.Cause)
	require.Equal(t, `input name "a/b" is not an environment-variable name`, *final.Error)
	require.Equal(t, []api.TaskState{api.TaskStateBUILDING, api.TaskStateFAILED}, rec.states(1))
}

func TestNoopReportsDeclaredOutputsEmpty(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	s := newSupervisor(t, rec, supervisor.Config{})
	noop := withIO(7, "", []string{"count"}, nil)
	noop.Plugin = "noop"
	require.NoError(t, s.Start(noop))
	final := rec.await(t, 7, api.TaskStateSUCCEEDED)
	require.Equal(t, map[string]string{"count": ""}, *final.Outputs)
}

// TestOutputsRefuseASymlinkedDirectory: the executor reads outputs through
// no symlink below the work directory: an outputs directory, or the
// .capstan directory above it, replaced by a symlink to files elsewhere
// (another attempt's, the host's) fails the attempt, and nothing of the
// target is reported.
func TestOutputsRefuseASymlinkedDirectory(t *testing.T) {
	t.Parallel()
	elsewhere := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(elsewhere, "outputs"), 0o755))
	for _, f := range []string{filepath.Join(elsewhere, "out"), filepath.Join(elsewhere, "outputs", "out")} {
		require.NoError(t, os.WriteFile(f, []byte("not the attempt's"), 0o644))
	}
	cases := []struct{ name, cmd string }{
		{"outputs directory", `rm -rf "$CAPSTAN_OUTPUTS_DIR" && ln -s ` + elsewhere + ` "$CAPSTAN_OUTPUTS_DIR"`},
		{".capstan directory", `mv "$CAPSTAN_WORK_DIR/.capstan" "$CAPSTAN_WORK_DIR/old" && ln -s ` + elsewhere +
			` "$CAPSTAN_WORK_DIR/.capstan"`},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			s := newSupervisor(t, rec, supervisor.Config{})
			id := int64(i + 1)
			require.NoError(t, s.Start(withIO(id, c.cmd, []string{"out"}, nil)))
			final := rec.await(t, id, api.TaskStateFAILED)
			require.Equal(t, workerapi.User, *final.Cause)
			require.Contains(t, *final.Error, "$CAPSTAN_OUTPUTS_DIR is not the attempt's directory any more")
			require.Nil(t, final.Outputs)
		})
	}
}
