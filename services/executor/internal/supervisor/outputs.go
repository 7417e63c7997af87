package supervisor

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
)

// A step's outputs and inputs (KubeVela's): each task writes each declared
// output to the file $CAPSTAN_OUTPUTS_DIR/<name>, read after the process
// exits 0; each input, a value of an earlier step's output resolved by the
// control plane, arrives as the environment variable NAME and the file
// $CAPSTAN_INPUTS_DIR/NAME. Values are kept exactly as written, trailing
// newline included: `echo 3 > "$CAPSTAN_OUTPUTS_DIR/count"` outputs "3\n",
// `printf 3` outputs "3".

const (
	// maxEnvString is Linux's bound on one environment string, "NAME=value"
	// and its NUL (MAX_ARG_STRLEN): execve fails past it.
	maxEnvString = 128 << 10
	// maxInputEnvBytes bounds the inputs' environment strings together,
	// well inside the kernel's bound on a process's arguments and
	// environment (ARG_MAX, usually 2 MiB).
	maxInputEnvBytes = 512 << 10
)

// checkIONames returns an error naming the first declared output or input
// whose name is not an environment-variable name (so not a safe file name
// either); the attempt then fails with cause user before anything starts.
func checkIONames(spec api.AttemptSpec) error {
	if spec.Outputs != nil {
		for _, name := range *spec.Outputs {
			if !domain.ValidOutputName(name) {
				return fmt.Errorf("output name %q is not an environment-variable name", name)
			}
		}
	}
	if spec.Inputs != nil {
		for _, name := range slices.Sorted(maps.Keys(*spec.Inputs)) {
			if !domain.ValidOutputName(name) {
				return fmt.Errorf("input name %q is not an environment-variable name", name)
			}
		}
	}
	return nil
}

// writeInputs writes each input's value to dir/NAME. Names were checked by
// checkIONames.
func writeInputs(dir string, inputs map[string]string) error {
	for _, name := range slices.Sorted(maps.Keys(inputs)) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(inputs[name]), 0o644); err != nil {
			return fmt.Errorf("write input %q: %w", name, err)
		}
	}
	return nil
}

// inputEnv returns the inputs as "NAME=value" strings, in name order. An
// input too large for the environment (a string over maxEnvString, or past
// maxInputEnvBytes for all of them) is left out of it: it arrives as its
// file only, where execve would otherwise fail the attempt. A step with
// replicas > 1 can make one that large (a JSON array of its tasks' values).
func inputEnv(inputs map[string]string) []string {
	var env []string
	total := 0
	for _, name := range slices.Sorted(maps.Keys(inputs)) {
		kv := name + "=" + inputs[name]
		if len(kv)+1 > maxEnvString || total+len(kv)+1 > maxInputEnvBytes {
			continue
		}
		total += len(kv) + 1
		env = append(env, kv)
	}
	return env
}

// withOutputs adds the declared outputs to a SUCCEEDED report, read from
// dir. An output missing, unreadable or out of bounds turns the report into
// FAILED with cause user and an error naming each such output (exit code and
// logs stay). Other reports are returned as they are.
func withOutputs(rep api.AttemptReport, dir string, names []string) api.AttemptReport {
	if rep.State != api.TaskStateSUCCEEDED || len(names) == 0 {
		return rep
	}
	outs, err := readOutputs(dir, names)
	if err != nil {
		rep.State, rep.Cause, rep.Code, rep.Error = api.TaskStateFAILED, ptr(api.User), ptr(codeInvalidOutputs),
			ptr(clip(err.Error()))
		return rep
	}
	rep.Outputs = &outs
	return rep
}

// readOutputs reads each named output from dir. Errors: one per output not
// written, not a regular file, over MaxOutputValueBytes, not UTF-8 text or
// holding NUL (Postgres's jsonb takes neither), and one when the values
// together pass MaxTaskOutputBytes (the outputs after it are not read).
func readOutputs(dir string, names []string) (map[string]string, error) {
	outs := make(map[string]string, len(names))
	var errs []string
	total := 0
	for _, name := range names {
		v, err := readOutput(dir, name)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if total += len(v); total > domain.MaxTaskOutputBytes {
			errs = append(errs, fmt.Sprintf("outputs pass %d bytes (1 MiB) a task at output %q",
				domain.MaxTaskOutputBytes, name))
			break
		}
		outs[name] = v
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "; "))
	}
	return outs, nil
}

// readOutput reads output name from dir. It opens the file without
// following a symlink and without blocking on a FIFO, and reads at most one
// byte past the bound.
func readOutput(dir, name string) (string, error) {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("output %q was not written to $CAPSTAN_OUTPUTS_DIR/%s", name, name)
	}
	if err != nil {
		return "", fmt.Errorf("output %q is not a readable regular file in $CAPSTAN_OUTPUTS_DIR", name)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("output %q is not a regular file in $CAPSTAN_OUTPUTS_DIR", name)
	}
	b, err := io.ReadAll(io.LimitReader(f, domain.MaxOutputValueBytes+1))
	switch {
	case err != nil:
		return "", fmt.Errorf("output %q could not be read: %v", name, err)
	case len(b) > domain.MaxOutputValueBytes:
		return "", fmt.Errorf("output %q is over %d bytes (1 MiB)", name, domain.MaxOutputValueBytes)
	case !utf8.Valid(b):
		return "", fmt.Errorf("output %q is not UTF-8 text", name)
	case slices.Contains(b, 0):
		return "", fmt.Errorf("output %q contains a NUL byte", name)
	}
	return string(b), nil
}

// declaredOutputs returns the names of the outputs spec's step declares.
func declaredOutputs(spec api.AttemptSpec) []string {
	if spec.Outputs == nil {
		return nil
	}
	return *spec.Outputs
}
