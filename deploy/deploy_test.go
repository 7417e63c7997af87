package deploy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const (
	// namespace is the Kubernetes namespace every Capstan object lives in.
	namespace = "capstan"
	// nonRootUID is the uid the images' USER and the pods' runAsUser share.
	nonRootUID = 10001
	// dataDir is where the executors' shared run directories are mounted.
	dataDir = "/var/lib/capstan"
	// componentLabel names a pod's Capstan component (api, migrate, ...).
	componentLabel = "app.kubernetes.io/component"
	// serviceDockerfile builds every service image.
	serviceDockerfile = "deploy/docker/Dockerfile"
)

// components are the services built from deploy/docker/Dockerfile, each from
// services/<component>.
var components = []string{"api", "scheduler", "abort-reconciler", "executor"}

// wantEnv lists, for each component (and the migrate step, which runs the api
// binary), the environment variables it reads and the value each must have;
// "" accepts any non-empty value, for addresses that differ between compose
// and Kubernetes.
var wantEnv = map[string]map[string]string{
	"migrate": {
		"CAPSTAN_DATABASE_URL": "",
	},
	"api": {
		"CAPSTAN_DATABASE_URL": "",
		"CAPSTAN_REDIS_ADDR":   "",
		"CAPSTAN_API_ADDR":     "0.0.0.0:8080",
	},
	"scheduler": {
		"CAPSTAN_DATABASE_URL": "",
		"CAPSTAN_REDIS_ADDR":   "",
		"CAPSTAN_METRICS_ADDR": "0.0.0.0:9091",
	},
	"abort-reconciler": {
		"CAPSTAN_DATABASE_URL": "",
		"CAPSTAN_REDIS_ADDR":   "",
		"CAPSTAN_METRICS_ADDR": "0.0.0.0:9092",
		"ABORT_WORKERS":        "5",
		"ABORT_MAX_ATTEMPTS":   "10",
		"ABORT_INITIAL_DELAY":  "1s",
		"ABORT_MAX_DELAY":      "5m",
		"ABORT_RESYNC_PERIOD":  "5m",
	},
	"executor": {
		"CAPSTAN_REDIS_ADDR":     "",
		"CAPSTAN_API_URL":        "",
		"CAPSTAN_EXECUTOR_ADDR":  "0.0.0.0:9090",
		"CAPSTAN_EXECUTOR_SLOTS": "4",
		"CAPSTAN_DATA_DIR":       dataDir,
	},
}

// listenVars are the variables that hold a component's listen address; the
// port in each must be one the container declares.
var listenVars = []string{"CAPSTAN_API_ADDR", "CAPSTAN_METRICS_ADDR", "CAPSTAN_EXECUTOR_ADDR"}

// repoRoot returns the absolute path of the repository root, the parent of
// this module.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "go.work"), "the deploy module sits one level below the repository root")
	return root
}

// splitImage splits an image reference into repository and tag; the tag is
// empty when the reference has none. A digest counts as a tag.
func splitImage(image string) (repo, tag string) {
	if at := strings.Index(image, "@"); at >= 0 {
		return image[:at], image[at+1:]
	}
	slash, colon := strings.LastIndex(image, "/"), strings.LastIndex(image, ":")
	if colon > slash {
		return image[:colon], image[colon+1:]
	}
	return image, ""
}

// imageProblem says what is wrong with an image reference's pinning, or "".
func imageProblem(image string) string {
	_, tag := splitImage(image)
	switch {
	case image == "":
		return "has no image"
	case tag == "":
		return fmt.Sprintf("image %q has no tag", image)
	case tag == "latest":
		return fmt.Sprintf("image %q uses the latest tag", image)
	}
	return ""
}

// addrPort returns the port of a host:port address, failing the test when
// the address does not parse.
func addrPort(t testing.TB, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	require.NoErrorf(t, err, "%q must be a host:port address", addr)
	return port
}

// ---------------------------------------------------------------------------
// docker-compose.yml

// loadCompose loads a compose file the way `docker compose` does, with
// compose-go, interpolating from env only (no .env file, no OS environment,
// so the defaults written in the file are what is checked).
func loadCompose(ctx context.Context, path string, env ...string) (*types.Project, error) {
	opts, err := cli.NewProjectOptions([]string{path},
		cli.WithWorkingDirectory(filepath.Dir(path)),
		cli.WithEnv(env),
		cli.WithResolvedPaths(true),
	)
	if err != nil {
		return nil, err
	}
	return opts.LoadProject(ctx)
}

// composeEnv returns a compose service's environment variable, and whether it
// is set.
func composeEnv(svc types.ServiceConfig, name string) (string, bool) {
	v, ok := svc.Environment[name]
	if !ok || v == nil {
		return "", false
	}
	return *v, true
}

// waitsFor reports whether service from cannot start before service target
// has reached condition, following depends_on edges (a service is not
// started before all its dependencies are satisfied, so waiting through an
// intermediate service counts).
func waitsFor(p *types.Project, from, target, condition string) bool {
	seen := map[string]bool{}
	var visit func(name string) bool
	visit = func(name string) bool {
		if seen[name] {
			return false
		}
		seen[name] = true
		for dep, d := range p.Services[name].DependsOn {
			if dep == target {
				if d.Condition == condition {
					return true
				}
				continue
			}
			if visit(dep) {
				return true
			}
		}
		return false
	}
	return visit(from)
}

func TestCompose(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	composePath := filepath.Join(root, "docker-compose.yml")
	p, err := loadCompose(t.Context(), composePath)
	require.NoError(t, err, "docker-compose.yml must load with compose-go and no .env file")

	t.Run("services", func(t *testing.T) {
		t.Parallel()
		require.ElementsMatch(t,
			[]string{"postgres", "redis", "migrate", "api", "scheduler", "abort-reconciler", "executor"},
			p.ServiceNames(), "the compose project runs exactly these seven services")
	})

	t.Run("images and builds", func(t *testing.T) {
		t.Parallel()
		for name, svc := range p.Services {
			if svc.Build == nil {
				require.Containsf(t, []string{"postgres", "redis"}, name,
					"only postgres and redis run stock images; %s must be built from %s", name, serviceDockerfile)
				require.Emptyf(t, imageProblem(svc.Image), "%s: image must be pinned to a tag that is not latest", name)
				continue
			}
			require.Equalf(t, root, svc.Build.Context, "%s: the build context is the repository root", name)
			dockerfile := svc.Build.Dockerfile
			if !filepath.IsAbs(dockerfile) {
				dockerfile = filepath.Join(svc.Build.Context, dockerfile)
			}
			require.Equalf(t, filepath.Join(root, serviceDockerfile), dockerfile, "%s: built from %s", name, serviceDockerfile)
			arg, ok := svc.Build.Args["SERVICE"]
			require.Truef(t, ok && arg != nil, "%s: build arg SERVICE must be set", name)
			require.Containsf(t, components, *arg, "%s: SERVICE must name a service", name)
			require.DirExistsf(t, filepath.Join(root, "services", *arg), "%s: SERVICE=%s must have a services/%s directory", name, *arg, *arg)
			want := name
			if name == "migrate" {
				want = "api"
			}
			require.Equalf(t, want, *arg, "%s is built with SERVICE=%s", name, want)
		}
		postgres, redis := p.Services["postgres"], p.Services["redis"]
		require.Equal(t, "postgres:15", postgres.Image, "postgres runs postgres:15")
		require.Equal(t, "redis:7", redis.Image, "redis runs redis:7")
	})

	t.Run("health checks", func(t *testing.T) {
		t.Parallel()
		pg := p.Services["postgres"].HealthCheck
		require.NotNil(t, pg, "postgres needs a health check for depends_on service_healthy")
		require.Contains(t, strings.Join(pg.Test, " "), "pg_isready", "postgres is healthy when pg_isready says so")
		rd := p.Services["redis"].HealthCheck
		require.NotNil(t, rd, "redis needs a health check for depends_on service_healthy")
		require.Equal(t, types.HealthCheckTest{"CMD", "redis-cli", "ping"}, rd.Test, "redis is healthy when redis-cli ping answers")
		pgVolumes := p.Services["postgres"].Volumes
		require.Len(t, pgVolumes, 1, "postgres keeps its data in a volume")
		require.Equal(t, types.VolumeTypeVolume, pgVolumes[0].Type, "postgres keeps its data in a named volume")
		require.Equal(t, "/var/lib/postgresql/data", pgVolumes[0].Target, "postgres keeps its data in a volume")
	})

	t.Run("migrate", func(t *testing.T) {
		t.Parallel()
		m := p.Services["migrate"]
		require.Equal(t, types.ShellCommand{"migrate"}, m.Command, `migrate runs the api binary with the argument "migrate"`)
		require.Equal(t, "no", m.Restart, `migrate is one-shot: restart "no"`)
		require.Equal(t, types.ServiceConditionHealthy, m.DependsOn["postgres"].Condition, "migrate waits for postgres to be healthy")
	})

	t.Run("startup order", func(t *testing.T) {
		t.Parallel()
		for _, name := range components {
			require.Truef(t, waitsFor(p, name, "migrate", types.ServiceConditionCompletedSuccessfully),
				"%s must depend on migrate completing successfully, directly or through another service", name)
		}
		require.Equal(t, types.ServiceConditionHealthy, p.Services["api"].DependsOn["redis"].Condition, "api waits for redis to be healthy")
		for name, svc := range p.Services {
			for dep, d := range svc.DependsOn {
				if hc := p.Services[dep].HealthCheck; hc != nil && !hc.Disable {
					require.Equalf(t, types.ServiceConditionHealthy, d.Condition,
						"%s depends on %s, which has a health check: it must wait for service_healthy", name, dep)
				}
			}
		}
	})

	t.Run("environment", func(t *testing.T) {
		t.Parallel()
		for name, want := range wantEnv {
			svc, ok := p.Services[name]
			require.Truef(t, ok, "service %s exists", name)
			for key, value := range want {
				got, ok := composeEnv(svc, key)
				require.Truef(t, ok, "%s reads %s, so it must be set", name, key)
				require.NotEmptyf(t, got, "%s: %s must not be empty", name, key)
				if value != "" {
					require.Equalf(t, value, got, "%s: %s", name, key)
				}
			}
		}
	})

	t.Run("addresses name services", func(t *testing.T) {
		t.Parallel()
		pgEnv := p.Services["postgres"].Environment
		for name, svc := range p.Services {
			if raw, ok := composeEnv(svc, "CAPSTAN_DATABASE_URL"); ok {
				u, err := url.Parse(raw)
				require.NoErrorf(t, err, "%s: CAPSTAN_DATABASE_URL parses", name)
				require.Equalf(t, "postgres", u.Scheme, "%s: CAPSTAN_DATABASE_URL is a postgres:// URL", name)
				require.Equalf(t, "postgres:5432", u.Host, "%s: CAPSTAN_DATABASE_URL points at the postgres service", name)
				pass, _ := u.User.Password()
				require.Equalf(t, *pgEnv["POSTGRES_USER"], u.User.Username(), "%s: database user matches POSTGRES_USER", name)
				require.Equalf(t, *pgEnv["POSTGRES_PASSWORD"], pass, "%s: database password matches POSTGRES_PASSWORD", name)
				require.Equalf(t, "/"+*pgEnv["POSTGRES_DB"], u.Path, "%s: database name matches POSTGRES_DB", name)
				require.Equalf(t, "disable", u.Query().Get("sslmode"), "%s: the compose postgres has no TLS", name)
			}
			if addr, ok := composeEnv(svc, "CAPSTAN_REDIS_ADDR"); ok {
				require.Equalf(t, "redis:6379", addr, "%s: CAPSTAN_REDIS_ADDR points at the redis service", name)
			}
		}
		api := p.Services["api"]
		apiAddr, _ := composeEnv(api, "CAPSTAN_API_ADDR")
		apiPort := addrPort(t, apiAddr)
		raw, _ := composeEnv(p.Services["executor"], "CAPSTAN_API_URL")
		u, err := url.Parse(raw)
		require.NoError(t, err, "CAPSTAN_API_URL parses")
		require.Equal(t, "http", u.Scheme)
		require.Equal(t, "api", u.Hostname(), "the executor reaches the api service by its compose name")
		require.Equal(t, apiPort, u.Port(), "CAPSTAN_API_URL uses the port of CAPSTAN_API_ADDR")
		require.Len(t, api.Ports, 1, "api publishes one port")
		require.Equal(t, apiPort, strconv.Itoa(int(api.Ports[0].Target)), "api publishes its listen port")
		require.Equal(t, "8080", api.Ports[0].Published, "api is on host port 8080")
	})

	t.Run("executor", func(t *testing.T) {
		t.Parallel()
		ex := p.Services["executor"]
		require.NotNil(t, ex.Deploy, "executor sets deploy")
		require.NotNil(t, ex.Deploy.Replicas, "executor sets deploy.replicas")
		require.Equal(t, 2, *ex.Deploy.Replicas, "executor runs two replicas")
		v, _ := composeEnv(ex, "CAPSTAN_EXECUTOR_ADVERTISE_HOST_FROM_HOSTNAME")
		require.Equal(t, "true", v, "each replica advertises http://<hostname>:<port>: CAPSTAN_EXECUTOR_ADVERTISE_HOST_FROM_HOSTNAME=true")
		_, static := composeEnv(ex, "CAPSTAN_EXECUTOR_ADVERTISE_URL")
		require.False(t, static, "a static CAPSTAN_EXECUTOR_ADVERTISE_URL would make every replica advertise one address")
		require.Empty(t, ex.ContainerName, "replicas cannot share a container_name")
		require.Empty(t, ex.Hostname, "replicas need distinct hostnames, so hostname stays unset")
		require.Empty(t, ex.Ports, "replicas cannot publish one host port")
		var mounted bool
		for _, vol := range ex.Volumes {
			if vol.Target == dataDir {
				mounted = true
				require.Equal(t, types.VolumeTypeVolume, vol.Type, "the run directories are a named volume")
				require.Equal(t, "runs", vol.Source, "the run directories are the shared volume runs")
				require.False(t, vol.ReadOnly, "executors write run directories")
			}
		}
		require.True(t, mounted, "executor mounts the shared volume at "+dataDir)
		_, declared := p.Volumes["runs"]
		require.True(t, declared, "the runs volume is declared at the top level, so every replica shares it")
	})

	t.Run("interpolation", func(t *testing.T) {
		t.Parallel()
		p, err := loadCompose(t.Context(), composePath, "CAPSTAN_POSTGRES_PASSWORD=s3cret")
		require.NoError(t, err)
		require.Equal(t, "s3cret", *p.Services["postgres"].Environment["POSTGRES_PASSWORD"],
			"CAPSTAN_POSTGRES_PASSWORD sets the postgres password")
		for _, name := range []string{"migrate", "api", "scheduler", "abort-reconciler"} {
			raw, _ := composeEnv(p.Services[name], "CAPSTAN_DATABASE_URL")
			u, err := url.Parse(raw)
			require.NoError(t, err)
			pass, _ := u.User.Password()
			require.Equalf(t, "s3cret", pass, "%s: CAPSTAN_DATABASE_URL follows CAPSTAN_POSTGRES_PASSWORD", name)
		}
	})
}

// TestComposeChecksFail shows that the loader and the checks above reject
// broken compose files.
func TestComposeChecksFail(t *testing.T) {
	t.Parallel()
	write := func(t *testing.T, content string) string {
		t.Helper()
		path := filepath.Join(t.TempDir(), "docker-compose.yml")
		require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
		return path
	}
	broken := map[string]string{
		"misspelt key": `
name: broken
services:
  api:
    image: example/api:1
    enviroment: {CAPSTAN_API_ADDR: "0.0.0.0:8080"}
`,
		"undefined dependency": `
name: broken
services:
  api:
    image: example/api:1
    depends_on:
      migrate:
        condition: service_completed_successfully
`,
		"replicas not a number": `
name: broken
services:
  executor:
    image: example/executor:1
    deploy:
      replicas: two
`,
	}
	for name, content := range broken {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := loadCompose(t.Context(), write(t, content))
			require.Error(t, err, "compose-go must reject a compose file with a "+name)
		})
	}

	t.Run("waiting only for migrate to start", func(t *testing.T) {
		t.Parallel()
		p, err := loadCompose(t.Context(), write(t, `
name: control
services:
  migrate:
    image: example/api:1
  api:
    image: example/api:1
    depends_on:
      migrate:
        condition: service_started
  executor:
    image: example/executor:1
    depends_on: [api]
`))
		require.NoError(t, err, "the control file is valid")
		require.False(t, waitsFor(p, "executor", "migrate", types.ServiceConditionCompletedSuccessfully),
			"waiting for migrate to start is not waiting for it to complete")
		require.True(t, waitsFor(p, "executor", "migrate", types.ServiceConditionStarted),
			"executor waits for migrate through api")
	})
}

// ---------------------------------------------------------------------------
// deploy/k8s

// kustomization is the part of a kustomize Kustomization these manifests
// use; decoding into it strictly rejects any other field.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace,omitempty"`
	Resources  []string `json:"resources"`
}

// kinds maps "apiVersion/kind" to a new typed object of that kind.
var kinds = map[string]func() any{
	"v1/Namespace":             func() any { return &corev1.Namespace{} },
	"v1/ConfigMap":             func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                func() any { return &corev1.Secret{} },
	"v1/Service":               func() any { return &corev1.Service{} },
	"v1/PersistentVolumeClaim": func() any { return &corev1.PersistentVolumeClaim{} },
	"apps/v1/Deployment":       func() any { return &appsv1.Deployment{} },
	"batch/v1/Job":             func() any { return &batchv1.Job{} },
	"kustomize.config.k8s.io/v1beta1/Kustomization": func() any { return &kustomization{} },
}

// decodeDocument decodes one YAML document strictly into the typed object its
// apiVersion and kind name: an unknown or duplicate field is an error.
func decodeDocument(doc []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	if tm.APIVersion == "" || tm.Kind == "" {
		return nil, errors.New("document has no apiVersion or kind")
	}
	key := tm.APIVersion + "/" + tm.Kind
	newObj, ok := kinds[key]
	if !ok {
		return nil, fmt.Errorf("unsupported apiVersion/kind %s", key)
	}
	obj := newObj()
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return obj, nil
}

// decodeManifests strictly decodes every non-empty document of a YAML stream.
func decodeManifests(r io.Reader) ([]any, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var objs []any
	for i := 0; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		var probe map[string]any
		if err := yaml.Unmarshal(doc, &probe); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if probe == nil {
			continue // only comments or whitespace
		}
		obj, err := decodeDocument(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		objs = append(objs, obj)
	}
}

// cluster is everything deploy/k8s defines, by kind and name.
type cluster struct {
	files          map[string][]any
	namespaces     map[string]*corev1.Namespace
	configMaps     map[string]*corev1.ConfigMap
	secrets        map[string]*corev1.Secret
	services       map[string]*corev1.Service
	pvcs           map[string]*corev1.PersistentVolumeClaim
	deployments    map[string]*appsv1.Deployment
	jobs           map[string]*batchv1.Job
	kustomizations []*kustomization
}

// workload is a pod template and what owns it.
type workload struct {
	kind, name string
	replicas   int32
	labels     map[string]string
	spec       corev1.PodSpec
}

// component returns the workload's Capstan component label.
func (w workload) component() string { return w.labels[componentLabel] }

// workloads returns every Deployment and Job pod template, sorted by name.
func (c *cluster) workloads() []workload {
	var ws []workload
	for _, d := range c.deployments {
		replicas := int32(1)
		if d.Spec.Replicas != nil {
			replicas = *d.Spec.Replicas
		}
		ws = append(ws, workload{"Deployment", d.Name, replicas, d.Spec.Template.Labels, d.Spec.Template.Spec})
	}
	for _, j := range c.jobs {
		ws = append(ws, workload{"Job", j.Name, 1, j.Spec.Template.Labels, j.Spec.Template.Spec})
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].name < ws[j].name })
	return ws
}

// byComponent returns the workload of a component, failing when there is not
// exactly one.
func (c *cluster) byComponent(t testing.TB, component string) workload {
	t.Helper()
	var found []workload
	for _, w := range c.workloads() {
		if w.component() == component {
			found = append(found, w)
		}
	}
	require.Lenf(t, found, 1, "exactly one workload is labelled %s=%s", componentLabel, component)
	return found[0]
}

// loadCluster decodes every deploy/k8s/*.yaml file.
func loadCluster(t testing.TB, dir string) *cluster {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, paths, "deploy/k8s holds manifests")
	c := &cluster{
		files:       map[string][]any{},
		namespaces:  map[string]*corev1.Namespace{},
		configMaps:  map[string]*corev1.ConfigMap{},
		secrets:     map[string]*corev1.Secret{},
		services:    map[string]*corev1.Service{},
		pvcs:        map[string]*corev1.PersistentVolumeClaim{},
		deployments: map[string]*appsv1.Deployment{},
		jobs:        map[string]*batchv1.Job{},
	}
	for _, path := range paths {
		f, err := os.Open(path)
		require.NoError(t, err)
		objs, err := decodeManifests(f)
		require.NoError(t, f.Close())
		require.NoErrorf(t, err, "%s must decode strictly into typed Kubernetes objects", filepath.Base(path))
		require.NotEmptyf(t, objs, "%s holds at least one object", filepath.Base(path))
		c.files[filepath.Base(path)] = objs
		for _, obj := range objs {
			if meta := objectMeta(obj); meta != nil {
				require.NotEmptyf(t, meta.Name, "%s: every object has a name", filepath.Base(path))
			}
			switch o := obj.(type) {
			case *corev1.Namespace:
				require.NotContainsf(t, c.namespaces, o.Name, "duplicate Namespace %s", o.Name)
				c.namespaces[o.Name] = o
			case *corev1.ConfigMap:
				require.NotContainsf(t, c.configMaps, o.Name, "duplicate ConfigMap %s", o.Name)
				c.configMaps[o.Name] = o
			case *corev1.Secret:
				require.NotContainsf(t, c.secrets, o.Name, "duplicate Secret %s", o.Name)
				c.secrets[o.Name] = o
			case *corev1.Service:
				require.NotContainsf(t, c.services, o.Name, "duplicate Service %s", o.Name)
				c.services[o.Name] = o
			case *corev1.PersistentVolumeClaim:
				require.NotContainsf(t, c.pvcs, o.Name, "duplicate PersistentVolumeClaim %s", o.Name)
				c.pvcs[o.Name] = o
			case *appsv1.Deployment:
				require.NotContainsf(t, c.deployments, o.Name, "duplicate Deployment %s", o.Name)
				c.deployments[o.Name] = o
			case *batchv1.Job:
				require.NotContainsf(t, c.jobs, o.Name, "duplicate Job %s", o.Name)
				c.jobs[o.Name] = o
			case *kustomization:
				c.kustomizations = append(c.kustomizations, o)
			}
		}
	}
	return c
}

// objectMeta returns a decoded object's metadata, or nil for objects that
// have none (a Kustomization).
func objectMeta(obj any) *metav1.ObjectMeta {
	if o, ok := obj.(metav1.ObjectMetaAccessor); ok {
		return o.GetObjectMeta().(*metav1.ObjectMeta)
	}
	return nil
}

// podProblems lists what is wrong with a pod template: every container must
// have CPU and memory requests and limits (requests within limits), run as
// the non-root uid, not escalate privileges, and use a pinned image.
func podProblems(spec corev1.PodSpec) []string {
	var problems []string
	if len(spec.Containers) == 0 {
		problems = append(problems, "pod has no containers")
	}
	podSC := spec.SecurityContext
	if podSC == nil {
		podSC = &corev1.PodSecurityContext{}
	}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := c.Resources.Requests[res]
			limit, hasLimit := c.Resources.Limits[res]
			if !hasReq {
				problems = append(problems, fmt.Sprintf("container %q has no %s request", c.Name, res))
			}
			if !hasLimit {
				problems = append(problems, fmt.Sprintf("container %q has no %s limit", c.Name, res))
			}
			if hasReq && hasLimit && req.Cmp(limit) > 0 {
				problems = append(problems, fmt.Sprintf("container %q requests more %s than its limit", c.Name, res))
			}
		}
		sc := c.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		nonRoot, uid := podSC.RunAsNonRoot, podSC.RunAsUser
		if sc.RunAsNonRoot != nil {
			nonRoot = sc.RunAsNonRoot
		}
		if sc.RunAsUser != nil {
			uid = sc.RunAsUser
		}
		if nonRoot == nil || !*nonRoot {
			problems = append(problems, fmt.Sprintf("container %q does not set runAsNonRoot: true", c.Name))
		}
		if uid == nil || *uid != nonRootUID {
			problems = append(problems, fmt.Sprintf("container %q does not run as uid %d", c.Name, nonRootUID))
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			problems = append(problems, fmt.Sprintf("container %q does not set allowPrivilegeEscalation: false", c.Name))
		}
		if p := imageProblem(c.Image); p != "" {
			problems = append(problems, fmt.Sprintf("container %q: %s", c.Name, p))
		}
	}
	return problems
}

// selectorProblem says why a Deployment's selector does not select its own
// pod template, or "".
func selectorProblem(d *appsv1.Deployment) string {
	if d.Spec.Selector == nil || len(d.Spec.Selector.MatchLabels)+len(d.Spec.Selector.MatchExpressions) == 0 {
		return fmt.Sprintf("Deployment %s has no selector", d.Name)
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return fmt.Sprintf("Deployment %s: %v", d.Name, err)
	}
	if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		return fmt.Sprintf("Deployment %s: selector %s does not match template labels %v", d.Name, sel, d.Spec.Template.Labels)
	}
	return ""
}

// containerPort resolves a named or numbered port against a container's
// declared ports, returning the port number or 0.
func containerPort(c corev1.Container, port intstr.IntOrString) int32 {
	for _, p := range c.Ports {
		if (port.Type == intstr.String && p.Name == port.StrVal) ||
			(port.Type == intstr.Int && p.ContainerPort == port.IntVal) {
			return p.ContainerPort
		}
	}
	return 0
}

// envVarRef matches a $(NAME) reference in an env value.
var envVarRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// containerEnv resolves the environment a container starts with, the way the
// kubelet builds it: envFrom sources in order, then env entries. Values from
// the downward API read "fieldRef:<path>". It returns the values and what is
// wrong: a missing ConfigMap, Secret or key, or a $(NAME) reference to a
// variable not defined before it (Kubernetes would leave it unexpanded).
func (c *cluster) containerEnv(ctr corev1.Container) (map[string]string, []string) {
	env := map[string]string{}
	var problems []string
	secretData := func(s *corev1.Secret) map[string]string {
		data := map[string]string{}
		for k, v := range s.Data {
			data[k] = string(v)
		}
		for k, v := range s.StringData {
			data[k] = v
		}
		return data
	}
	for _, from := range ctr.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm, ok := c.configMaps[from.ConfigMapRef.Name]
			if !ok {
				problems = append(problems, fmt.Sprintf("envFrom ConfigMap %q is not defined", from.ConfigMapRef.Name))
				continue
			}
			for k, v := range cm.Data {
				env[from.Prefix+k] = v
			}
		case from.SecretRef != nil:
			s, ok := c.secrets[from.SecretRef.Name]
			if !ok {
				problems = append(problems, fmt.Sprintf("envFrom Secret %q is not defined", from.SecretRef.Name))
				continue
			}
			for k, v := range secretData(s) {
				env[from.Prefix+k] = v
			}
		}
	}
	for _, e := range ctr.Env {
		switch {
		case e.ValueFrom == nil:
			for _, m := range envVarRef.FindAllStringSubmatch(e.Value, -1) {
				if _, ok := env[m[1]]; !ok {
					problems = append(problems, fmt.Sprintf("%s refers to $(%s), which is not defined before it", e.Name, m[1]))
				}
			}
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			env[e.Name] = "fieldRef:" + e.ValueFrom.FieldRef.FieldPath
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s, ok := c.secrets[ref.Name]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: Secret %q is not defined", e.Name, ref.Name))
				continue
			}
			v, ok := secretData(s)[ref.Key]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: Secret %q has no key %q", e.Name, ref.Name, ref.Key))
			}
			env[e.Name] = v
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm, ok := c.configMaps[ref.Name]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: ConfigMap %q is not defined", e.Name, ref.Name))
				continue
			}
			v, ok := cm.Data[ref.Key]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: ConfigMap %q has no key %q", e.Name, ref.Name, ref.Key))
			}
			env[e.Name] = v
		default:
			env[e.Name] = "valueFrom"
		}
	}
	return env, problems
}

func TestKubernetesManifests(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	dir := filepath.Join(root, "deploy", "k8s")
	c := loadCluster(t, dir)

	t.Run("kustomization lists every manifest", func(t *testing.T) {
		t.Parallel()
		require.Len(t, c.kustomizations, 1, "kustomization.yaml defines one Kustomization")
		k := c.kustomizations[0]
		require.Equal(t, namespace, k.Namespace)
		var manifests []string
		for name := range c.files {
			if name != "kustomization.yaml" {
				manifests = append(manifests, name)
			}
		}
		require.ElementsMatch(t, manifests, k.Resources, "kubectl apply -k deploy/k8s applies every manifest in deploy/k8s")
	})

	t.Run("namespace", func(t *testing.T) {
		t.Parallel()
		require.Contains(t, c.namespaces, namespace, "namespace.yaml defines the capstan namespace")
		for file, objs := range c.files {
			for _, obj := range objs {
				meta := objectMeta(obj)
				if meta == nil {
					continue
				}
				if _, isNS := obj.(*corev1.Namespace); isNS {
					continue
				}
				require.Equalf(t, namespace, meta.Namespace, "%s: %s lives in namespace %s", file, meta.Name, namespace)
			}
		}
	})

	t.Run("pods", func(t *testing.T) {
		t.Parallel()
		ws := c.workloads()
		require.NotEmpty(t, ws)
		var tags []string
		for _, w := range ws {
			require.Emptyf(t, podProblems(w.spec), "%s %s: every container has resource requests and limits, runs as non-root uid %d, and uses a pinned image", w.kind, w.name, nonRootUID)
			for _, ctr := range w.spec.Containers {
				repo, tag := splitImage(ctr.Image)
				want := w.component()
				if want == "migrate" {
					want = "api"
				}
				require.Equalf(t, "ghcr.io/capstan-run/capstan-"+want, repo, "%s %s runs the %s image", w.kind, w.name, want)
				require.Regexpf(t, `^[0-9]+\.[0-9]+\.[0-9]+$`, tag, "%s %s: image tag is a release version", w.kind, w.name)
				tags = append(tags, tag)
			}
			for _, v := range w.spec.Volumes {
				if v.PersistentVolumeClaim != nil {
					require.Containsf(t, c.pvcs, v.PersistentVolumeClaim.ClaimName, "%s %s: claim %s is defined", w.kind, w.name, v.PersistentVolumeClaim.ClaimName)
				}
			}
		}
		slices.Sort(tags)
		require.Len(t, slices.Compact(tags), 1, "every image is of one release")
		for _, name := range components {
			require.Equalf(t, "Deployment", c.byComponent(t, name).kind, "%s runs as a Deployment", name)
		}
	})

	t.Run("replicas", func(t *testing.T) {
		t.Parallel()
		for name, want := range map[string]int32{"api": 2, "scheduler": 2, "executor": 2, "abort-reconciler": 1} {
			require.Equalf(t, want, c.byComponent(t, name).replicas, "%s runs %d replicas", name, want)
		}
	})

	t.Run("selectors", func(t *testing.T) {
		t.Parallel()
		for _, d := range c.deployments {
			require.Empty(t, selectorProblem(d), "every Deployment's selector matches its template labels")
		}
		require.NotEmpty(t, c.services)
		for _, svc := range c.services {
			require.NotEmptyf(t, svc.Spec.Selector, "Service %s selects pods", svc.Name)
			sel := labels.SelectorFromSet(svc.Spec.Selector)
			var matched []*appsv1.Deployment
			for _, d := range c.deployments {
				if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
					matched = append(matched, d)
				}
			}
			require.NotEmptyf(t, matched, "Service %s's selector %s matches some Deployment's pod labels", svc.Name, sel)
			for _, d := range matched {
				for _, port := range svc.Spec.Ports {
					target := port.TargetPort
					if target.Type == intstr.Int && target.IntVal == 0 {
						target = intstr.FromInt32(port.Port)
					}
					var found bool
					for _, ctr := range d.Spec.Template.Spec.Containers {
						found = found || containerPort(ctr, target) != 0
					}
					require.Truef(t, found, "Service %s port %d targets %s, a port Deployment %s declares", svc.Name, port.Port, target.String(), d.Name)
				}
			}
		}
	})

	t.Run("probes", func(t *testing.T) {
		t.Parallel()
		for _, name := range []string{"api", "scheduler", "abort-reconciler"} {
			w := c.byComponent(t, name)
			ctr := w.spec.Containers[0]
			env, _ := c.containerEnv(ctr)
			listen := "CAPSTAN_METRICS_ADDR"
			if name == "api" {
				listen = "CAPSTAN_API_ADDR"
			}
			port := addrPort(t, env[listen])
			for probe, path := range map[*corev1.Probe]string{ctr.ReadinessProbe: "/readyz", ctr.LivenessProbe: "/healthz"} {
				require.NotNilf(t, probe, "%s has a readiness probe on /readyz and a liveness probe on /healthz", name)
				require.NotNilf(t, probe.HTTPGet, "%s probes %s over HTTP", name, path)
				require.Equalf(t, path, probe.HTTPGet.Path, "%s probes %s", name, path)
				require.Equalf(t, port, strconv.Itoa(int(containerPort(ctr, probe.HTTPGet.Port))),
					"%s probes %s on the port of %s", name, path, listen)
			}
		}
		for _, w := range c.workloads() {
			for _, ctr := range w.spec.Containers {
				for _, probe := range []*corev1.Probe{ctr.ReadinessProbe, ctr.LivenessProbe, ctr.StartupProbe} {
					switch {
					case probe == nil:
					case probe.HTTPGet != nil:
						require.NotZerof(t, containerPort(ctr, probe.HTTPGet.Port), "%s: probe port %s is declared", w.name, probe.HTTPGet.Port.String())
					case probe.TCPSocket != nil:
						require.NotZerof(t, containerPort(ctr, probe.TCPSocket.Port), "%s: probe port %s is declared", w.name, probe.TCPSocket.Port.String())
					}
				}
			}
		}
	})

	t.Run("environment", func(t *testing.T) {
		t.Parallel()
		for name, want := range wantEnv {
			w := c.byComponent(t, name)
			require.Lenf(t, w.spec.Containers, 1, "%s runs one container", name)
			ctr := w.spec.Containers[0]
			env, problems := c.containerEnv(ctr)
			require.Emptyf(t, problems, "%s: every env source exists and every $(VAR) is defined before use", name)
			for key, value := range want {
				got, ok := env[key]
				require.Truef(t, ok, "%s reads %s, so it must be set directly or through envFrom", name, key)
				require.NotEmptyf(t, got, "%s: %s must not be empty", name, key)
				if value != "" {
					require.Equalf(t, value, got, "%s: %s", name, key)
				}
			}
			for _, key := range listenVars {
				if addr, ok := env[key]; ok {
					port, err := strconv.Atoi(addrPort(t, addr))
					require.NoError(t, err)
					require.NotZerof(t, containerPort(ctr, intstr.FromInt(port)), "%s declares the port of %s=%s", name, key, addr)
				}
			}
			if raw, ok := env["CAPSTAN_DATABASE_URL"]; ok {
				u, err := url.Parse(raw)
				require.NoErrorf(t, err, "%s: CAPSTAN_DATABASE_URL parses", name)
				require.Containsf(t, []string{"postgres", "postgresql"}, u.Scheme, "%s: CAPSTAN_DATABASE_URL is a postgres URL", name)
				require.NotEmptyf(t, u.Hostname(), "%s: CAPSTAN_DATABASE_URL names a host", name)
			}
			if addr, ok := env["CAPSTAN_REDIS_ADDR"]; ok {
				addrPort(t, addr)
			}
			if raw, ok := env["CAPSTAN_API_URL"]; ok {
				u, err := url.Parse(raw)
				require.NoErrorf(t, err, "%s: CAPSTAN_API_URL parses", name)
				svc, ok := c.services[u.Hostname()]
				require.Truef(t, ok, "%s: CAPSTAN_API_URL %s names a Service", name, raw)
				var ports []string
				for _, p := range svc.Spec.Ports {
					ports = append(ports, strconv.Itoa(int(p.Port)))
				}
				require.Containsf(t, ports, u.Port(), "%s: CAPSTAN_API_URL %s uses a port of Service %s", name, raw, svc.Name)
			}
		}
	})

	t.Run("migrate job", func(t *testing.T) {
		t.Parallel()
		w := c.byComponent(t, "migrate")
		require.Equal(t, "Job", w.kind, "the migration is a Job")
		require.Contains(t, []corev1.RestartPolicy{corev1.RestartPolicyNever, corev1.RestartPolicyOnFailure}, w.spec.RestartPolicy, "a Job's pods restart Never or OnFailure")
		ctr := w.spec.Containers[0]
		require.Empty(t, ctr.Command, "command would replace the image's ENTRYPOINT; the argument goes in args")
		require.Equal(t, []string{"migrate"}, ctr.Args, `the Job runs the api binary with args ["migrate"]`)
	})

	t.Run("executor", func(t *testing.T) {
		t.Parallel()
		w := c.byComponent(t, "executor")
		ctr := w.spec.Containers[0]
		env, _ := c.containerEnv(ctr)
		require.Equal(t, "fieldRef:status.podIP", env["POD_IP"], "POD_IP comes from the downward API (status.podIP)")
		port := addrPort(t, env["CAPSTAN_EXECUTOR_ADDR"])
		require.Equal(t, "http://$(POD_IP):"+port, env["CAPSTAN_EXECUTOR_ADVERTISE_URL"],
			"each executor advertises http://$(POD_IP):<port of CAPSTAN_EXECUTOR_ADDR>")

		var claim string
		for _, m := range ctr.VolumeMounts {
			if m.MountPath == env["CAPSTAN_DATA_DIR"] {
				require.False(t, m.ReadOnly, "executors write run directories")
				for _, v := range w.spec.Volumes {
					if v.Name == m.Name && v.PersistentVolumeClaim != nil {
						claim = v.PersistentVolumeClaim.ClaimName
					}
				}
			}
		}
		require.Equal(t, "capstan-runs", claim, "the executor mounts the claim capstan-runs at CAPSTAN_DATA_DIR")
		pvc := c.pvcs[claim]
		require.NotNil(t, pvc, "pvc.yaml defines capstan-runs")
		require.Contains(t, pvc.Spec.AccessModes, corev1.ReadWriteMany,
			"executors of one run share its run directory, so the claim is ReadWriteMany")
		_, sized := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
		require.True(t, sized, "the claim requests a storage size")
		require.NotNil(t, w.spec.SecurityContext.FSGroup, "fsGroup makes the shared volume writable by the non-root user")
		require.EqualValues(t, nonRootUID, *w.spec.SecurityContext.FSGroup)
	})

	t.Run("secret", func(t *testing.T) {
		t.Parallel()
		s, ok := c.secrets["capstan-db"]
		require.True(t, ok, "secret.yaml defines capstan-db")
		require.Contains(t, s.StringData, "CAPSTAN_DATABASE_URL", "the database URL is given as stringData")
		require.Empty(t, s.Data, "no base64 data to keep in sync")
	})
}

// TestKubernetesChecksFail shows that the strict decoder and the checks above
// reject broken manifests.
func TestKubernetesChecksFail(t *testing.T) {
	t.Parallel()
	const valid = `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: capstan-api
  namespace: capstan
spec:
  replicas: 1
  selector:
    matchLabels: {app.kubernetes.io/component: api}
  template:
    metadata:
      labels: {app.kubernetes.io/component: api}
    spec:
      containers:
        - name: api
          image: ghcr.io/capstan-run/capstan-api:0.1.0
`
	t.Run("control", func(t *testing.T) {
		t.Parallel()
		objs, err := decodeManifests(strings.NewReader("# a comment\n---\n" + valid))
		require.NoError(t, err, "the control manifest is valid")
		require.Len(t, objs, 1)
		require.IsType(t, &appsv1.Deployment{}, objs[0])
	})

	broken := map[string]string{
		"unknown field":       strings.Replace(valid, "          image:", "          imagePullPolicyy: Always\n          image:", 1),
		"misspelt spec field": strings.Replace(valid, "  replicas: 1", "  replica: 1", 1),
		"duplicate field":     strings.Replace(valid, "  replicas: 1", "  replicas: 1\n  replicas: 2", 1),
		"wrong type":          strings.Replace(valid, "  replicas: 1", "  replicas: two", 1),
		"retired apiVersion":  strings.Replace(valid, "apiVersion: apps/v1", "apiVersion: extensions/v1beta1", 1),
		"no kind":             strings.Replace(valid, "kind: Deployment", "", 1),
		"broken second doc":   valid + "---\napiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {selectr: {}}\n",
	}
	for name, manifest := range broken {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := decodeManifests(strings.NewReader(manifest))
			require.Error(t, err, "strict decoding must reject a manifest with a "+name)
		})
	}

	t.Run("bad pod", func(t *testing.T) {
		t.Parallel()
		objs, err := decodeManifests(strings.NewReader(strings.Replace(valid, ":0.1.0", ":latest", 1)))
		require.NoError(t, err)
		problems := podProblems(objs[0].(*appsv1.Deployment).Spec.Template.Spec)
		for _, want := range []string{
			`container "api" has no cpu request`,
			`container "api" has no memory limit`,
			`container "api" does not set runAsNonRoot: true`,
			`container "api" does not run as uid 10001`,
			`container "api" does not set allowPrivilegeEscalation: false`,
			`container "api": image "ghcr.io/capstan-run/capstan-api:latest" uses the latest tag`,
		} {
			require.Contains(t, problems, want)
		}
	})

	t.Run("selector mismatch", func(t *testing.T) {
		t.Parallel()
		objs, err := decodeManifests(strings.NewReader(strings.Replace(valid, "labels: {app.kubernetes.io/component: api}", "labels: {app.kubernetes.io/component: scheduler}", 1)))
		require.NoError(t, err)
		require.Contains(t, selectorProblem(objs[0].(*appsv1.Deployment)), "does not match template labels")
	})

	t.Run("env referenced before defined", func(t *testing.T) {
		t.Parallel()
		c := &cluster{}
		_, problems := c.containerEnv(corev1.Container{Env: []corev1.EnvVar{
			{Name: "CAPSTAN_EXECUTOR_ADVERTISE_URL", Value: "http://$(POD_IP):9090"},
			{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		}})
		require.Equal(t, []string{"CAPSTAN_EXECUTOR_ADVERTISE_URL refers to $(POD_IP), which is not defined before it"}, problems)
	})
}

// ---------------------------------------------------------------------------
// deploy/docker

// dockerfileSpec says what one Dockerfile must build.
type dockerfileSpec struct {
	path       string   // relative to the repository root
	builder    string   // base image of the first stage
	runtime    string   // base image of the final stage
	buildDir   string   // the module directory `go build` runs in
	output     string   // the binary `go build -o` writes
	binary     string   // where the final stage puts it: the ENTRYPOINT
	buildArg   string   // the build arg naming what to build, if any
	argValues  []string // values of buildArg to resolve COPY sources with
	contextDir []string // directories of the build context the COPY sources must come from
}

// dockerfiles are the Dockerfiles under deploy/docker.
var dockerfiles = []dockerfileSpec{{
	path:       serviceDockerfile,
	builder:    "golang:1.26-bookworm",
	runtime:    "debian:bookworm-slim",
	buildDir:   "./services/${SERVICE}",
	output:     "/out/capstan-${SERVICE}",
	binary:     "/usr/local/bin/capstan-service",
	buildArg:   "SERVICE",
	argValues:  components,
	contextDir: []string{"pkg", "services"},
}, {
	path:       "deploy/docker/Dockerfile.cli",
	builder:    "golang:1.26-bookworm",
	runtime:    "debian:bookworm-slim",
	buildDir:   "./cmd/capstan",
	output:     "/out/capstan",
	binary:     "/usr/local/bin/capstan",
	contextDir: []string{"pkg", "cmd"},
}}

// dockerfile is a parsed Dockerfile.
type dockerfile struct {
	stages   []instructions.Stage
	escape   rune
	warnings []string
}

// parseDockerfile parses a Dockerfile with BuildKit's parser into stages,
// collecting the parser's and linter's warnings.
func parseDockerfile(r io.Reader) (*dockerfile, error) {
	res, err := parser.Parse(r)
	if err != nil {
		return nil, err
	}
	df := &dockerfile{escape: res.EscapeToken}
	for _, w := range res.Warnings {
		df.warnings = append(df.warnings, w.Short)
	}
	lint := linter.New(&linter.Config{Warn: func(rule, _, _, msg string, _ []parser.Range) {
		df.warnings = append(df.warnings, rule+": "+msg)
	}})
	df.stages, _, err = instructions.Parse(res.AST, lint)
	if err != nil {
		return nil, err
	}
	return df, nil
}

// commandText returns an instruction's source text.
func commandText(cmd instructions.Command) string {
	if s, ok := cmd.(fmt.Stringer); ok {
		return s.String()
	}
	return cmd.Name()
}

// containsWord reports whether line contains word delimited by the start or
// end of the line, blanks or shell operators, so "./cmd/capstan" is not found
// in "./cmd/capstanx".
func containsWord(line, word string) bool {
	return regexp.MustCompile(`(^|[\s;&|(])` + regexp.QuoteMeta(word) + `($|[\s;&|)])`).MatchString(line)
}

// dockerfileProblems lists how a parsed Dockerfile falls short of spec:
// multi-stage, pinned base images, a trimmed static `go build` of the right
// module, a final stage that copies the binary to a fixed ENTRYPOINT and runs
// as the non-root uid, no HEALTHCHECK, and COPY sources that exist under
// root for every value of the build arg.
func dockerfileProblems(spec dockerfileSpec, df *dockerfile, root string) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	for _, w := range df.warnings {
		add("warning: %s", w)
	}
	if len(df.stages) < 2 {
		add("is not multi-stage: %d stage(s)", len(df.stages))
		return problems
	}
	build, final := df.stages[0], df.stages[len(df.stages)-1]
	if build.BaseName != spec.builder {
		add("first stage is FROM %s, want %s", build.BaseName, spec.builder)
	}
	if final.BaseName != spec.runtime {
		add("final stage is FROM %s, want %s", final.BaseName, spec.runtime)
	}
	stageNames := map[string]bool{}
	for _, s := range df.stages {
		if !stageNames[s.BaseName] {
			if p := imageProblem(s.BaseName); p != "" {
				add("FROM: %s", p)
			}
		}
		stageNames[s.Name] = true
	}

	// The build stage: GOWORK=off, and a static, trimmed go build.
	var goworkOff, built bool
	for _, cmd := range build.Commands {
		switch c := cmd.(type) {
		case *instructions.EnvCommand:
			for _, kv := range c.Env {
				goworkOff = goworkOff || (kv.Key == "GOWORK" && kv.Value == "off")
			}
		case *instructions.RunCommand:
			line := strings.Join(c.CmdLine, " ")
			if !strings.Contains(line, "go build") {
				continue
			}
			built = true
			for _, want := range []string{"CGO_ENABLED=0", "-trimpath", spec.buildDir, "-o " + spec.output} {
				if !containsWord(line, want) {
					add("the go build command does not contain %q: %s", want, line)
				}
			}
		}
	}
	if !goworkOff {
		add("the build stage does not set ENV GOWORK=off")
	}
	if !built {
		add("the build stage runs no go build")
	}

	// Stages that use the build arg must declare it, or it expands to "".
	if spec.buildArg != "" {
		for _, s := range df.stages {
			var declared bool
			for _, cmd := range s.Commands {
				if a, ok := cmd.(*instructions.ArgCommand); ok {
					for _, kv := range a.Args {
						declared = declared || kv.Key == spec.buildArg
					}
				}
				if !declared && strings.Contains(commandText(cmd), "${"+spec.buildArg+"}") {
					add("stage %q uses ${%s} before declaring ARG %s: %s", s.Name, spec.buildArg, spec.buildArg, commandText(cmd))
				}
			}
		}
	}

	// The final stage.
	var copied, caCerts, hasUser bool
	var user string
	var entrypoint *instructions.EntrypointCommand
	for _, cmd := range final.Commands {
		switch c := cmd.(type) {
		case *instructions.CopyCommand:
			if c.From == build.Name && slices.Equal(c.SourcePaths, []string{spec.output}) && c.DestPath == spec.binary {
				copied = true
			}
		case *instructions.RunCommand:
			caCerts = caCerts || strings.Contains(strings.Join(c.CmdLine, " "), "ca-certificates")
		case *instructions.UserCommand:
			hasUser, user = true, c.User
		case *instructions.EntrypointCommand:
			entrypoint = c
		}
	}
	if !copied {
		add("the final stage does not COPY --from=%s %s %s", build.Name, spec.output, spec.binary)
	}
	if !caCerts {
		add("the final stage does not install ca-certificates")
	}
	uid, _, _ := strings.Cut(user, ":")
	switch {
	case !hasUser:
		add("the final stage has no USER, so it runs as root")
	case uid == "" || uid == "root" || uid == "0":
		add("the final stage runs as root (USER %s)", user)
	case uid != strconv.Itoa(nonRootUID):
		add("the final stage runs as USER %s, want the numeric uid %d that runAsNonRoot can verify", user, nonRootUID)
	}
	switch {
	case entrypoint == nil:
		add("the final stage has no ENTRYPOINT")
	case entrypoint.PrependShell:
		add("the ENTRYPOINT is in shell form, so signals go to /bin/sh: %v", entrypoint.CmdLine)
	case !slices.Equal(entrypoint.CmdLine, []string{spec.binary}):
		add("the ENTRYPOINT is %v, want [%q]", entrypoint.CmdLine, spec.binary)
	}
	for _, s := range df.stages {
		for _, cmd := range s.Commands {
			if _, ok := cmd.(*instructions.HealthCheckCommand); ok {
				add("stage %q has a HEALTHCHECK; health is probed by compose or Kubernetes", s.Name)
			}
		}
	}

	// COPY sources from the build context exist, for every build arg value.
	values := spec.argValues
	if spec.buildArg == "" {
		values = []string{""}
	}
	lex := shell.NewLex(df.escape)
	for _, value := range values {
		env := shell.EnvsFromSlice([]string{spec.buildArg + "=" + value})
		for _, s := range df.stages {
			for _, cmd := range s.Commands {
				c, ok := cmd.(*instructions.CopyCommand)
				if !ok || c.From != "" {
					continue
				}
				for _, src := range c.SourcePaths {
					path, _, err := lex.ProcessWord(src, env)
					if err != nil {
						add("COPY %s: %v", src, err)
						continue
					}
					path = filepath.Clean(path)
					top, _, _ := strings.Cut(path, string(filepath.Separator))
					if !slices.Contains(spec.contextDir, top) {
						add("COPY %s (%s=%s) reads %s, outside %v", src, spec.buildArg, value, path, spec.contextDir)
					}
					// A glob is checked up to its directory: the modules'
					// files are written separately from these deploy files.
					if strings.ContainsAny(path, "*?[") {
						path = filepath.Dir(path)
					}
					if _, err := os.Stat(filepath.Join(root, path)); err != nil {
						add("COPY %s (%s=%s): %s does not exist in the repository", src, spec.buildArg, value, path)
					}
				}
			}
		}
	}
	return problems
}

func TestDockerfiles(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	for _, spec := range dockerfiles {
		t.Run(filepath.Base(spec.path), func(t *testing.T) {
			t.Parallel()
			content, err := os.ReadFile(filepath.Join(root, spec.path))
			require.NoError(t, err)
			df, err := parseDockerfile(bytes.NewReader(content))
			require.NoErrorf(t, err, "%s parses with BuildKit's Dockerfile parser", spec.path)
			require.Emptyf(t, dockerfileProblems(spec, df, root), "%s: multi-stage, non-root USER %d, exec-form ENTRYPOINT %s, builds %s", spec.path, nonRootUID, spec.binary, spec.buildDir)
		})
	}
	for _, arg := range components {
		require.DirExistsf(t, filepath.Join(root, "services", arg), "SERVICE=%s builds ./services/%s", arg, arg)
	}
}

// TestDockerfileChecksFail shows that the Dockerfile checks catch a
// single-stage root image and a broken instruction.
func TestDockerfileChecksFail(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)

	t.Run("single stage as root", func(t *testing.T) {
		t.Parallel()
		df, err := parseDockerfile(strings.NewReader("FROM golang:latest as build\nRUN go build -o /capstan .\nENTRYPOINT /capstan\n"))
		require.NoError(t, err)
		problems := dockerfileProblems(dockerfiles[0], df, root)
		require.Len(t, problems, 2)
		require.True(t, strings.HasPrefix(problems[0], "warning: FromAsCasing: "), "BuildKit's linter warnings are problems: %q", problems[0])
		require.Equal(t, "is not multi-stage: 1 stage(s)", problems[1])
	})

	t.Run("root final stage", func(t *testing.T) {
		t.Parallel()
		content, err := os.ReadFile(filepath.Join(root, serviceDockerfile))
		require.NoError(t, err)
		broken := string(content)
		for old, repl := range map[string]string{
			"USER 10001:10001": "USER root",
			`ENTRYPOINT ["/usr/local/bin/capstan-service"]`: `ENTRYPOINT ["/usr/local/bin/capstan"]`,
			"COPY services/ ./services/":                    "COPY services/ cmd/ ./",
			"-trimpath -ldflags":                            "-ldflags",
		} {
			require.Contains(t, broken, old, "the breakage applies to the real Dockerfile")
			broken = strings.Replace(broken, old, repl, 1)
		}
		df, err := parseDockerfile(strings.NewReader(broken))
		require.NoError(t, err)
		problems := dockerfileProblems(dockerfiles[0], df, root)
		require.Contains(t, problems, "the final stage runs as root (USER root)")
		require.Contains(t, problems, `the ENTRYPOINT is [/usr/local/bin/capstan], want ["/usr/local/bin/capstan-service"]`)
		require.Contains(t, problems, "COPY cmd/ (SERVICE=api) reads cmd, outside [pkg services]")
		var trimpath int
		for _, p := range problems {
			if strings.HasPrefix(p, `the go build command does not contain "-trimpath"`) {
				trimpath++
			}
		}
		require.Equal(t, 1, trimpath, "the missing -trimpath is reported")
		require.Len(t, problems, 3+len(components), "USER, ENTRYPOINT, -trimpath, and COPY cmd/ once per SERVICE value, nothing else: %q", problems)
	})

	t.Run("malformed instruction", func(t *testing.T) {
		t.Parallel()
		_, err := parseDockerfile(strings.NewReader("FROM debian:bookworm-slim\nCOPY onlyone\n"))
		require.Error(t, err, "COPY needs a source and a destination")
	})
}
