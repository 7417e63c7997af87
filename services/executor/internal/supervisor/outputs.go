package supervisor

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"golang.org/x/sys/unix"
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
func checkIONames(spec workerapi.AttemptSpec) error {
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
// the work directory work's $CAPSTAN_OUTPUTS_DIR (see readOutputs). An
// output missing, unreadable or out of bounds turns the report into FAILED
// with cause user and an error naming each such output (exit code and logs
// stay). Other reports are returned as they are.
func withOutputs(rep workerapi.AttemptReport, work string, owner int, names []string) workerapi.AttemptReport {
	if rep.State != api.TaskStateSUCCEEDED || len(names) == 0 {
		return rep
	}
	outs, err := readOutputs(work, owner, names)
	if err != nil {
		rep.State, rep.Cause, rep.Code, rep.Error = api.TaskStateFAILED, ptr(workerapi.User), ptr(codeInvalidOutputs),
			ptr(clip(err.Error()))
		return rep
	}
	rep.Outputs = &outs
	return rep
}

// readOutputs reads each named output from work's outputs directory,
// work/.capstan/outputs, which the attempt's process may have changed: no
// component of the path below work may be a symlink (openat2 with
// RESOLVE_BENEATH and RESOLVE_NO_SYMLINKS), so the executor reads nothing
// but the attempt's own files. owner, when not negative, is the uid each
// file must belong to (a sandboxed attempt's: a hard link to another's
// file is refused). Errors: one per output not written, not a regular
// file, not owner's, over MaxOutputValueBytes, not UTF-8 text or holding
// NUL (Postgres's jsonb takes neither), and one when the values together
// pass MaxTaskOutputBytes (the outputs after it are not read); or the
// outputs directory is not the attempt's any more.
func readOutputs(work string, owner int, names []string) (map[string]string, error) {
	dir, err := openOutputsDir(work)
	if errors.Is(err, unix.ENOENT) {
		dir = -1 // every output is missing
	} else if err != nil {
		return nil, fmt.Errorf("$CAPSTAN_OUTPUTS_DIR is not the attempt's directory any more: %v", err)
	}
	if dir >= 0 {
		defer unix.Close(dir)
	}
	outs := make(map[string]string, len(names))
	var errs []string
	total := 0
	for _, name := range names {
		v, err := readOutput(dir, name, owner)
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

// beneath is how an output's path resolves: below the directory it starts
// from, through no symlink.
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openOutputsDir opens work's outputs directory (O_PATH) through no
// symlink; work itself is the executor's to name (its parent is not the
// attempt's).
func openOutputsDir(work string) (int, error) {
	wd, err := unix.Open(work, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(wd)
	return openBeneath(wd, outputsDir, unix.O_PATH|unix.O_DIRECTORY)
}

// openBeneath opens path below dir with flags, through no symlink: with
// openat2, or one component at a time with O_NOFOLLOW where the kernel has
// no openat2 (before Linux 5.6).
func openBeneath(dir int, path string, flags int) (int, error) {
	fd, err := unix.Openat2(dir, path, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: beneath})
	if !errors.Is(err, unix.ENOSYS) {
		return fd, err
	}
	parts := strings.Split(path, "/")
	at := dir
	for i, part := range parts {
		f := unix.O_PATH | unix.O_DIRECTORY
		if i == len(parts)-1 {
			f = flags
		}
		fd, err = unix.Openat(at, part, f|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if at != dir {
			unix.Close(at)
		}
		if err != nil {
			return -1, err
		}
		at = fd
	}
	return at, nil
}

// readOutput reads output name from the outputs directory dir (-1: none),
// less one trailing newline (Argo's rule for output parameters: `echo v >
// file` gives "v", as $(...) does in a shell; `printf` writes none). It
// opens the file through no symlink and without blocking on a FIFO, and
// reads at most one byte past the bound.
func readOutput(dir int, name string, owner int) (string, error) {
	fd, err := -1, error(unix.ENOENT)
	if dir >= 0 {
		fd, err = openBeneath(dir, name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW)
	}
	if errors.Is(err, unix.ENOENT) {
		return "", fmt.Errorf("output %q was not written to $CAPSTAN_OUTPUTS_DIR/%s", name, name)
	}
	if err != nil {
		return "", fmt.Errorf("output %q is not a readable regular file in $CAPSTAN_OUTPUTS_DIR", name)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("output %q is not a regular file in $CAPSTAN_OUTPUTS_DIR", name)
	}
	if owner >= 0 && fi.Sys().(*syscall.Stat_t).Uid != uint32(owner) {
		return "", fmt.Errorf("output %q is not a file of the attempt's own in $CAPSTAN_OUTPUTS_DIR", name)
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
	return strings.TrimSuffix(string(b), "\n"), nil
}

// declaredOutputs returns the names of the outputs spec's step declares.
func declaredOutputs(spec workerapi.AttemptSpec) []string {
	if spec.Outputs == nil {
		return nil
	}
	return *spec.Outputs
}
