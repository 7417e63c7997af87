package supervisor

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/domain"
)

// dirs are an attempt's directories.
type dirs struct {
	// work is <data>/attempts/<attempt id>, the process's working directory.
	work string
	// run is <data>/runs/<project>/<domain>/<run>, shared by every task of
	// the run that runs on this host (or on a shared volume).
	run string
	// outputs is <work>/.capstan/outputs, $CAPSTAN_OUTPUTS_DIR: the process
	// writes each declared output to a file there.
	outputs string
	// inputs is <work>/.capstan/inputs, $CAPSTAN_INPUTS_DIR: a file per
	// input, written before the process starts.
	inputs string
}

// prepare creates the attempt's work, run, outputs and inputs directories,
// once no removal of a leftover holds them (awaitRemoval), and writes the
// inputs' files. Errors: a name that is not a valid path
// element, or a directory or file that cannot be made.
func (s *Supervisor) prepare(spec api.AttemptSpec) (dirs, error) {
	for _, name := range []string{spec.Project, spec.Domain, spec.Run} {
		if !domain.ValidName(name) {
			return dirs{}, fmt.Errorf("invalid name %q in the attempt's run key", name)
		}
	}
	d := dirs{
		work: s.workDir(spec.Id),
		run:  s.runDir(domain.RunKey{Project: spec.Project, Domain: spec.Domain, Run: spec.Run}),
	}
	d.outputs, d.inputs = filepath.Join(d.work, ".capstan", "outputs"), filepath.Join(d.work, ".capstan", "inputs")
	s.awaitRemoval(d.work, d.run) // a sweep that found neither held may be removing them
	for _, dir := range []string{d.work, d.run, d.outputs, d.inputs} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return dirs{}, fmt.Errorf("create directory: %w", err)
		}
	}
	if spec.Inputs != nil {
		if err := writeInputs(d.inputs, *spec.Inputs); err != nil {
			return dirs{}, err
		}
	}
	if err := s.chownToRunAs(d); err != nil {
		return dirs{}, err
	}
	return d, nil
}

// chownToRunAs gives Config.RunAs's user the attempt's fresh work
// directory, all of it (the input files too), and the run's shared
// directory itself (what tasks write in it is theirs already): a task
// writes its outputs and files there. No RunAs: nothing to do.
func (s *Supervisor) chownToRunAs(d dirs) error {
	if s.cfg.RunAs == nil {
		return nil
	}
	uid, gid := int(s.cfg.RunAs.UID), int(s.cfg.RunAs.GID)
	err := filepath.WalkDir(d.work, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
	if err == nil {
		err = os.Lchown(d.run, uid, gid)
	}
	if err != nil {
		return fmt.Errorf("give the attempt's directories to %s: %w", s.cfg.RunAs, err)
	}
	return nil
}

// removeWorkDir deletes an ended attempt's work directory; a failure is only
// logged.
func (s *Supervisor) removeWorkDir(dir string) {
	if err := os.RemoveAll(dir); err != nil {
		s.log.Warn("remove work directory failed", "dir", dir, "err", err)
	}
}

// hostEnv is the executor's own environment without its CAPSTAN_* settings
// (the Redis address, the api's URL: user code has no business with them).
// A host process gets it, then attemptEnv.
func hostEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "CAPSTAN_") })
}

// attemptEnv is the attempt's own environment: the spec's env (in key
// order), then the inputs (see inputEnv), then the attempt's CAPSTAN_*
// variables, which win.
func attemptEnv(spec api.AttemptSpec, d dirs) []string {
	env := make([]string, 0, len(spec.Env)+16)
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		env = append(env, k+"="+spec.Env[k])
	}
	if spec.Inputs != nil {
		env = append(env, inputEnv(*spec.Inputs)...)
	}
	return append(env,
		"CAPSTAN_RUN_DIR="+d.run,
		"CAPSTAN_WORK_DIR="+d.work,
		"CAPSTAN_OUTPUTS_DIR="+d.outputs,
		"CAPSTAN_INPUTS_DIR="+d.inputs,
		"CAPSTAN_TASK_INDEX="+strconv.Itoa(spec.TaskIndex),
		"CAPSTAN_REPLICAS="+strconv.Itoa(spec.Replicas),
		"CAPSTAN_ATTEMPT="+strconv.Itoa(spec.Number),
		"CAPSTAN_ATTEMPT_ID="+strconv.FormatInt(spec.Id, 10),
		"CAPSTAN_PROJECT="+spec.Project,
		"CAPSTAN_DOMAIN="+spec.Domain,
		"CAPSTAN_RUN="+spec.Run,
		"CAPSTAN_ACTION="+spec.Action,
	)
}
