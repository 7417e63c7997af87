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

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/services/executor/internal/sandbox"
)

// dirs are an attempt's directories.
type dirs struct {
	// work is <data>/attempts/<attempt id>, the process's working directory
	// and, sandboxed, its $HOME.
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
	// tmp is <work>/.capstan/tmp, a sandboxed process's /tmp, /var/tmp and
	// /dev/shm; empty without a sandbox.
	tmp string
}

// outputsDir is dirs.outputs relative to the work directory.
const outputsDir = ".capstan/outputs"

// prepare creates the attempt's work, run, outputs and inputs directories,
// once no removal of a leftover holds them (awaitRemoval), and writes the
// inputs' files. Sandboxed, it also leases the attempt its user (box,
// which the caller closes once the attempt's processes are gone): the run
// directory is made with its run's group (sandbox.RunGroups), and the work
// directory, 0700, and all in it are the attempt's user's. Errors: a name
// that is not a valid path element, or a directory, file or lease that
// cannot be made.
func (s *Supervisor) prepare(spec workerapi.AttemptSpec) (dirs, *sandbox.Attempt, error) {
	for _, name := range []string{spec.Project, spec.Domain, spec.Run} {
		if !domain.ValidName(name) {
			return dirs{}, nil, fmt.Errorf("invalid name %q in the attempt's run key", name)
		}
	}
	d := dirs{
		work: s.workDir(spec.Id),
		run:  s.runDir(domain.RunKey{Project: spec.Project, Domain: spec.Domain, Run: spec.Run}),
	}
	d.outputs, d.inputs = filepath.Join(d.work, outputsDir), filepath.Join(d.work, ".capstan", "inputs")
	s.awaitRemoval(d.work, d.run) // a sweep that found neither held may be removing them
	if s.cfg.Sandbox == nil {
		return d, nil, s.makeDirs(spec, d, 0o755)
	}
	d.tmp = filepath.Join(d.work, ".capstan", "tmp")
	runGID, err := s.cfg.Sandbox.RunDir(d.run)
	if err != nil {
		return dirs{}, nil, err
	}
	box, err := s.cfg.Sandbox.Enter(spec.Id, runGID, resourcesOf(spec))
	if err != nil {
		return dirs{}, nil, err
	}
	if err := s.makeDirs(spec, d, 0o700); err != nil {
		_ = box.Close(true)
		return dirs{}, nil, err
	}
	if err := chownTree(d.work, box.UID(), box.UID()); err != nil {
		_ = box.Close(true)
		return dirs{}, nil, err
	}
	return d, box, nil
}

// makeDirs makes d's directories with mode (the run directory aside when
// sandboxed: it exists) and writes the inputs; without a sandbox it gives
// them to Config.RunAs's user.
func (s *Supervisor) makeDirs(spec workerapi.AttemptSpec, d dirs, mode os.FileMode) error {
	made := []string{d.work, d.outputs, d.inputs}
	if s.cfg.Sandbox == nil {
		made = append(made, d.run)
	}
	if d.tmp != "" {
		made = append(made, d.tmp)
	}
	for _, dir := range made {
		if err := os.MkdirAll(dir, mode); err != nil {
			return fmt.Errorf("create directory: %w", err)
		}
	}
	for _, dir := range []string{d.work, filepath.Dir(d.outputs)} {
		if err := os.Chmod(dir, mode); err != nil { // a leftover's, or made by MkdirAll under the umask
			return fmt.Errorf("create directory: %w", err)
		}
	}
	if spec.Inputs != nil {
		if err := writeInputs(d.inputs, *spec.Inputs); err != nil {
			return err
		}
	}
	if s.cfg.Sandbox == nil {
		return s.chownToRunAs(d)
	}
	return nil
}

// resourcesOf is the attempt's step's resources; zero when it declares
// none.
func resourcesOf(spec workerapi.AttemptSpec) domain.Resources {
	var r domain.Resources
	if spec.Resources != nil {
		r.CPUMillis, r.MemoryBytes = deref(spec.Resources.CpuMillis), deref(spec.Resources.MemoryBytes)
	}
	return r
}

// chownToRunAs gives Config.RunAs's user the attempt's fresh work
// directory, all of it (the input files too), and the run's shared
// directory itself (what tasks write in it is theirs already): a task
// writes its outputs and files there. No RunAs: nothing to do.
func (s *Supervisor) chownToRunAs(d dirs) error {
	if s.cfg.RunAs == nil {
		return nil
	}
	err := chownTree(d.work, s.cfg.RunAs.UID, s.cfg.RunAs.GID)
	if err == nil {
		err = os.Lchown(d.run, int(s.cfg.RunAs.UID), int(s.cfg.RunAs.GID))
	}
	if err != nil {
		return fmt.Errorf("give the attempt's directories to %s: %w", s.cfg.RunAs, err)
	}
	return nil
}

// chownTree gives uid and gid dir and all in it, symlinks themselves (not
// what they point to). It runs before the attempt's process starts: nothing
// changes the tree meanwhile.
func chownTree(dir string, uid, gid uint32) error {
	err := filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, int(uid), int(gid))
	})
	if err != nil {
		return fmt.Errorf("give the attempt's directories to its user: %w", err)
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

// defaultPath is a task's $PATH when the executor has none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// taskEnvNames are the variables of the executor's environment a task
// gets, with Config.PassEnv's; HOME is a sandboxed attempt's work
// directory.
var taskEnvNames = []string{"PATH", "HOME", "LANG", "TZ"}

// baseEnv is a host process's environment before the attempt's own
// (attemptEnv): PATH (defaultPath when the executor has none), HOME, LANG
// and TZ, then the names of Config.PassEnv, from the executor's
// environment when it has them. home, when set, is HOME. Nothing else of
// the executor's reaches a task: its CAPSTAN_* settings, its credentials.
func (s *Supervisor) baseEnv(home string) []string {
	env := make([]string, 0, len(taskEnvNames)+len(s.cfg.PassEnv))
	for _, k := range slices.Concat(taskEnvNames, s.cfg.PassEnv) {
		v, ok := os.LookupEnv(k)
		switch {
		case k == "HOME" && home != "":
			v, ok = home, true
		case k == "PATH" && !ok:
			v, ok = defaultPath, true
		}
		if ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// runtimeEnv is the environment of a container runtime's CLI, a program of
// the executor's (it needs DOCKER_HOST, its config): the executor's own
// without its CAPSTAN_* settings (the Redis address, the api's URL).
func runtimeEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "CAPSTAN_") })
}

// attemptEnv is the attempt's own environment: the spec's env (in key
// order), then the inputs (see inputEnv), then the attempt's CAPSTAN_*
// variables, which win.
func attemptEnv(spec workerapi.AttemptSpec, d dirs) []string {
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
