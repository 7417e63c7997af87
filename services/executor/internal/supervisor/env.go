package supervisor

import (
	"fmt"
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
}

// prepare creates the attempt's work and run directories. Errors: a name
// that is not a valid path element, or a directory that cannot be made.
func (s *Supervisor) prepare(spec api.AttemptSpec) (dirs, error) {
	for _, name := range []string{spec.Project, spec.Domain, spec.Run} {
		if !domain.ValidName(name) {
			return dirs{}, fmt.Errorf("invalid name %q in the attempt's run key", name)
		}
	}
	d := dirs{
		work: filepath.Join(s.cfg.DataDir, "attempts", strconv.FormatInt(spec.Id, 10)),
		run:  filepath.Join(s.cfg.DataDir, "runs", spec.Project, spec.Domain, spec.Run),
	}
	for _, dir := range []string{d.work, d.run} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return dirs{}, fmt.Errorf("create directory: %w", err)
		}
	}
	return d, nil
}

// removeWorkDir deletes an ended attempt's work directory; a failure is only
// logged.
func (s *Supervisor) removeWorkDir(dir string) {
	if err := os.RemoveAll(dir); err != nil {
		s.log.Warn("remove work directory failed", "dir", dir, "err", err)
	}
}

// environ is the process's environment: the executor's own without its
// CAPSTAN_* settings (the Redis address, the api's URL: user code has no
// business with them), then the spec's env (in key order), then the
// attempt's CAPSTAN_* variables, which win.
func environ(spec api.AttemptSpec, d dirs) []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "CAPSTAN_") })
	keys := make([]string, 0, len(spec.Env))
	for k := range spec.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		env = append(env, k+"="+spec.Env[k])
	}
	return append(env,
		"CAPSTAN_RUN_DIR="+d.run,
		"CAPSTAN_WORK_DIR="+d.work,
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
