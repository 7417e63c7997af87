package supervisor_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/services/executor/internal/plugin"
	"github.com/capstan-run/capstan/services/executor/internal/supervisor"
	"github.com/stretchr/testify/require"
)

// The rules the classification encodes, quoted from Flyte's executor
// (TaskActionReconciler), except rulePermanent, Capstan's own.
const (
	ruleValidation = "If validation fails or no plugin is found for the TaskType, the reconciler marks the " +
		"TaskAction as failed and does not add a finalizer"
	ruleSystem = "System failures are transient issues (e.g., network blips, K8s API timeouts) that are not " +
		"the fault of the user's code"
	ruleUser = "When a plugin reports a PhaseRetryableFailure of kind USER, the reconciler performs an " +
		"\"in-place\" restart if the maximum number of attempts has not been reached"
	// Capstan's http rule on Flyte's PermanentFailure phase: a status that
	// is neither success nor 5xx can never succeed as specified.
	rulePermanent = "PermanentFailure: any other status (4xx) fails without retry"
	// KubeVela's workflow, on the step a plugin reports not ready.
	ruleWait = "if the workflow step is unhealthy, the workflow step will be marked as wait but not failed"
)

// fakeDockerPath is the fake container runtime the plugin tests use.
func fakeDockerPath(t *testing.T) string {
	t.Helper()
	path, err := filepath.Abs("../plugin/testdata/fakedocker/docker")
	require.NoError(t, err)
	return path
}

// TestFailureClassification runs one attempt per case through the
// supervisor and checks its final report's state, cause and code: system,
// user or permanent, per plugin and error. It sets FAKE_DOCKER_LOG, so it
// does not run in parallel.
func TestFailureClassification(t *testing.T) {
	t.Setenv("FAKE_DOCKER_LOG", filepath.Join(t.TempDir(), "docker.log"))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/503":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/404":
			w.WriteHeader(http.StatusNotFound)
		case "/301":
			w.WriteHeader(http.StatusNotModified)
		}
	}))
	defer srv.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	loopback, err := plugin.ParseHTTPAllow("127.0.0.0/8") // the test's servers
	require.NoError(t, err)
	withRuntime := plugin.NewDefault(plugin.Config{Runtime: fakeDockerPath(t), HTTPAllow: loopback})

	cases := []struct {
		name, rule string
		spec       func(*workerapi.AttemptSpec)
		noRuntime  bool
		cause      workerapi.AttemptReportCause
		code       string
		errHas     string
		ran        bool // BUILDING was reported: validation passed
	}{
		{"unknown plugin", ruleValidation, func(s *workerapi.AttemptSpec) { s.Plugin = "k8s" },
			false, workerapi.Permanent, "UnknownPlugin", `.plugin: unknown plugin "k8s"`, false},
		{"shell with command and args", ruleValidation, func(s *workerapi.AttemptSpec) { s.Args = &[]string{"true"} },
			false, workerapi.Permanent, "InvalidPluginSpec", ".args:", false},
		{"http without an absolute url", ruleValidation, func(s *workerapi.AttemptSpec) {
			s.Plugin, s.Command, s.Http = "http", "", &api.HTTPSpec{Url: "ftp://x"}
		}, false, workerapi.Permanent, "InvalidPluginSpec", ".http.url:", false},
		{"container without its fields", ruleValidation, func(s *workerapi.AttemptSpec) { s.Plugin, s.Command = "container", "" },
			false, workerapi.Permanent, "InvalidPluginSpec", ".container:", false},
		{"shell args: no such program", ruleSystem, func(s *workerapi.AttemptSpec) {
			s.Command, s.Args = "", &[]string{"/no/such/binary"}
		}, false, workerapi.System, "ExecFailed", "/no/such/binary", true},
		{"shell args: not on PATH", ruleSystem, func(s *workerapi.AttemptSpec) {
			s.Command, s.Args = "", &[]string{"capstan-no-such-program"}
		}, false, workerapi.System, "ExecFailed", "capstan-no-such-program", true},
		{"shell: non-zero exit", ruleUser, func(s *workerapi.AttemptSpec) { s.Command = "exit 3" },
			false, workerapi.User, "NonZeroExit", "exit status 3", true},
		{"http: 5xx", ruleUser, func(s *workerapi.AttemptSpec) {
			s.Plugin, s.Command, s.Http = "http", "", &api.HTTPSpec{Url: srv.URL + "/503"}
		},
			false, workerapi.User, "HTTPServerError", "503", true},
		{"http: transport error", ruleUser, func(s *workerapi.AttemptSpec) {
			s.Plugin, s.Command, s.Http = "http", "", &api.HTTPSpec{Url: closed.URL}
		},
			false, workerapi.User, "HTTPTransportError", "connect", true},
		{"http: a refused target", ruleUser, func(s *workerapi.AttemptSpec) {
			s.Plugin, s.Command, s.Http = "http", "", &api.HTTPSpec{Url: "http://169.254.169.254/latest/meta-data/"}
		}, false, workerapi.User, "HTTPTargetRefused", "refused to connect to 169.254.169.254:80: a link-local address", true},
		{"http: 4xx", rulePermanent, func(s *workerapi.AttemptSpec) {
			s.Plugin, s.Command, s.Http = "http", "", &api.HTTPSpec{Url: srv.URL + "/404"}
		},
			false, workerapi.Permanent, "HTTPClientError", "404", true},
		{"http: other status", rulePermanent, func(s *workerapi.AttemptSpec) {
			s.Plugin, s.Command, s.Http = "http", "", &api.HTTPSpec{Url: srv.URL + "/301"}
		},
			false, workerapi.Permanent, "HTTPUnexpectedStatus", "304", true},
		{"container: the runtime fails before the container starts", ruleSystem, func(s *workerapi.AttemptSpec) {
			s.Plugin, s.Command, s.Container = "container", "", &api.ContainerSpec{Image: "capstan.test/runtime-fails"}
		}, false, workerapi.System, "ContainerRuntimeError", "exit status 125", true},
		{"container: non-zero exit", ruleUser, func(s *workerapi.AttemptSpec) {
			s.Plugin, s.Command, s.Container = "container", "", &api.ContainerSpec{Image: "alpine:3", Args: &[]string{"sh", "-c", "exit 4"}}
		}, false, workerapi.User, "NonZeroExit", "exit status 4", true},
		{"http: a wait code", ruleWait, func(s *workerapi.AttemptSpec) {
			s.Plugin, s.Command, s.Http = "http", "", &api.HTTPSpec{Url: srv.URL + "/503", WaitCodes: &[]int{425, 503}}
		}, false, workerapi.Waiting, "NotReady", "status 503", true},
		{"shell: the wait exit code", ruleWait, func(s *workerapi.AttemptSpec) { s.Command, s.WaitExitCode = "exit 75", ptr(75) },
			false, workerapi.Waiting, "NotReady", "exit status 75", true},
		{"shell: another exit than the wait exit code", ruleUser, func(s *workerapi.AttemptSpec) {
			s.Command, s.WaitExitCode = "exit 3", ptr(75)
		}, false, workerapi.User, "NonZeroExit", "exit status 3", true},
		{"container on an executor without a runtime", ruleSystem, func(s *workerapi.AttemptSpec) {
			s.Plugin, s.Command, s.Container = "container", "", &api.ContainerSpec{Image: "alpine:3"}
		}, true, workerapi.System, "PluginUnavailable", "does not run the container plugin", false},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Log(c.rule)
			rec := &recorder{}
			cfg := supervisor.Config{Plugins: withRuntime}
			if c.noRuntime {
				cfg.Plugins = nil
			}
			s := newSupervisor(t, rec, cfg)
			sp := spec(int64(100+i), "true")
			c.spec(&sp)
			require.NoError(t, s.Start(sp))
			final := rec.await(t, sp.Id, api.TaskStateFAILED)
			require.Equal(t, c.cause, *final.Cause)
			require.Equal(t, c.code, *final.Code)
			require.Contains(t, *final.Error, c.errHas)
			require.Equal(t, c.ran, len(rec.states(sp.Id)) > 1, "states %v", rec.states(sp.Id))
			require.Nil(t, final.Cleanup, "only a stopped attempt reports its cleanup")
		})
	}
}

// TestUncreatableWorkDirIsSystemFailure: "System failures are transient
// issues ... that are not the fault of the user's code": a work directory
// that cannot be made is one, code WorkDirFailed.
func TestUncreatableWorkDirIsSystemFailure(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	file := filepath.Join(t.TempDir(), "not-a-dir")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	s := newSupervisor(t, rec, supervisor.Config{DataDir: file})
	require.NoError(t, s.Start(spec(1, "true")))
	final := rec.await(t, 1, api.TaskStateFAILED)
	require.Equal(t, workerapi.System, *final.Cause)
	require.Equal(t, "WorkDirFailed", *final.Code)
	require.Contains(t, *final.Error, "create directory")
	require.Equal(t, []api.TaskState{api.TaskStateBUILDING, api.TaskStateFAILED}, rec.states(1))
}

func ptr[T any](v T) *T { return &v }
