package e2e

import (
	"bufio"
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
)

// The sandbox's acceptance: each test runs an attack from a task and
// checks that it fails, and that nothing else changes. They need the
// executors to sandbox attempts, which only root may.

func requireSandboxed(t *testing.T) {
	t.Helper()
	if !Sandboxed() {
		t.Skip("the executors sandbox attempts only as root")
	}
}

// createIn creates a run of spec in project p (domain test).
func createIn(t *testing.T, s *Stack, p string, spec api.WorkflowSpec) string {
	t.Helper()
	resp, err := s.Client.CreateRunWithResponse(context.Background(), p, domain, nil, api.CreateRunRequest{Spec: &spec})
	require.NoError(t, err)
	require.NotNil(t, resp.JSON201, "create: %d %s", resp.StatusCode(), resp.Body)
	return resp.JSON201.Name
}

func getRunIn(t *testing.T, s *Stack, p, name string) *api.Run {
	t.Helper()
	resp, err := s.Client.GetRunWithResponse(context.Background(), p, domain, name)
	require.NoError(t, err)
	require.NotNil(t, resp.JSON200, "get: %d %s", resp.StatusCode(), resp.Body)
	return resp.JSON200
}

func waitPhaseIn(t *testing.T, s *Stack, p, name string, timeout time.Duration, want api.Phase) *api.Run {
	t.Helper()
	var run *api.Run
	s.Eventually(timeout, "run "+p+"/"+name+" "+string(want), func() bool {
		run = getRunIn(t, s, p, name)
		require.False(t, run.EndedAt != nil && run.Phase != want, "run ended %s, want %s: %+v", run.Phase, want, run.Actions)
		return run.Phase == want
	})
	return run
}

func logsIn(t *testing.T, s *Stack, p, run, act string) (stdout, stderr string) {
	t.Helper()
	resp, err := s.Client.GetAttemptLogsWithResponse(context.Background(), p, domain, run, act, 0, 1, nil)
	require.NoError(t, err)
	require.NotNil(t, resp.JSON200, "logs: %d %s", resp.StatusCode(), resp.Body)
	return resp.JSON200.Stdout, resp.JSON200.Stderr
}

// readWhenWritten waits until path holds a line and returns it.
func readWhenWritten(t *testing.T, s *Stack, path string) string {
	t.Helper()
	var v string
	s.Eventually(30*time.Second, filepath.Base(path)+" written", func() bool {
		b, err := os.ReadFile(path)
		v = strings.TrimSpace(string(b))
		return err == nil && strings.HasSuffix(string(b), "\n")
	})
	return v
}

// processesOf lists the live (not zombie) processes whose real or
// effective user is uid, from the host's /proc.
func processesOf(uid string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := os.Open("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var zombie, mine bool
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "State:"); ok {
				zombie = strings.HasPrefix(strings.TrimSpace(v), "Z")
			}
			if v, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
				ids := strings.Fields(v)
				mine = len(ids) >= 2 && (ids[0] == uid || ids[1] == uid)
			}
		}
		f.Close()
		if mine && !zombie {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestAnotherProjectCannotReachARunningAttempt: a task of project B tries
// to write into project A's running attempt's outputs directory and to
// read the environment of A's processes (A holds a secret there): both are
// refused with permission denied, A's output is what A wrote and A
// succeeds.
func TestAnotherProjectCannotReachARunningAttempt(t *testing.T) {
	t.Parallel()
	requireSandboxed(t)
	s := Start(t, bins, Options{})
	const a, b = "tenant-a", "tenant-b"
	runA := createIn(t, s, a, api.WorkflowSpec{Steps: []api.Step{{Name: "hold", Outputs: &[]string{"result"},
		SecretEnv: &map[string]string{"SECRET": "s3cr3t-of-a"},
		Command: ptr(`printf mine > "$CAPSTAN_OUTPUTS_DIR/result"; ` + hostPidTo(`"$CAPSTAN_RUN_DIR/pid"`) + `
			while [ ! -e "$CAPSTAN_RUN_DIR/go" ]; do sleep 0.05; done`)}}})
	dirA := filepath.Join(s.DataDir, "runs", a, domain, runA)
	pidA := readWhenWritten(t, s, filepath.Join(dirA, "pid"))
	attemptA := action(getRunIn(t, s, a, runA), "hold").Tasks[0].Attempts[0].Id
	outputsA := filepath.Join(s.DataDir, "attempts", strconv.FormatInt(attemptA, 10), ".capstan", "outputs")
	environ, err := os.ReadFile("/proc/" + pidA + "/environ")
	require.NoError(t, err)
	require.Contains(t, string(environ), "SECRET=s3cr3t-of-a", "A's process holds the secret the attack is after")

	runB := createIn(t, s, b, api.WorkflowSpec{Steps: []api.Step{{Name: "attack",
		Env: &map[string]string{"TARGET_OUTPUTS": outputsA, "TARGET_PID": pidA},
		Command: ptr(`set +e
			(echo stolen > "$TARGET_OUTPUTS/result") 2> write.err && { echo "wrote A's output"; exit 1; }
			(cat "/proc/$TARGET_PID/environ" > environ) 2> read.err && { echo "read A's environment"; exit 1; }
			found=$(for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f"; done 2>/dev/null | grep -c s3cr3t-of-a)
			cat write.err read.err; echo "secrets found: $found"`)}}})
	waitPhaseIn(t, s, b, runB, 60*time.Second, api.PhaseSUCCEEDED)
	stdout, stderr := logsIn(t, s, b, runB, "attack")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 3, "stdout %q, stderr %q", stdout, stderr)
	require.Contains(t, lines[0], outputsA+"/result: Permission denied", "the write into A's outputs")
	require.Contains(t, lines[1], "/proc/"+pidA+"/environ: Permission denied", "the read of A's environment")
	require.Equal(t, "secrets found: 0", lines[2], "no process's environment B may read holds A's secret")

	require.NoError(t, os.WriteFile(filepath.Join(dirA, "go"), nil, 0o644))
	run := waitPhaseIn(t, s, a, runA, 30*time.Second, api.PhaseSUCCEEDED)
	require.Equal(t, map[string]string{"result": "mine"}, *action(run, "hold").Outputs, "A's output is A's")
}

// setsidTask records its user in the run directory, starts a process that
// leaves its session and ignores SIGTERM and SIGHUP (setsid sleep 600),
// and, unless exit, waits.
func setsidTask(exit bool) *string {
	cmd := `id -u > "$CAPSTAN_RUN_DIR/uid.tmp" && mv "$CAPSTAN_RUN_DIR/uid.tmp" "$CAPSTAN_RUN_DIR/uid"
		setsid sh -c 'trap "" TERM HUP; touch "$0"; exec sleep 600' "$CAPSTAN_RUN_DIR/escaped" &
		while [ ! -e "$CAPSTAN_RUN_DIR/escaped" ]; do sleep 0.05; done`
	if exit {
		return ptr(cmd)
	}
	return ptr(cmd + "\nwait")
}

// readWhenEscaped waits until the setsid process of setsidTask in run
// directory dir runs, its traps set.
func readWhenEscaped(t *testing.T, s *Stack, dir string) {
	t.Helper()
	s.Eventually(30*time.Second, "the escaped process runs", func() bool {
		_, err := os.Stat(filepath.Join(dir, "escaped"))
		return err == nil
	})
}

// TestNothingOfAnAttemptOutlivesIt: a task that starts `setsid sleep 600 &`
// leaves no process of its user once its run ended: when it exits, when
// its run is aborted, and when its executor is killed with SIGKILL.
func TestNothingOfAnAttemptOutlivesIt(t *testing.T) {
	t.Parallel()
	requireSandboxed(t)
	s := Start(t, bins, Options{Executors: 1, Env: []string{"CAPSTAN_KILL_GRACE=500ms"}})

	name := create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "escape", Command: setsidTask(true)}}})
	uid := readWhenWritten(t, s, filepath.Join(runDir(s, name), "uid"))
	waitPhase(t, s, name, 30*time.Second, api.PhaseSUCCEEDED)
	require.Empty(t, processesOf(uid), "the run SUCCEEDED: no process of its attempt's user %s is left", uid)

	name = create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "escape", KillGrace: ptr("500ms"),
		Command: setsidTask(false)}}})
	uid = readWhenWritten(t, s, filepath.Join(runDir(s, name), "uid"))
	readWhenEscaped(t, s, runDir(s, name))
	abortRun(t, s, name, "enough")
	s.Eventually(30*time.Second, "the attempt reported KILLED", func() bool {
		at := action(getRun(t, s, name), "escape").Tasks[0].Attempts
		return len(at) > 0 && at[0].State == api.TaskStateKILLED
	})
	require.Empty(t, processesOf(uid), "the run was aborted: no process of its attempt's user %s is left", uid)

	name = create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "escape", Command: setsidTask(false)}}})
	uid = readWhenWritten(t, s, filepath.Join(runDir(s, name), "uid"))
	readWhenEscaped(t, s, runDir(s, name))
	s.Kill("executor-1")
	s.Eventually(10*time.Second, "no process of the killed executor's attempt", func() bool {
		return len(processesOf(uid)) == 0
	})
}

// TestNetworkNoneReachesNothing: a network: none task cannot connect to
// the test's Postgres and Redis, which the same task without it reaches.
func TestNetworkNoneReachesNothing(t *testing.T) {
	t.Parallel()
	requireSandboxed(t)
	s := Start(t, bins, Options{})
	db, err := url.Parse(s.DBURL)
	require.NoError(t, err)
	pgHost, pgPort, err := net.SplitHostPort(db.Host)
	require.NoError(t, err)
	redisHost, redisPort, err := net.SplitHostPort(s.RedisAddr)
	require.NoError(t, err)
	probe := ptr(`for target in "$PG" "$REDIS"; do
		bash -c "echo > /dev/tcp/$target" 2>&1 && echo "connected to $target"
	done; true`)
	env := &map[string]string{"PG": pgHost + "/" + pgPort, "REDIS": redisHost + "/" + redisPort}
	name := create(t, s, api.WorkflowSpec{Mode: ptr(api.DAG), Steps: []api.Step{
		{Name: "isolated", Network: ptr("none"), Env: env, Command: probe},
		{Name: "open", Env: env, Command: probe},
	}})
	waitPhase(t, s, name, 60*time.Second, api.PhaseSUCCEEDED)

	isolated := logs(t, s, name, "isolated", 0, 1)
	require.NotContains(t, isolated, "connected", "network: none reaches neither Postgres nor Redis")
	for _, target := range []string{pgHost + "/" + pgPort, redisHost + "/" + redisPort} {
		require.Contains(t, isolated, "/dev/tcp/"+target+": Connection refused")
	}
	open := logs(t, s, name, "open", 0, 1)
	require.Contains(t, open, "connected to "+pgHost+"/"+pgPort, "without network: none the task reaches Postgres")
	require.Contains(t, open, "connected to "+redisHost+"/"+redisPort)
}
