package domain_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstan-run/capstan/pkg/domain"
)

// Flyte's reconciler validates a TaskAction before any execution: a spec
// whose plugin is unknown or whose plugin fields are invalid "can never run"
// and fails at once. Each case names the offending field.
func TestPluginSpecValidate(t *testing.T) {
	t.Parallel()
	okHTTP := &domain.HTTPSpec{URL: "http://127.0.0.1:8080/x"}
	tests := []struct {
		name   string
		p      domain.PluginSpec
		fields []string
	}{
		{"shell with a command", domain.PluginSpec{Plugin: "shell", Command: "true"}, nil},
		{"shell with an argv", domain.PluginSpec{Plugin: "shell", Args: []string{"/bin/echo", "hi"}}, nil},
		{"shell with both", domain.PluginSpec{Plugin: "shell", Command: "true", Args: []string{"x"}}, []string{".args"}},
		{"shell with neither", domain.PluginSpec{Plugin: "shell"}, []string{".command"}},
		{"shell argv with an empty program", domain.PluginSpec{Plugin: "shell", Args: []string{" "}}, []string{".args[0]"}},
		{"shell argv with NUL", domain.PluginSpec{Plugin: "shell", Args: []string{"a", "b\x00"}}, []string{".args[1]"}},
		{"shell with http fields", domain.PluginSpec{Plugin: "shell", Command: "true", HTTP: okHTTP}, []string{".http"}},
		{"http", domain.PluginSpec{Plugin: "http", HTTP: okHTTP}, nil},
		{"http without its request", domain.PluginSpec{Plugin: "http"}, []string{".http"}},
		{"http with a relative url", domain.PluginSpec{Plugin: "http", HTTP: &domain.HTTPSpec{URL: "/x"}}, []string{".http.url"}},
		{"http with a file url", domain.PluginSpec{Plugin: "http", HTTP: &domain.HTTPSpec{URL: "file:///etc/passwd"}}, []string{".http.url"}},
		{"http with a bad method", domain.PluginSpec{Plugin: "http", HTTP: &domain.HTTPSpec{URL: okHTTP.URL, Method: "GE T"}}, []string{".http.method"}},
		{"http with a bad header", domain.PluginSpec{Plugin: "http", HTTP: &domain.HTTPSpec{URL: okHTTP.URL, Headers: map[string]string{"X": "a\r\nb"}}}, []string{".http.headers.X"}},
		{"http with a bad success code", domain.PluginSpec{Plugin: "http", HTTP: &domain.HTTPSpec{URL: okHTTP.URL, SuccessCodes: []int{200, 99}}}, []string{".http.success_codes[1]"}},
		{"http with a command", domain.PluginSpec{Plugin: "http", Command: "x", HTTP: okHTTP}, []string{".command"}},
		{"container", domain.PluginSpec{Plugin: "container", Container: &domain.ContainerSpec{Image: "alpine:3", Args: []string{"echo", "hi"}}}, nil},
		{"container without an image", domain.PluginSpec{Plugin: "container", Container: &domain.ContainerSpec{}}, []string{".container.image"}},
		{"container image like a flag", domain.PluginSpec{Plugin: "container", Container: &domain.ContainerSpec{Image: "--privileged"}}, []string{".container.image"}},
		{"container with a reserved env", domain.PluginSpec{Plugin: "container", Container: &domain.ContainerSpec{Image: "a", Env: map[string]string{"CAPSTAN_X": "1"}}}, []string{".container.env.CAPSTAN_X"}},
		{"container without its spec", domain.PluginSpec{Plugin: "container"}, []string{".container"}},
		{"kubernetes", domain.PluginSpec{Plugin: "kubernetes", Kubernetes: &domain.KubernetesSpec{Image: "alpine:3",
			Command: []string{"sh", "-c"}, Args: []string{"echo hi"}, Env: map[string]string{"A": "1"},
			Resources:    &domain.KubernetesResources{Requests: map[string]string{"cpu": "500m", "memory": "1Gi"}, Limits: map[string]string{"example.com/gpu": "1"}},
			NodeSelector: map[string]string{"kubernetes.io/arch": "amd64"}, ServiceAccount: "capstan-task", Namespace: "tasks",
			Tolerations: []domain.KubernetesToleration{{Key: "dedicated", Operator: "Equal", Value: "batch", Effect: "NoSchedule"}, {Operator: "Exists"}}}}, nil},
		{"kubernetes without an image", domain.PluginSpec{Plugin: "kubernetes", Kubernetes: &domain.KubernetesSpec{}}, []string{".kubernetes.image"}},
		{"kubernetes without its spec", domain.PluginSpec{Plugin: "kubernetes"}, []string{".kubernetes"}},
		{"kubernetes with a shell command", domain.PluginSpec{Plugin: "kubernetes", Command: "x", Kubernetes: &domain.KubernetesSpec{Image: "a"}}, []string{".command"}},
		{"kubernetes with a bad quantity", domain.PluginSpec{Plugin: "kubernetes", Kubernetes: &domain.KubernetesSpec{Image: "a",
			Resources: &domain.KubernetesResources{Limits: map[string]string{"memory": "lots"}}}}, []string{".kubernetes.resources.limits.memory"}},
		{"kubernetes with a bad namespace", domain.PluginSpec{Plugin: "kubernetes", Kubernetes: &domain.KubernetesSpec{Image: "a", Namespace: "Tasks_1"}}, []string{".kubernetes.namespace"}},
		{"kubernetes with a bad service account", domain.PluginSpec{Plugin: "kubernetes", Kubernetes: &domain.KubernetesSpec{Image: "a", ServiceAccount: "-x"}}, []string{".kubernetes.service_account"}},
		{"kubernetes with a bad node selector", domain.PluginSpec{Plugin: "kubernetes", Kubernetes: &domain.KubernetesSpec{Image: "a", NodeSelector: map[string]string{"zone": "a b"}}}, []string{".kubernetes.node_selector.zone"}},
		{"kubernetes with a bad toleration", domain.PluginSpec{Plugin: "kubernetes", Kubernetes: &domain.KubernetesSpec{Image: "a",
			Tolerations: []domain.KubernetesToleration{{Key: "k", Operator: "Exists", Value: "v"}}}}, []string{".kubernetes.tolerations[0].value"}},
		{"kubernetes with a reserved env", domain.PluginSpec{Plugin: "kubernetes", Kubernetes: &domain.KubernetesSpec{Image: "a", Env: map[string]string{"CAPSTAN_X": "1"}}}, []string{".kubernetes.env.CAPSTAN_X"}},
		{"noop", domain.PluginSpec{Plugin: "noop"}, nil},
		{"unknown", domain.PluginSpec{Plugin: "docker"}, []string{".plugin"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.fields, fieldsOrNil(tc.p.Validate()))
		})
	}
}

func fieldsOrNil(errs []domain.FieldError) []string {
	if len(errs) == 0 {
		return nil
	}
	return fields(errs)
}

func TestHTTPSuccess(t *testing.T) {
	t.Parallel()
	def := domain.HTTPSpec{}
	require.True(t, def.Succeeded(200))
	require.True(t, def.Succeeded(204))
	require.False(t, def.Succeeded(301))
	require.False(t, def.Succeeded(503))
	listed := domain.HTTPSpec{SuccessCodes: []int{404}}
	require.True(t, listed.Succeeded(404))
	require.False(t, listed.Succeeded(200))
}

func TestCacheSpecValidate(t *testing.T) {
	t.Parallel()
	step := func(c *domain.CacheSpec) domain.WorkflowSpec {
		return domain.WorkflowSpec{Steps: []domain.Step{{Name: "a", Command: "true", Cache: c}}}
	}
	require.Empty(t, validate(step(&domain.CacheSpec{Version: "v1", Serializable: true, MaxAge: "24h"})))
	require.Equal(t, []string{"spec.steps[0].cache.version"}, fields(validate(step(&domain.CacheSpec{}))))
	require.Equal(t, []string{"spec.steps[0].cache.max_age"}, fields(validate(step(&domain.CacheSpec{Version: "v1", MaxAge: "a day"}))))
	wait := domain.WorkflowSpec{Steps: []domain.Step{{Name: "a", Kind: "approval", Cache: &domain.CacheSpec{Version: "v1"}}}}
	require.Equal(t, []string{"spec.steps[0].cache"}, fields(validate(wait)))
}

// The key is a hash of the canonical plugin spec, the resolved inputs and the
// version, scoped to project and domain: any of them changes it, and the
// order of map keys does not.
func TestCacheKey(t *testing.T) {
	t.Parallel()
	base := domain.Step{Name: "a", Plugin: "shell", Command: "echo hi", Env: map[string]string{"A": "1", "B": "2"},
		Cache: &domain.CacheSpec{Version: "v1"}}
	in := map[string]string{"X": "1", "Y": "2"}
	key := domain.CacheKey("p", "d", base, in)
	require.Len(t, key, 64)
	same := base
	same.Env = map[string]string{"B": "2", "A": "1"}
	same.Name = "renamed"
	require.Equal(t, key, domain.CacheKey("p", "d", same, map[string]string{"Y": "2", "X": "1"}))
	changed := func(f func(*domain.Step)) domain.Step {
		s := base
		s.Cache = &domain.CacheSpec{Version: "v1"}
		f(&s)
		return s
	}
	for name, other := range map[string]string{
		"project": domain.CacheKey("q", "d", base, in),
		"domain":  domain.CacheKey("p", "e", base, in),
		"input":   domain.CacheKey("p", "d", base, map[string]string{"X": "1", "Y": "3"}),
		"version": domain.CacheKey("p", "d", changed(func(s *domain.Step) { s.Cache.Version = "v2" }), in),
		"command": domain.CacheKey("p", "d", changed(func(s *domain.Step) { s.Command = "echo ho" }), in),
		"env":     domain.CacheKey("p", "d", changed(func(s *domain.Step) { s.Env = map[string]string{"A": "1"} }), in),
	} {
		require.NotEqual(t, key, other, name)
	}
}
