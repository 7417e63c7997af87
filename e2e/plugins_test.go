package e2e

import (
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
)

// fakeDockerDir holds the fake container runtime (docker, and podman as a
// link) the executor's plugin tests use: it records each call's arguments
// to $FAKE_DOCKER_LOG and runs the command given after the image.
func fakeDockerDir(t *testing.T) string {
	t.Helper()
	root, err := RepoRoot()
	require.NoError(t, err)
	return filepath.Join(root, "services", "executor", "internal", "plugin", "testdata", "fakedocker")
}

// TestPlugins runs the http and container plugins end to end on one stack
// whose executors find the fake docker on their PATH (so they run the
// container plugin) and may reach loopback targets (the test's servers),
// not link-local ones.
func TestPlugins(t *testing.T) {
	t.Parallel()
	dockerLog := filepath.Join(t.TempDir(), "docker.log")
	path := fakeDockerDir(t) + ":" + os.Getenv("PATH")
	s := Start(t, bins, Options{ExecutorEnv: func(int) []string {
		return []string{"PATH=" + path, "FAKE_DOCKER_LOG=" + dockerLog, "CAPSTAN_CONTAINER_RUNTIME=docker",
			"CAPSTAN_HTTP_ALLOW=127.0.0.1/8"}
	}})

	t.Run("HTTP", func(t *testing.T) { t.Parallel(); testPluginHTTP(t, s) })
	t.Run("HTTPMetadataRefused", func(t *testing.T) { t.Parallel(); testPluginHTTPMetadataRefused(t, s) })
	t.Run("Container", func(t *testing.T) { t.Parallel(); testPluginContainer(t, s, dockerLog) })
}

// testPluginHTTP: a 200 succeeds with the response body as the output
// body; a server answering 503 twice then 200 succeeds within
// max_retries_failure 2; a 404 fails at once (one attempt, cause permanent)
// although retries are allowed.
func testPluginHTTP(t *testing.T, s *Stack) {
	var flaky atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hello":
			b, _ := io.ReadAll(r.Body)
			_, _ = io.WriteString(w, "hello "+r.Method+" "+r.Header.Get("X-Who")+" "+string(b))
		case "/flaky":
			if flaky.Add(1) <= 2 {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			_, _ = io.WriteString(w, "third time")
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	httpStep := func(name, path string, h api.HTTPSpec) api.Step {
		h.Url = srv.URL + path
		return api.Step{Name: name, Plugin: ptr("http"), Http: &h, Outputs: &[]string{"body"},
			MaxRetriesFailure: ptr(2)}
	}
	name := create(t, s, api.WorkflowSpec{Mode: ptr(api.DAG), Steps: []api.Step{
		httpStep("hello", "/hello", api.HTTPSpec{Method: ptr("POST"), Headers: &map[string]string{"X-Who": "e2e"},
			Body: ptr("ping")}),
		httpStep("flaky", "/flaky", api.HTTPSpec{}),
	}})
	run := waitPhase(t, s, name, 60*time.Second, api.PhaseSUCCEEDED)
	require.Equal(t, "hello POST e2e ping", (*action(run, "hello").Outputs)["body"])
	require.Equal(t, "third time", (*action(run, "flaky").Outputs)["body"])
	require.Equal(t, map[int][]api.TaskState{0: {api.TaskStateFAILED, api.TaskStateFAILED, api.TaskStateSUCCEEDED}},
		attemptStates(action(run, "flaky")), "503 is retried under max_retries_failure")
	for _, at := range action(run, "flaky").Tasks[0].Attempts[:2] {
		require.Equal(t, "user", *at.Cause)
	}

	missing := create(t, s, api.WorkflowSpec{Steps: []api.Step{httpStep("missing", "/nope", api.HTTPSpec{})}})
	run = waitPhase(t, s, missing, 30*time.Second, api.PhaseFAILED)
	a := action(run, "missing")
	require.Equal(t, map[int][]api.TaskState{0: {api.TaskStateFAILED}}, attemptStates(a), "a 404 is not retried")
	require.Equal(t, "permanent", *a.Tasks[0].Attempts[0].Cause)
	require.Contains(t, *a.Tasks[0].Attempts[0].Error, "404")
}

// testPluginHTTPMetadataRefused: an http step to the cloud metadata
// endpoint (link-local, which CAPSTAN_HTTP_ALLOW does not list) fails with
// cause user, code HTTPTargetRefused and an error naming the address.
func testPluginHTTPMetadataRefused(t *testing.T, s *Stack) {
	name := create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "metadata", Plugin: ptr("http"),
		Http: &api.HTTPSpec{Url: "http://169.254.169.254/latest/meta-data/"}}}})
	run := waitPhase(t, s, name, 30*time.Second, api.PhaseFAILED)
	a := action(run, "metadata")
	require.Equal(t, map[int][]api.TaskState{0: {api.TaskStateFAILED}}, attemptStates(a))
	at := a.Tasks[0].Attempts[0]
	require.Equal(t, "user", *at.Cause)
	require.Equal(t, "HTTPTargetRefused", *at.Code)
	require.Contains(t, *at.Error, "refused to connect to 169.254.169.254:80: a link-local address")
}

// testPluginContainer: a container step runs through the runtime (its
// command line checked in the recorded calls) with its outputs directory
// mounted; an aborted one is stopped with the step's kill grace and removed.
func testPluginContainer(t *testing.T, s *Stack, dockerLog string) {
	name := create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "greet", Plugin: ptr("container"),
		Container: &api.ContainerSpec{Image: "alpine:3", Env: &map[string]string{"WHO": "e2e"},
			Args: &[]string{"sh", "-c", `echo "hi $WHO" > "$CAPSTAN_OUTPUTS_DIR/greeting"`}},
		Outputs: &[]string{"greeting"}}}})
	run := waitPhase(t, s, name, 30*time.Second, api.PhaseSUCCEEDED)
	require.Equal(t, "hi e2e", (*action(run, "greet").Outputs)["greeting"], "one trailing newline trimmed")
	id := strconv.FormatInt(action(run, "greet").Tasks[0].Attempts[0].Id, 10)
	calls := dockerCalls(t, dockerLog, id)
	require.NotEmpty(t, calls)
	require.Regexp(t, `^run --rm --name capstan-`+id+` --label capstan.attempt=`+id+` .* -e WHO=e2e alpine:3 sh -c echo "hi \$WHO"`, calls[0])

	name = create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "sleep", Plugin: ptr("container"),
		KillGrace: ptr("2s"), Container: &api.ContainerSpec{Image: "alpine:3", Args: &[]string{"sleep", "600"}}}}})
	run = waitStep(t, s, name, "sleep", 30*time.Second, api.PhaseRUNNING)
	s.Eventually(30*time.Second, "the attempt runs", func() bool {
		run = getRun(t, s, name)
		at := action(run, "sleep").Tasks
		return len(at) > 0 && len(at[0].Attempts) > 0 && at[0].Attempts[0].State == api.TaskStateRUNNING
	})
	id = strconv.FormatInt(action(run, "sleep").Tasks[0].Attempts[0].Id, 10)
	abortRun(t, s, name, "enough")
	waitPhase(t, s, name, 30*time.Second, api.PhaseABORTED)
	// The fake runtime logs a call before it acts: "rm -f" is done when the
	// container's pid file is gone.
	pidFile := filepath.Join(filepath.Dir(dockerLog), "capstan-"+id+".pid")
	s.Eventually(10*time.Second, "stop and rm of the container, and no container left", func() bool {
		calls = dockerCalls(t, dockerLog, id)
		_, err := os.Stat(pidFile)
		return slices.Contains(calls, "stop -t 2 capstan-"+id) && slices.Contains(calls, "rm -f capstan-"+id) &&
			errors.Is(err, fs.ErrNotExist)
	})
	stop, rm := slices.Index(calls, "stop -t 2 capstan-"+id), slices.Index(calls, "rm -f capstan-"+id)
	require.Less(t, stop, rm, "Abort (stop with the step's kill grace), then Finalize (rm -f): %q", calls)
}

// dockerCalls are the fake runtime's recorded calls about attempt id.
func dockerCalls(t *testing.T, log, id string) []string {
	t.Helper()
	b, err := os.ReadFile(log)
	require.NoError(t, err)
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "capstan-"+id+" ") || strings.HasSuffix(line, "capstan-"+id) {
			out = append(out, line)
		}
	}
	return out
}
