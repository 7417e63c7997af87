package deploy

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// ---------------------------------------------------------------------------
// deploy/helm/capstan: the Helm chart

const (
	// chartPath is the chart, relative to the repository root.
	chartPath = "deploy/helm/capstan"
	// releaseName is what the tests install the chart as, into namespace:
	// `helm install capstan deploy/helm/capstan -n capstan` names every
	// object as deploy/k8s does.
	releaseName = "capstan"
	// productionValues is the example production values file, beside the
	// chart's values.yaml.
	productionValues = "values-production.yaml"
)

// helmRender is one rendering of the chart: the objects, decoded strictly,
// indexed as an overlay's are.
type helmRender struct {
	*cluster
	// values are the values the templates saw (values.yaml, the files and
	// the overrides, merged).
	values map[string]any
}

// renderChart renders the chart as `helm install capstan deploy/helm/capstan
// -n capstan -f <files>...` would, without a cluster: Helm's loader reads the
// chart, each values file (relative to the chart) and then each override is
// merged over values.yaml in order (a later one wins, as with -f and --set),
// the result is checked against values.schema.json, and Helm's engine
// renders every template, hooks included, in strict mode (a missing value is
// an error; lookup finds nothing). It returns the rendered templates' YAML,
// in file order, NOTES.txt left out.
func renderChart(ctx context.Context, root string, files []string, overrides ...map[string]any) (string, map[string]any, error) {
	dir := filepath.Join(root, chartPath)
	ch, err := loader.LoadDir(dir)
	if err != nil {
		return "", nil, fmt.Errorf("load the chart: %w", err)
	}
	vals := map[string]any{}
	for _, f := range files {
		v, err := common.ReadValuesFile(filepath.Join(dir, f))
		if err != nil {
			return "", nil, fmt.Errorf("%s: %w", f, err)
		}
		vals = loader.MergeMaps(vals, v)
	}
	for _, o := range overrides {
		vals = loader.MergeMaps(vals, o)
	}
	top, err := chartutil.ToRenderValues(ch, vals,
		common.ReleaseOptions{Name: releaseName, Namespace: namespace, Revision: 1, IsInstall: true}, nil)
	if err != nil {
		return "", nil, err
	}
	out, err := engine.Engine{Strict: true}.RenderWithContext(ctx, ch, top)
	if err != nil {
		return "", nil, err
	}
	names := slices.Sorted(maps.Keys(out))
	var b strings.Builder
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") || strings.TrimSpace(out[name]) == "" {
			continue
		}
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", name, out[name])
	}
	merged, _ := top["Values"].(common.Values)
	return b.String(), merged.AsMap(), nil
}

// loadChart renders the chart and decodes every object it yields strictly
// into its Kubernetes type, failing the test on any error.
func loadChart(t testing.TB, root string, files []string, overrides ...map[string]any) *helmRender {
	t.Helper()
	out, vals, err := renderChart(t.Context(), root, files, overrides...)
	require.NoError(t, err, "the chart renders")
	objs, err := decodeManifests(strings.NewReader(out))
	require.NoErrorf(t, err, "every object the chart renders decodes strictly into its Kubernetes type:\n%s", out)
	c, err := newCluster(objs)
	require.NoError(t, err)
	return &helmRender{cluster: c, values: vals}
}

// existingSecret is the Secret values-production.yaml names, as its
// comment tells the operator to create it: prod's tokens and passwords, so
// that the chart and the overlay resolve to the same settings.
func existingSecret(t testing.TB, prod *cluster) *corev1.Secret {
	t.Helper()
	data := secretData(prod.secrets["capstan-tokens"])
	db, err := url.Parse(secretData(prod.secrets["capstan-db"])["CAPSTAN_DATABASE_URL"])
	require.NoError(t, err)
	pw, _ := db.User.Password()
	data["CAPSTAN_POSTGRES_PASSWORD"] = pw
	data["CAPSTAN_REDIS_PASSWORD"] = secretData(prod.secrets["capstan-redis"])["CAPSTAN_REDIS_PASSWORD"]
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "capstan-secrets", Namespace: namespace}, StringData: data}
}

// helmReplicas returns the pods a Deployment of the chart runs: the
// autoscaler's minimum when one scales it (the chart then leaves
// spec.replicas unset, so an upgrade does not reset the autoscaled count),
// else spec.replicas.
func (c *cluster) helmReplicas(t testing.TB, component string) int32 {
	t.Helper()
	w := c.byComponent(t, component)
	d, ok := c.deployments[w.name]
	if !ok {
		return w.replicas
	}
	if hpa, ok := c.hpas[w.name]; ok {
		require.Nilf(t, d.Spec.Replicas, "%s: an autoscaled Deployment leaves spec.replicas to its autoscaler", w.name)
		require.NotNil(t, hpa.Spec.MinReplicas)
		return *hpa.Spec.MinReplicas
	}
	require.NotNilf(t, d.Spec.Replicas, "%s sets spec.replicas", w.name)
	return *d.Spec.Replicas
}

// helmValues are the chart's renderings the tests check alike: the default
// values, and values-production.yaml with the Secret it names.
var helmValues = map[string][]string{"default": nil, "production": {productionValues}}

func TestHelmChart(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	reads := serviceEnvVars(t, root)
	p, err := loadCompose(t.Context(), filepath.Join(root, "docker-compose.yml"), composeSecrets...)
	require.NoError(t, err)
	prod := loadOverlay(t, root, "prod")
	for name, files := range helmValues {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := loadChart(t, root, files)
			if name == "production" {
				s := existingSecret(t, prod)
				r.secrets[s.Name] = s
			}
			c := r.cluster
			t.Run("namespace and labels", func(t *testing.T) { checkHelmMetadata(t, c) })
			t.Run("pods", func(t *testing.T) { checkPods(t, c, p, "prod") })
			t.Run("security", func(t *testing.T) { checkHelmSecurity(t, c) })
			t.Run("replicas", func(t *testing.T) { checkHelmReplicas(t, r) })
			t.Run("selectors", func(t *testing.T) { checkSelectors(t, c) })
			t.Run("probes", func(t *testing.T) { checkProbes(t, root, c) })
			t.Run("environment", func(t *testing.T) { checkHelmEnvironment(t, c, reads) })
			t.Run("migrate hook", func(t *testing.T) { checkMigrateJob(t, c); checkMigrateHook(t, c) })
			t.Run("executor", func(t *testing.T) { checkExecutor(t, c, reads) })
			t.Run("executor rbac", func(t *testing.T) { checkExecutorRBAC(t, c) })
			t.Run("disruption budgets", func(t *testing.T) { checkPDBs(t, c) })
			t.Run("autoscalers", func(t *testing.T) { checkHPAs(t, c, "prod") })
			t.Run("network policy", func(t *testing.T) { checkNetworkPolicy(t, c) })
			t.Run("config checksums", func(t *testing.T) { checkChecksums(t, c) })
		})
	}
}

// checkHelmMetadata: every object is in the release namespace (the chart
// creates none) and carries Helm's recommended labels.
func checkHelmMetadata(t *testing.T, c *cluster) {
	require.Empty(t, c.namespaces, "the chart installs into the release namespace and creates none")
	for _, obj := range c.objects {
		meta := objectMeta(obj)
		require.Equalf(t, namespace, meta.Namespace, "%T %s lives in the release namespace", obj, meta.Name)
		for _, l := range []string{"helm.sh/chart", "app.kubernetes.io/name", "app.kubernetes.io/instance",
			"app.kubernetes.io/version", "app.kubernetes.io/managed-by", "app.kubernetes.io/part-of"} {
			require.NotEmptyf(t, meta.Labels[l], "%T %s has the label %s", obj, meta.Name, l)
		}
		require.Equal(t, releaseName, meta.Labels["app.kubernetes.io/instance"])
		require.Equal(t, "Helm", meta.Labels["app.kubernetes.io/managed-by"])
	}
}

// checkHelmSecurity: every container drops every capability, and all but
// the executor (whose tasks may write anywhere) run on a read-only root
// filesystem; only the executor mounts a service account token, and only
// for the kubernetes plugin.
func checkHelmSecurity(t *testing.T, c *cluster) {
	for _, w := range c.workloads() {
		for _, ctr := range w.spec.Containers {
			sc := ctr.SecurityContext
			require.NotNilf(t, sc, "%s: container %s has a security context", w.name, ctr.Name)
			require.NotNil(t, sc.Capabilities)
			require.Containsf(t, sc.Capabilities.Drop, corev1.Capability("ALL"), "%s drops ALL capabilities", w.name)
			if w.component() != "executor" {
				require.Emptyf(t, sc.Capabilities.Add, "%s adds no capability", w.name)
				require.Truef(t, sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem, "%s: read-only root filesystem", w.name)
				require.Truef(t, w.spec.AutomountServiceAccountToken != nil && !*w.spec.AutomountServiceAccountToken,
					"%s mounts no service account token: it never calls the Kubernetes API", w.name)
			}
		}
	}
	env, _ := c.containerEnv(c.byComponent(t, "executor").spec.Containers[0])
	automount := c.byComponent(t, "executor").spec.AutomountServiceAccountToken
	require.NotNil(t, automount)
	require.Equal(t, env["CAPSTAN_KUBERNETES"] == "true", *automount, "the executor mounts its token for the kubernetes plugin only")
}

// checkHelmReplicas: each service runs the replicas its values say.
func checkHelmReplicas(t *testing.T, r *helmRender) {
	for comp, key := range map[string]string{"api": "api", "scheduler": "scheduler", "abort-reconciler": "abortReconciler", "executor": "executor"} {
		want := r.values[key].(map[string]any)["replicas"]
		require.EqualValuesf(t, want, r.helmReplicas(t, comp), "%s runs %s.replicas", comp, key)
	}
}

// checkHelmEnvironment: every env source a container names exists (the
// existingSecret included, which the test adds as the operator would), each
// component gets what wantEnv says, every variable a service reads is set or
// has a documented default, CAPSTAN_API_URL names the api's Service, and the
// executor gets no database settings.
func checkHelmEnvironment(t *testing.T, c *cluster, reads map[string]map[string]envVar) {
	given := map[string]map[string]string{}
	for _, name := range capstanComponents {
		ctr := c.byComponent(t, name).spec.Containers[0]
		env, problems := c.containerEnv(ctr)
		require.Emptyf(t, problems, "%s: every env source exists and every $(VAR) is defined before use", name)
		for key, value := range wantEnv[name] {
			require.NotEmptyf(t, env[key], "%s: %s is set", name, key)
			if value != "" {
				require.Equalf(t, value, env[key], "%s: %s", name, key)
			}
		}
		if raw, ok := env["CAPSTAN_DATABASE_URL"]; ok {
			u, err := url.Parse(raw)
			require.NoErrorf(t, err, "%s: CAPSTAN_DATABASE_URL parses", name)
			require.Containsf(t, []string{"postgres", "postgresql"}, u.Scheme, "%s: a postgres URL", name)
			require.NotEmptyf(t, u.Hostname(), "%s: CAPSTAN_DATABASE_URL names a host", name)
		}
		if raw, ok := env["CAPSTAN_API_URL"]; ok {
			u, err := url.Parse(raw)
			require.NoError(t, err)
			svc, ok := c.services[u.Hostname()]
			require.Truef(t, ok, "%s: CAPSTAN_API_URL %s names a Service", name, raw)
			require.Equal(t, strconv.Itoa(int(svc.Spec.Ports[0].Port)), u.Port())
		}
		given[name] = env
	}
	require.Empty(t, envProblems(reads, given), "every variable a service reads is set or has a documented default")
	for _, key := range []string{"CAPSTAN_DATABASE_URL", "PGPASSWORD"} {
		_, ok := given["executor"][key]
		require.Falsef(t, ok, "the executor never opens Postgres: it gets no %s", key)
	}
}

// hook reads a Helm hook's annotations.
type hook struct {
	events, deletePolicy []string
	weight               int
}

func hookOf(t testing.TB, meta metav1.ObjectMeta) (hook, bool) {
	t.Helper()
	events, ok := meta.Annotations["helm.sh/hook"]
	if !ok {
		return hook{}, false
	}
	w, err := strconv.Atoi(meta.Annotations["helm.sh/hook-weight"])
	require.NoErrorf(t, err, "%s: helm.sh/hook-weight is an integer", meta.Name)
	return hook{events: strings.Split(events, ","), deletePolicy: strings.Split(meta.Annotations["helm.sh/hook-delete-policy"], ","),
		weight: w}, true
}

// checkMigrateHook: the migration is a pre-install and pre-upgrade hook that
// Helm deletes before creating the next one and once it has succeeded (so no
// upgrade patches a Job's immutable template), and everything it reads
// exists when it runs: a hook Secret of a lower weight, or the
// existingSecret, which no rendering holds. Only the migration's objects
// are hooks.
func checkMigrateHook(t *testing.T, c *cluster) {
	w := c.byComponent(t, "migrate")
	job := c.jobs[w.name]
	h, ok := hookOf(t, job.ObjectMeta)
	require.True(t, ok, "the migrate Job is a Helm hook")
	require.ElementsMatch(t, []string{"pre-install", "pre-upgrade"}, h.events)
	require.ElementsMatch(t, []string{"before-hook-creation", "hook-succeeded"}, h.deletePolicy)
	refs := map[string]bool{}
	ctr := w.spec.Containers[0]
	for _, from := range ctr.EnvFrom {
		require.Nil(t, from.ConfigMapRef, "the migration needs no ConfigMap")
		refs[from.SecretRef.Name] = true
	}
	for _, e := range ctr.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			refs[e.ValueFrom.SecretKeyRef.Name] = true
		}
	}
	require.NotEmpty(t, refs, "the migration reads the database URL from a Secret")
	for name := range refs {
		s, ok := c.secrets[name]
		require.Truef(t, ok, "the migration's Secret %s exists", name)
		sh, isHook := hookOf(t, s.ObjectMeta)
		if s.Labels["app.kubernetes.io/managed-by"] != "Helm" {
			continue // not the chart's: the existingSecret, created before the install
		}
		require.Truef(t, isHook, "Secret %s, which the migration reads, is a hook too: a hook runs before the release's objects exist", name)
		require.ElementsMatch(t, h.events, sh.events, "Secret %s is created for the same events", name)
		require.Lessf(t, sh.weight, h.weight, "Secret %s is created before the Job (a lower weight)", name)
		require.Contains(t, sh.deletePolicy, "before-hook-creation")
	}
	for _, obj := range c.objects {
		meta := objectMeta(obj)
		if _, isHook := hookOf(t, *meta); isHook {
			require.Equalf(t, "migrate", meta.Labels[componentLabel], "%T %s is a hook: only the migration's objects are", obj, meta.Name)
		}
	}
}

// checkChecksums: each Deployment's pod template carries the checksum of
// the ConfigMap, so a change to the configuration rolls it.
func checkChecksums(t *testing.T, c *cluster) {
	for _, d := range c.deployments {
		for _, a := range []string{"checksum/config", "checksum/secret"} {
			require.Lenf(t, d.Spec.Template.Annotations[a], 64, "%s's pod template carries a sha256 %s", d.Name, a)
		}
	}
}

// TestHelmChecksumsRoll: the same values give the same checksums, and a
// change to a setting changes every Deployment's checksum/config.
func TestHelmChecksumsRoll(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	fixed := map[string]any{"tokens": map[string]any{"adminToken": strings.Repeat("a", 40),
		"workerToken": strings.Repeat("w", 40), "controlPlaneKey": strings.Repeat("k", 40)}}
	sums := func(overrides ...map[string]any) map[string]string {
		r := loadChart(t, root, nil, append([]map[string]any{fixed}, overrides...)...)
		out := map[string]string{}
		for name, d := range r.deployments {
			out[name] = d.Spec.Template.Annotations["checksum/config"] + " " + d.Spec.Template.Annotations["checksum/secret"]
		}
		require.Len(t, out, len(components))
		return out
	}
	base := sums()
	require.Equal(t, base, sums(), "a rendering is deterministic")
	changed := sums(map[string]any{"config": map[string]any{"workerGrace": "7s"}})
	for name := range base {
		require.NotEqualf(t, base[name], changed[name], "%s rolls when the ConfigMap changes", name)
	}
	rotated := sums(map[string]any{"tokens": map[string]any{"adminToken": strings.Repeat("b", 40)}})
	for name := range base {
		require.NotEqualf(t, base[name], rotated[name], "%s rolls when a Secret the chart writes changes", name)
	}
}

// helmOnly are the objects in which the chart, with values-production.yaml,
// differs from the prod overlay on purpose, each with why. Every entry must
// be a real difference, so the list stays honest.
var helmOnly = map[string]string{
	"Namespace/capstan":                        "Helm installs into the release namespace (-n capstan --create-namespace); a chart does not own it",
	"Secret/capstan-tokens":                    "the tokens are in existingSecret, which the operator creates",
	"Secret/capstan-redis":                     "Redis's addresses are settings, in the ConfigMap; its password is in existingSecret",
	"Secret/capstan-migrate":                   "the migration's hook copy of capstan-db: a hook runs before the release's own Secrets exist",
	"NetworkPolicy/capstan-api-clients":        "the chart isolates its own pods only, so the labelled clients it does not isolate need no egress allowance",
	"NetworkPolicy/capstan-metrics-clients":    "as capstan-api-clients",
	"Ingress/capstan-api":                      "values-production.yaml exposes the api; the overlay leaves that to the cluster",
	"ServiceMonitor/capstan":                   "values-production.yaml turns the ServiceMonitor on",
	"Service/capstan-scheduler-metrics":        "the ServiceMonitor scrapes the scheduler through it",
	"Service/capstan-abort-reconciler-metrics": "the ServiceMonitor scrapes the abort reconciler through it",
}

// objectKeys returns "Kind/name" of every object.
func objectKeys(c *cluster) map[string]bool {
	keys := map[string]bool{}
	for _, obj := range c.objects {
		kind := reflect.TypeOf(obj).Elem().Name()
		keys[kind+"/"+objectMeta(obj).Name] = true
	}
	return keys
}

// foldPassword puts PGPASSWORD into CAPSTAN_DATABASE_URL's user info, as
// pgx does when it connects, so that an environment that gives the password
// apart compares equal to one whose URL holds it.
func foldPassword(t testing.TB, env map[string]string) map[string]string {
	t.Helper()
	out := maps.Clone(env)
	pw, ok := out["PGPASSWORD"]
	if !ok {
		return out
	}
	delete(out, "PGPASSWORD")
	u, err := url.Parse(out["CAPSTAN_DATABASE_URL"])
	require.NoError(t, err)
	_, has := u.User.Password()
	require.False(t, has, "a URL with a password and PGPASSWORD beside it: one of them is ignored")
	u.User = url.UserPassword(u.User.Username(), pw)
	out["CAPSTAN_DATABASE_URL"] = u.String()
	return out
}

// TestHelmMatchesKustomize: the chart with values-production.yaml deploys
// what the prod overlay deploys: the same objects but those helmOnly lists,
// and for each service the same kind, replicas, image, arguments, resolved
// environment, ports, probes, resources, security contexts and volumes; the
// same autoscalers, disruption budgets and Services; and the same settings
// in the ConfigMap.
func TestHelmMatchesKustomize(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	prod := loadOverlay(t, root, "prod")
	r := loadChart(t, root, []string{productionValues})
	s := existingSecret(t, prod)
	r.secrets[s.Name] = s
	c := r.cluster

	hk, pk := objectKeys(c), objectKeys(prod)
	var differ []string
	for k := range hk {
		if !pk[k] {
			differ = append(differ, k)
		}
	}
	for k := range pk {
		if !hk[k] {
			differ = append(differ, k)
		}
	}
	sort.Strings(differ)
	require.ElementsMatch(t, sortedKeys(helmOnly), differ, "the chart and the prod overlay differ in these objects only (helmOnly says why)")

	for _, name := range capstanComponents {
		kw, hw := prod.byComponent(t, name), c.byComponent(t, name)
		require.Equal(t, kw.kind, hw.kind, name)
		require.Equal(t, kw.name, hw.name, name)
		if kw.kind == "Deployment" {
			require.Equalf(t, kw.replicas, c.helmReplicas(t, name), "%s: replicas", name)
		}
		kc, hc := kw.spec.Containers[0], hw.spec.Containers[0]
		require.Equalf(t, kc.Image, hc.Image, "%s: image", name)
		require.Equalf(t, kc.Args, hc.Args, "%s: args", name)
		require.Equalf(t, kc.Ports, hc.Ports, "%s: ports", name)
		require.Equalf(t, kc.ReadinessProbe, hc.ReadinessProbe, "%s: readiness probe", name)
		require.Equalf(t, kc.LivenessProbe, hc.LivenessProbe, "%s: liveness probe", name)
		require.Truef(t, reflect.DeepEqual(kc.Resources, hc.Resources) || resourcesEqual(kc.Resources, hc.Resources), "%s: resources", name)
		require.Equalf(t, kc.SecurityContext, hc.SecurityContext, "%s: container security context", name)
		require.Equalf(t, kw.spec.SecurityContext, hw.spec.SecurityContext, "%s: pod security context", name)
		require.Equalf(t, kc.VolumeMounts, hc.VolumeMounts, "%s: volume mounts", name)
		require.Equalf(t, kw.spec.Volumes, hw.spec.Volumes, "%s: volumes", name)
		require.Equalf(t, kw.spec.ServiceAccountName, hw.spec.ServiceAccountName, "%s: service account", name)
		require.Equalf(t, kw.spec.TerminationGracePeriodSeconds, hw.spec.TerminationGracePeriodSeconds, "%s: grace period", name)
		require.Equalf(t, kw.spec.RestartPolicy, hw.spec.RestartPolicy, "%s: restart policy", name)
		ke, problems := prod.containerEnv(kc)
		require.Empty(t, problems)
		he, problems := c.containerEnv(hc)
		require.Empty(t, problems)
		require.Equalf(t, foldPassword(t, ke), foldPassword(t, he), "%s: the environment it starts with", name)
	}
	for name, kh := range prod.hpas {
		hh, ok := c.hpas[name]
		require.Truef(t, ok, "the chart has the autoscaler %s", name)
		require.Equalf(t, kh.Spec, hh.Spec, "autoscaler %s", name)
	}
	require.Len(t, c.hpas, len(prod.hpas))
	for name, kp := range prod.pdbs {
		hp := c.pdbs[name]
		require.NotNilf(t, hp, "the chart has the disruption budget %s", name)
		require.Equalf(t, kp.Spec.MaxUnavailable, hp.Spec.MaxUnavailable, "%s: maxUnavailable", name)
		require.Equalf(t, kp.Spec.MinAvailable, hp.Spec.MinAvailable, "%s: minAvailable", name)
	}
	for name, ks := range prod.services {
		require.Equalf(t, ks.Spec.Ports, c.services[name].Spec.Ports, "Service %s: ports", name)
		require.Equalf(t, ks.Spec.Type, c.services[name].Spec.Type, "Service %s: type", name)
	}
	require.Equal(t, prod.pvcs["capstan-runs"].Spec.AccessModes, c.pvcs["capstan-runs"].Spec.AccessModes)
	require.Equal(t, prod.pvcs["capstan-runs"].Spec.Resources, c.pvcs["capstan-runs"].Spec.Resources)
	for k, v := range prod.configMaps["capstan-config"].Data {
		require.Equalf(t, v, c.configMaps["capstan-config"].Data[k], "ConfigMap capstan-config: %s", k)
	}
	checkSelectorsNarrow(t, prod, c)
}

// resourcesEqual compares requirements by quantity, not by spelling.
func resourcesEqual(a, b corev1.ResourceRequirements) bool {
	same := func(x, y corev1.ResourceList) bool {
		if len(x) != len(y) {
			return false
		}
		for k, q := range x {
			if r, ok := y[k]; !ok || q.Cmp(r) != 0 {
				return false
			}
		}
		return true
	}
	return same(a.Requests, b.Requests) && same(a.Limits, b.Limits)
}

// checkSelectorsNarrow: the chart selects each component's pods with the
// overlay's labels and its release's (app.kubernetes.io/instance), so two
// releases in one namespace never select each other's pods.
func checkSelectorsNarrow(t *testing.T, prod, c *cluster) {
	for name, kd := range prod.deployments {
		hd := c.deployments[name]
		for k, v := range kd.Spec.Selector.MatchLabels {
			require.Equalf(t, v, hd.Spec.Selector.MatchLabels[k], "Deployment %s selects %s=%s", name, k, v)
		}
		require.Equal(t, releaseName, hd.Spec.Selector.MatchLabels["app.kubernetes.io/instance"])
		other := maps.Clone(hd.Spec.Template.Labels)
		other["app.kubernetes.io/instance"] = "another"
		require.False(t, labels.SelectorFromSet(hd.Spec.Selector.MatchLabels).Matches(labels.Set(other)),
			"Deployment %s does not select another release's pods", name)
	}
}

// TestHelmServiceMonitorAndIngress: with values-production.yaml the
// ServiceMonitor scrapes the metrics port of the scheduler and the abort
// reconciler through Services that select them, and the Ingress routes its
// hosts, with TLS, to the api's Service.
func TestHelmServiceMonitorAndIngress(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	r := loadChart(t, root, []string{productionValues})
	var monitors []*monitoringv1.ServiceMonitor
	var ingresses []*networkingv1.Ingress
	for _, obj := range r.objects {
		switch o := obj.(type) {
		case *monitoringv1.ServiceMonitor:
			monitors = append(monitors, o)
		case *networkingv1.Ingress:
			ingresses = append(ingresses, o)
		}
	}
	require.Len(t, monitors, 1)
	sm := monitors[0]
	require.Equal(t, []string{namespace}, sm.Spec.NamespaceSelector.MatchNames)
	require.Equal(t, "kube-prometheus-stack", sm.Labels["release"], "labelled for the Prometheus values-production.yaml names")
	var scraped []string
	for _, svc := range r.services {
		if !selects(&sm.Spec.Selector, svc.Labels) {
			continue
		}
		w := r.byComponent(t, svc.Spec.Selector[componentLabel])
		for _, port := range svc.Spec.Ports {
			for _, ep := range sm.Spec.Endpoints {
				if ep.Port == port.Name {
					require.NotZerof(t, containerPort(w.spec.Containers[0], port.TargetPort), "Service %s targets a declared port", svc.Name)
					scraped = append(scraped, w.component()+":"+port.TargetPort.String())
				}
			}
		}
	}
	require.ElementsMatch(t, []string{"scheduler:metrics", "abort-reconciler:metrics"}, scraped,
		"the ServiceMonitor scrapes the scheduler's and abort reconciler's metrics ports, and not the api's, whose /metrics needs the admin token")

	require.Len(t, ingresses, 1)
	ing := ingresses[0]
	require.Equal(t, "nginx", *ing.Spec.IngressClassName)
	require.NotEmpty(t, ing.Spec.TLS, "the Ingress terminates TLS")
	for _, rule := range ing.Spec.Rules {
		require.Contains(t, ing.Spec.TLS[0].Hosts, rule.Host, "TLS covers %s", rule.Host)
		for _, path := range rule.HTTP.Paths {
			svc, ok := r.services[path.Backend.Service.Name]
			require.True(t, ok, "the Ingress routes to a Service of the chart")
			require.Equal(t, "api", svc.Spec.Selector[componentLabel])
			require.Equal(t, svc.Spec.Ports[0].Name, path.Backend.Service.Port.Name)
		}
	}

	defaults := loadChart(t, root, nil)
	for _, obj := range defaults.objects {
		switch obj.(type) {
		case *monitoringv1.ServiceMonitor, *networkingv1.Ingress:
			t.Fatalf("%T is off by default", obj)
		}
	}
}

// TestHelmKubernetesPlugin: executor.kubernetes.enabled turns the plugin
// on (CAPSTAN_KUBERNETES=true and its settings, the service account token
// mounted) and lets the executors, and nothing else, reach the API server
// addresses it is given; without them the chart refuses to render.
func TestHelmKubernetesPlugin(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	reads := serviceEnvVars(t, root)
	on := map[string]any{"executor": map[string]any{"kubernetes": map[string]any{"enabled": true,
		"namespace": "tasks", "apiServerCIDRs": []any{"10.0.0.10/32"}}}}
	r := loadChart(t, root, nil, on)
	w := r.byComponent(t, "executor")
	env, problems := r.containerEnv(w.spec.Containers[0])
	require.Empty(t, problems)
	require.Equal(t, "true", env["CAPSTAN_KUBERNETES"])
	require.Equal(t, "tasks", env["CAPSTAN_KUBERNETES_NAMESPACE"])
	require.Equal(t, "1000", env["CAPSTAN_KUBERNETES_MAX_PODS"])
	for name := range env {
		if strings.HasPrefix(name, "CAPSTAN_KUBERNETES") {
			require.Containsf(t, reads["executor"], name, "the executor reads %s", name)
		}
	}
	require.True(t, *w.spec.AutomountServiceAccountToken, "the plugin calls the API with the executor's token")
	checkExecutorRBAC(t, r.cluster)
	checkHelmSecurity(t, r.cluster)
	var policies []*networkingv1.NetworkPolicy
	for _, p := range r.netpols {
		policies = append(policies, p)
	}
	apiServer := external("10.0.0.10")
	for i, wl := range r.workloads() {
		src := podIn(namespace, wl.labels, fmt.Sprintf("10.244.0.%d", i+2), nil)
		want := wl.component() == "executor"
		require.Equalf(t, want, allowed(policies, namespace, src, apiServer, 6443, corev1.ProtocolTCP),
			"%s reaches the API server: %v", wl.component(), want)
	}
	require.False(t, allowed(policies, namespace, podIn(namespace, w.labels, "10.244.0.2", nil), external("10.0.0.11"), 6443, corev1.ProtocolTCP),
		"only the addresses given")

	_, _, err := renderChart(t.Context(), root, nil, map[string]any{"executor": map[string]any{"kubernetes": map[string]any{"enabled": true}}})
	require.ErrorContains(t, err, "executor.kubernetes.apiServerCIDRs")
}

// TestHelmValuesSchema: values.schema.json turns a bad value into an error
// that names it, before any template runs, as `helm install -f` does.
func TestHelmValuesSchema(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "values-bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("api:\n  replicas: two\n"), 0o600))
	rel, err := filepath.Rel(filepath.Join(root, chartPath), bad)
	require.NoError(t, err)
	_, _, err = renderChart(t.Context(), root, []string{rel})
	require.Error(t, err, "replicas: two")
	require.ErrorContains(t, err, "values don't meet the specifications of the schema")
	require.ErrorContains(t, err, "/api/replicas")
	require.ErrorContains(t, err, "want integer")

	cases := map[string]struct {
		values map[string]any
		path   string
	}{
		"misspelt key":       {map[string]any{"api": map[string]any{"replica": 3}}, "/api"},
		"unknown top key":    {map[string]any{"ingres": map[string]any{}}, "ingres"},
		"pull policy":        {map[string]any{"executor": map[string]any{"image": map[string]any{"pullPolicy": "Sometimes"}}}, "/executor/image/pullPolicy"},
		"tasks as root":      {map[string]any{"executor": map[string]any{"runAs": "0:0"}}, "/executor/runAs"},
		"grace too short":    {map[string]any{"executor": map[string]any{"terminationGracePeriodSeconds": 30}}, "/executor/terminationGracePeriodSeconds"},
		"redis without port": {map[string]any{"redis": map[string]any{"addr": "redis"}}, "/redis/addr"},
		"duration":           {map[string]any{"config": map[string]any{"workerGrace": "five seconds"}}, "/config/workerGrace"},
		"sslmode":            {map[string]any{"postgres": map[string]any{"sslmode": "yes"}}, "/postgres/sslmode"},
		"negative replicas":  {map[string]any{"scheduler": map[string]any{"replicas": -1}}, "/scheduler/replicas"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, _, err := renderChart(t.Context(), root, nil, tc.values)
			require.Error(t, err)
			require.ErrorContains(t, err, tc.path)
		})
	}
	t.Run("control", func(t *testing.T) {
		t.Parallel()
		_, _, err := renderChart(t.Context(), root, nil, map[string]any{"api": map[string]any{"replicas": 3}})
		require.NoError(t, err)
	})
}

// TestHelmTemplateErrors: values the schema cannot judge alone fail the
// rendering with a message that says what to set.
func TestHelmTemplateErrors(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	cases := map[string]struct {
		values map[string]any
		want   string
	}{
		"no database": {map[string]any{"postgres": map[string]any{"host": ""}},
			"set postgres.url, postgres.host, or existingSecret with the key CAPSTAN_DATABASE_URL"},
		"autoscaler without room": {map[string]any{"api": map[string]any{"replicas": 6}},
			"api.autoscaling.maxReplicas (6) must exceed api.replicas (6)"},
		"no redis": {map[string]any{"redis": map[string]any{"addr": ""}}, "redis.addr or redis.sentinel.addrs is required"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, _, err := renderChart(t.Context(), root, nil, tc.values)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestHelmPostgresForms: the database is reached alike whether the values
// give a whole URL, its parts and a password, or neither and existingSecret
// holds the URL; the migration reads the same settings as the services.
func TestHelmPostgresForms(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	const want = "postgres://capstan:s3cret@db.internal:5432/capstan?sslmode=require"
	forms := map[string]struct {
		values map[string]any
		secret map[string]string
	}{
		"url":   {map[string]any{"postgres": map[string]any{"url": want}}, nil},
		"parts": {map[string]any{"postgres": map[string]any{"host": "db.internal", "password": "s3cret"}}, nil},
		"existingSecret password": {map[string]any{"existingSecret": "mine", "postgres": map[string]any{"host": "db.internal"}},
			map[string]string{"CAPSTAN_POSTGRES_PASSWORD": "s3cret"}},
		"existingSecret url": {map[string]any{"existingSecret": "mine", "postgres": map[string]any{"host": ""}},
			map[string]string{"CAPSTAN_DATABASE_URL": want}},
	}
	for name, f := range forms {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := loadChart(t, root, nil, f.values)
			if f.secret != nil {
				data := map[string]string{"CAPSTAN_ADMIN_TOKEN": "a", "CAPSTAN_WORKER_TOKEN": "w", "CAPSTAN_CONTROL_PLANE_KEY": "k",
					"CAPSTAN_REDIS_PASSWORD": "r"}
				maps.Copy(data, f.secret)
				r.secrets["mine"] = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "mine"}, StringData: data}
			}
			for _, comp := range []string{"migrate", "api", "scheduler", "abort-reconciler"} {
				env, problems := r.containerEnv(r.byComponent(t, comp).spec.Containers[0])
				require.Emptyf(t, problems, "%s", comp)
				require.Equalf(t, want, foldPassword(t, env)["CAPSTAN_DATABASE_URL"], "%s reaches the database", comp)
			}
			checkMigrateHook(t, r.cluster)
		})
	}
}

// TestHelmLint: Helm's own linter finds nothing to warn about, with the
// default values and with values-production.yaml.
func TestHelmLint(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	dir := filepath.Join(root, chartPath)
	for name, files := range helmValues {
		vals := map[string]any{}
		for _, f := range files {
			v, err := common.ReadValuesFile(filepath.Join(dir, f))
			require.NoError(t, err)
			vals = v
		}
		res := lint.RunAll(dir, vals, namespace)
		var found []string
		for _, m := range res.Messages {
			if m.Severity >= support.WarningSev {
				found = append(found, m.Error())
			}
		}
		require.Emptyf(t, found, "helm lint (%s values) warns", name)
	}
}
