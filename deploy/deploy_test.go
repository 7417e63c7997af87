package deploy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
	"github.com/stretchr/testify/require"
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
// binary), the settings a deployment must give it, and the value each must
// have; "" accepts any non-empty value, for addresses that differ between
// compose and Kubernetes. Redis is checked apart (one address, or sentinels),
// and every other variable a service reads is checked against its source
// (envProblems).
var wantEnv = map[string]map[string]string{
	"migrate": {
		"CAPSTAN_DATABASE_URL": "",
	},
	"api": {
		"CAPSTAN_DATABASE_URL": "",
		"CAPSTAN_API_ADDR":     "0.0.0.0:8080",
	},
	"scheduler": {
		"CAPSTAN_DATABASE_URL": "",
		"CAPSTAN_METRICS_ADDR": "0.0.0.0:9091",
	},
	"abort-reconciler": {
		"CAPSTAN_DATABASE_URL": "",
		"CAPSTAN_METRICS_ADDR": "0.0.0.0:9092",
	},
	"executor": {
		"CAPSTAN_API_URL":       "",
		"CAPSTAN_EXECUTOR_ADDR": "0.0.0.0:9090",
		"CAPSTAN_DATA_DIR":      dataDir,
	},
}

// release is the version every Capstan image is tagged with.
const release = "0.1.0"

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

// composeSecrets is the environment scripts/compose-env.sh writes into
// .env: every secret docker-compose.yml requires.
var composeSecrets = []string{
	"CAPSTAN_ADMIN_TOKEN=cap_admin0123456789abcdefghijklmnopqrstuvwxyz",
	"CAPSTAN_WORKER_TOKEN=cap_worker0123456789abcdefghijklmnopqrstuvwxyz",
	"CAPSTAN_CONTROL_PLANE_KEY=cap_controlplane0123456789abcdefghijklmnopqrstuvwxyz",
	"CAPSTAN_POSTGRES_PASSWORD=pg0123456789abcdefghijklmnopqrstuvwxyz",
	"CAPSTAN_REDIS_PASSWORD=redis0123456789abcdefghijklmnopqrstuvwxyz",
}

func TestCompose(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	composePath := filepath.Join(root, "docker-compose.yml")
	p, err := loadCompose(t.Context(), composePath, composeSecrets...)
	require.NoError(t, err, "docker-compose.yml must load with compose-go and the secrets of scripts/compose-env.sh")

	t.Run("secrets", func(t *testing.T) {
		t.Parallel()
		for i := range composeSecrets {
			name, _, _ := strings.Cut(composeSecrets[i], "=")
			env := slices.Delete(slices.Clone(composeSecrets), i, i+1)
			_, err := loadCompose(t.Context(), composePath, env...)
			require.ErrorContainsf(t, err, "run scripts/compose-env.sh first", "without %s compose refuses to start", name)
		}
		want := map[string]string{}
		for _, kv := range composeSecrets {
			k, v, _ := strings.Cut(kv, "=")
			want[k] = v
		}
		for name, svc := range p.Services {
			if _, ok := composeEnv(svc, "CAPSTAN_REDIS_ADDR"); ok {
				pass, _ := composeEnv(svc, "CAPSTAN_REDIS_PASSWORD")
				require.Equalf(t, want["CAPSTAN_REDIS_PASSWORD"], pass, "%s reaches Redis with its password", name)
			}
			for _, k := range []string{"CAPSTAN_ADMIN_TOKEN", "CAPSTAN_WORKER_TOKEN", "CAPSTAN_CONTROL_PLANE_KEY"} {
				if v, ok := composeEnv(svc, k); ok {
					require.Equalf(t, want[k], v, "%s: %s comes from the environment", name, k)
				}
			}
		}
		redis := p.Services["redis"]
		require.Contains(t, strings.Join(redis.Command, " "), "--requirepass", "Redis requires its password")
		pass, _ := composeEnv(redis, "REDIS_PASSWORD")
		require.Equal(t, want["CAPSTAN_REDIS_PASSWORD"], pass)
		for name, svc := range p.Services {
			for _, port := range svc.Ports {
				require.Equalf(t, "127.0.0.1", port.HostIP, "%s publishes %s on loopback only", name, port.Published)
			}
		}
	})

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
			require.Equalf(t, "ghcr.io/capstan-run/capstan-"+want+":"+release, svc.Image,
				"%s tags its build with the image name the Kubernetes manifests run", name)
		}
		postgres, redis := p.Services["postgres"], p.Services["redis"]
		require.Equal(t, "postgres:16", postgres.Image, "postgres runs postgres:16")
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
		for _, name := range components {
			hc := p.Services[name].HealthCheck
			require.NotNilf(t, hc, "%s needs a health check", name)
			require.Equalf(t, types.HealthCheckTest{"CMD", "/usr/local/bin/capstan-service", "healthcheck"}, hc.Test,
				"%s is healthy when its binary's healthcheck (its /readyz) says so", name)
		}
		require.Equal(t, types.ServiceConditionHealthy, p.Services["executor"].DependsOn["api"].Condition,
			"executors register with the api: they wait for it to be healthy")
		pgVolumes := p.Services["postgres"].Volumes
		require.Len(t, pgVolumes, 1, "postgres keeps its data in a volume")
		require.Equal(t, types.VolumeTypeVolume, pgVolumes[0].Type, "postgres keeps its data in a named volume")
		require.Equal(t, "/var/lib/postgresql/data", pgVolumes[0].Target, "postgres keeps its data in a volume")
		redisVolumes := p.Services["redis"].Volumes
		require.Len(t, redisVolumes, 1, "redis keeps its snapshots in a volume")
		require.Equal(t, types.VolumeTypeVolume, redisVolumes[0].Type, "redis keeps its snapshots in a named volume")
		require.Equal(t, "/data", redisVolumes[0].Target, "redis:7 snapshots to /data")
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
		reads := serviceEnvVars(t, root)
		given := map[string]map[string]string{}
		for name, want := range wantEnv {
			svc, ok := p.Services[name]
			require.Truef(t, ok, "service %s exists", name)
			given[name] = map[string]string{}
			for key, value := range svc.Environment {
				if value != nil {
					given[name][key] = *value
				}
			}
			for key, value := range want {
				got, ok := composeEnv(svc, key)
				require.Truef(t, ok, "%s reads %s, so it must be set", name, key)
				require.NotEmptyf(t, got, "%s: %s must not be empty", name, key)
				if value != "" {
					require.Equalf(t, value, got, "%s: %s", name, key)
				}
			}
		}
		require.Empty(t, envProblems(reads, given), "every variable a service reads is set or has a documented default")

		// What `make up` gives each service, compose gives it, with this
		// network's addresses: the same variables, and the same ports.
		up := upEnv(t, root, reads)
		for _, name := range components {
			want := map[string]bool{}
			for key := range up[name] {
				want[key] = !isNotUsed(name, key)
			}
			// Compose's Redis has a password; make up's private one, on
			// loopback, has none.
			want["CAPSTAN_REDIS_PASSWORD"] = true
			if name == "executor" {
				// Replicas share one environment: each names itself and
				// advertises its own hostname.
				delete(want, "CAPSTAN_EXECUTOR_NAME")
				want["CAPSTAN_EXECUTOR_ADVERTISE_HOST_FROM_HOSTNAME"] = true
				// The image has the capstan-task user to run attempts as,
				// every one (no sandbox: it needs CAP_SYS_ADMIN); make up
				// runs them sandboxed as root.
				want["CAPSTAN_EXECUTOR_RUN_AS"] = true
				want["CAPSTAN_EXECUTOR_INSECURE"] = true
			}
			var wantKeys []string
			for key, ok := range want {
				if ok {
					wantKeys = append(wantKeys, key)
				}
			}
			require.ElementsMatchf(t, wantKeys, sortedKeys(given[name]), "%s: compose sets the variables scripts/up.sh sets (and no tuning of its own)", name)
			for _, key := range listenVars {
				upAddr, ok := up[name][key]
				if !ok || strings.HasSuffix(upAddr, ":0") {
					continue
				}
				require.Equalf(t, addrPort(t, upAddr), addrPort(t, given[name][key]), "%s: %s listens on the port make up uses", name, key)
			}
		}
	})

	t.Run("replicas", func(t *testing.T) {
		t.Parallel()
		for _, name := range []string{"scheduler", "abort-reconciler", "executor"} {
			svc := p.Services[name]
			require.NotNilf(t, svc.Deploy, "%s sets deploy", name)
			require.NotNilf(t, svc.Deploy.Replicas, "%s sets deploy.replicas", name)
			require.Equalf(t, 2, *svc.Deploy.Replicas, "%s runs two replicas", name)
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

		reads := serviceEnvVars(t, root)
		env := map[string]string{}
		for k, v := range ex.Environment {
			if v != nil {
				env[k] = *v
			}
		}
		drain, err := time.ParseDuration(effective(env, reads["executor"]["CAPSTAN_DRAIN_TIMEOUT"]))
		require.NoError(t, err)
		shutdown, err := time.ParseDuration(effective(env, reads["executor"]["CAPSTAN_SHUTDOWN_TIMEOUT"]))
		require.NoError(t, err)
		require.NotNil(t, ex.StopGracePeriod, "executor sets stop_grace_period")
		require.Greaterf(t, time.Duration(*ex.StopGracePeriod), drain+shutdown,
			"stop_grace_period outlasts CAPSTAN_DRAIN_TIMEOUT (%s) + CAPSTAN_SHUTDOWN_TIMEOUT (%s), so docker compose stop drains", drain, shutdown)
	})

	t.Run("interpolation", func(t *testing.T) {
		t.Parallel()
		p, err := loadCompose(t.Context(), composePath, append(slices.Clone(composeSecrets[:3]),
			"CAPSTAN_POSTGRES_PASSWORD=s3cret", composeSecrets[4])...)
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
			"-trimpath -tags":                               "-tags",
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

// TestExecutorImageCarriesGo: the shipped examples run in the executor's
// image, and the flagship one calls `go`, so the executor's image (and only
// it) gets the build stage's Go toolchain, on PATH.
func TestExecutorImageCarriesGo(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	examples, err := filepath.Glob(filepath.Join(root, "examples", "*.yaml"))
	require.NoError(t, err)
	var callsGo []string
	for _, path := range examples {
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		if regexp.MustCompile(`(^|[\s;&|(])go (env|build|run|list|test|version)\b`).Match(raw) {
			callsGo = append(callsGo, filepath.Base(path))
		}
	}
	require.Contains(t, callsGo, "stdlib-linecount.yaml", "the flagship example calls go")

	content, err := os.ReadFile(filepath.Join(root, serviceDockerfile))
	require.NoError(t, err)
	df, err := parseDockerfile(bytes.NewReader(content))
	require.NoError(t, err)
	build, final := df.stages[0], df.stages[len(df.stages)-1]
	var staged, copied, onPath bool
	for _, cmd := range build.Commands {
		if c, ok := cmd.(*instructions.RunCommand); ok {
			line := strings.Join(c.CmdLine, " ")
			staged = staged || (strings.Contains(line, `"${SERVICE}" = executor`) &&
				strings.Contains(line, "cp -a /usr/local/go /out/toolchain/go"))
		}
	}
	for _, cmd := range final.Commands {
		switch c := cmd.(type) {
		case *instructions.CopyCommand:
			copied = copied || (c.From == build.Name && slices.Equal(c.SourcePaths, []string{"/out/toolchain/"}) && c.DestPath == "/usr/local/")
		case *instructions.EnvCommand:
			for _, kv := range c.Env {
				onPath = onPath || (kv.Key == "PATH" && slices.Contains(strings.Split(kv.Value, ":"), "/usr/local/go/bin"))
			}
		}
	}
	require.True(t, staged, "the build stage copies /usr/local/go to /out/toolchain/go for SERVICE=executor only")
	require.True(t, copied, "the final stage copies /out/toolchain/ to /usr/local/")
	require.True(t, onPath, "the final stage puts /usr/local/go/bin on PATH")
}

// TestImageNames: the image the Dockerfile titles for each SERVICE is the
// one compose tags its build with and the manifests run (TestCompose and
// TestKubernetesManifests compare those two).
func TestImageNames(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	content, err := os.ReadFile(filepath.Join(root, serviceDockerfile))
	require.NoError(t, err)
	df, err := parseDockerfile(bytes.NewReader(content))
	require.NoError(t, err)
	var title string
	for _, cmd := range df.stages[len(df.stages)-1].Commands {
		if l, ok := cmd.(*instructions.LabelCommand); ok {
			for _, kv := range l.Labels {
				if kv.Key == "org.opencontainers.image.title" {
					title = kv.Value
				}
			}
		}
	}
	require.NotEmpty(t, title, "the final stage labels org.opencontainers.image.title")
	p, err := loadCompose(t.Context(), filepath.Join(root, "docker-compose.yml"), composeSecrets...)
	require.NoError(t, err)
	lex := shell.NewLex(df.escape)
	for name, svc := range p.Services {
		if svc.Build == nil {
			continue
		}
		arg := *svc.Build.Args["SERVICE"]
		want, _, err := lex.ProcessWord(title, shell.EnvsFromSlice([]string{"SERVICE=" + arg}))
		require.NoError(t, err)
		repo, _ := splitImage(svc.Image)
		require.Equalf(t, "ghcr.io/capstan-run/"+want, repo, "%s: compose's image is the one the Dockerfile titles for SERVICE=%s", name, arg)
	}
}
