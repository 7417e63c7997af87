package deploy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	ktypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// ---------------------------------------------------------------------------
// deploy/k8s: a kustomize base and two overlays

// overlays are the kustomize overlays under deploy/k8s/overlays, each with
// the replicas it runs of each component.
var overlays = map[string]map[string]int32{
	"dev":  {"api": 1, "scheduler": 1, "abort-reconciler": 1, "executor": 1},
	"prod": {"api": 3, "scheduler": 2, "abort-reconciler": 2, "executor": 4},
}

// kinds maps "apiVersion/kind" to a new typed object of that kind.
var kinds = map[string]func() any{
	"v1/Namespace":                       func() any { return &corev1.Namespace{} },
	"v1/ConfigMap":                       func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                          func() any { return &corev1.Secret{} },
	"v1/Service":                         func() any { return &corev1.Service{} },
	"v1/PersistentVolumeClaim":           func() any { return &corev1.PersistentVolumeClaim{} },
	"apps/v1/Deployment":                 func() any { return &appsv1.Deployment{} },
	"apps/v1/StatefulSet":                func() any { return &appsv1.StatefulSet{} },
	"batch/v1/Job":                       func() any { return &batchv1.Job{} },
	"policy/v1/PodDisruptionBudget":      func() any { return &policyv1.PodDisruptionBudget{} },
	"networking.k8s.io/v1/NetworkPolicy": func() any { return &networkingv1.NetworkPolicy{} },
	"networking.k8s.io/v1/Ingress":       func() any { return &networkingv1.Ingress{} },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any {
		return &monitoringv1.ServiceMonitor{}
	},
	"v1/ServiceAccount":                 func() any { return &corev1.ServiceAccount{} },
	"rbac.authorization.k8s.io/v1/Role": func() any { return &rbacv1.Role{} },
	"rbac.authorization.k8s.io/v1/RoleBinding": func() any {
		return &rbacv1.RoleBinding{}
	},
	"autoscaling/v2/HorizontalPodAutoscaler": func() any {
		return &autoscalingv2.HorizontalPodAutoscaler{}
	},
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

// cluster is everything an overlay defines, by kind and name.
type cluster struct {
	objects      []any
	namespaces   map[string]*corev1.Namespace
	configMaps   map[string]*corev1.ConfigMap
	secrets      map[string]*corev1.Secret
	services     map[string]*corev1.Service
	pvcs         map[string]*corev1.PersistentVolumeClaim
	deployments  map[string]*appsv1.Deployment
	statefulSets map[string]*appsv1.StatefulSet
	jobs         map[string]*batchv1.Job
	pdbs         map[string]*policyv1.PodDisruptionBudget
	hpas         map[string]*autoscalingv2.HorizontalPodAutoscaler
	netpols      map[string]*networkingv1.NetworkPolicy
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

// workloads returns every Deployment, StatefulSet and Job pod template,
// sorted by name.
func (c *cluster) workloads() []workload {
	var ws []workload
	replicas := func(r *int32) int32 {
		if r == nil {
			return 1
		}
		return *r
	}
	for _, d := range c.deployments {
		ws = append(ws, workload{"Deployment", d.Name, replicas(d.Spec.Replicas), d.Spec.Template.Labels, d.Spec.Template.Spec})
	}
	for _, s := range c.statefulSets {
		ws = append(ws, workload{"StatefulSet", s.Name, replicas(s.Spec.Replicas), s.Spec.Template.Labels, s.Spec.Template.Spec})
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

// kustomizeMu serialises kustomize runs: kustomize initialises a global
// OpenAPI schema lazily without a lock, a data race when two builds run at
// once (the race detector catches it).
var kustomizeMu sync.Mutex

// buildOverlay runs kustomize (the library kubectl apply -k uses) on a
// directory and returns the YAML stream it would apply. The files are read
// from disk into memory first, with the dev overlay's *.env files
// (git-ignored, written by its gen-secrets.sh) made up where the checkout
// has none.
func buildOverlay(dir string) ([]byte, error) {
	kustomizeMu.Lock()
	defer kustomizeMu.Unlock()
	fs, err := overlayFiles(dir)
	if err != nil {
		return nil, err
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, dir)
	if err != nil {
		return nil, err
	}
	return m.AsYaml()
}

// devSecrets is what gen-secrets.sh writes, for a checkout that has not run it.
var devSecrets = map[string]string{
	"tokens.env": "CAPSTAN_ADMIN_TOKEN=cap_admin0123456789abcdefghijklmnopqrstuvwxyz\n" +
		"CAPSTAN_WORKER_TOKEN=cap_worker0123456789abcdefghijklmnopqrstuvwxyz\n" +
		"CAPSTAN_CONTROL_PLANE_KEY=cap_controlplane0123456789abcdefghijklmnopqrstuvwxyz\n",
	"postgres.env": "POSTGRES_USER=capstan\nPOSTGRES_PASSWORD=pg0123456789abcdefghijklmnopqrstuvwxyz\nPOSTGRES_DB=capstan\n",
	"db.env":       "CAPSTAN_DATABASE_URL=postgres://capstan:pg0123456789abcdefghijklmnopqrstuvwxyz@capstan-postgres:5432/capstan?sslmode=disable\n",
	"redis.env":    "CAPSTAN_REDIS_ADDR=capstan-redis:6379\nCAPSTAN_REDIS_PASSWORD=redis0123456789abcdefghijklmnopqrstuvwxyz\n",
}

// overlayFiles copies the k8s tree that holds dir (its parent's parent's,
// deploy/k8s) into an in-memory filesystem, adding the dev overlay's
// secret files where they are missing.
func overlayFiles(dir string) (filesys.FileSystem, error) {
	fs := filesys.MakeFsInMemory()
	tree := filepath.Dir(filepath.Dir(dir))
	if filepath.Base(dir) == "base" {
		tree = filepath.Dir(dir)
	}
	err := filepath.WalkDir(tree, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return fs.WriteFile(path, raw)
	})
	if err != nil {
		return nil, err
	}
	for name, content := range devSecrets {
		path := filepath.Join(tree, "overlays", "dev", name)
		if fs.Exists(path) {
			continue
		}
		if err := fs.WriteFile(path, []byte(content)); err != nil {
			return nil, err
		}
	}
	return fs, nil
}

// newCluster indexes strictly decoded objects by kind and name; a second
// object of one kind and name is an error.
func newCluster(objs []any) (*cluster, error) {
	c := &cluster{objects: objs, namespaces: map[string]*corev1.Namespace{}, configMaps: map[string]*corev1.ConfigMap{},
		secrets: map[string]*corev1.Secret{}, services: map[string]*corev1.Service{},
		pvcs: map[string]*corev1.PersistentVolumeClaim{}, deployments: map[string]*appsv1.Deployment{},
		statefulSets: map[string]*appsv1.StatefulSet{}, jobs: map[string]*batchv1.Job{},
		pdbs: map[string]*policyv1.PodDisruptionBudget{}, hpas: map[string]*autoscalingv2.HorizontalPodAutoscaler{},
		netpols: map[string]*networkingv1.NetworkPolicy{}}
	for _, obj := range objs {
		meta := objectMeta(obj)
		if meta == nil || meta.Name == "" {
			return nil, fmt.Errorf("%T has no name", obj)
		}
		var dup bool
		switch o := obj.(type) {
		case *corev1.Namespace:
			dup = put(c.namespaces, o.Name, o)
		case *corev1.ConfigMap:
			dup = put(c.configMaps, o.Name, o)
		case *corev1.Secret:
			dup = put(c.secrets, o.Name, o)
		case *corev1.Service:
			dup = put(c.services, o.Name, o)
		case *corev1.PersistentVolumeClaim:
			dup = put(c.pvcs, o.Name, o)
		case *appsv1.Deployment:
			dup = put(c.deployments, o.Name, o)
		case *appsv1.StatefulSet:
			dup = put(c.statefulSets, o.Name, o)
		case *batchv1.Job:
			dup = put(c.jobs, o.Name, o)
		case *policyv1.PodDisruptionBudget:
			dup = put(c.pdbs, o.Name, o)
		case *autoscalingv2.HorizontalPodAutoscaler:
			dup = put(c.hpas, o.Name, o)
		case *networkingv1.NetworkPolicy:
			dup = put(c.netpols, o.Name, o)
		}
		if dup {
			return nil, fmt.Errorf("two %T named %s", obj, meta.Name)
		}
	}
	return c, nil
}

// put adds v under name, reporting whether name was taken.
func put[V any](m map[string]V, name string, v V) bool {
	_, dup := m[name]
	m[name] = v
	return dup
}

// loadOverlay builds an overlay and decodes every object it yields strictly
// into its Kubernetes type.
func loadOverlay(t testing.TB, root, overlay string) *cluster {
	t.Helper()
	out, err := buildOverlay(filepath.Join(root, "deploy", "k8s", "overlays", overlay))
	require.NoErrorf(t, err, "kustomize builds overlays/%s", overlay)
	objs, err := decodeManifests(strings.NewReader(string(out)))
	require.NoErrorf(t, err, "overlays/%s: every object decodes strictly into its Kubernetes type", overlay)
	c, err := newCluster(objs)
	require.NoError(t, err)
	return c
}

// objectMeta returns a decoded object's metadata, or nil for objects that
// have none.
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
		// An executor that runs attempts as CAPSTAN_EXECUTOR_RUN_AS starts as
		// root, with only switchCaps.
		rootOK := switchesUser(c, sc)
		if !rootOK && (nonRoot == nil || !*nonRoot) {
			problems = append(problems, fmt.Sprintf("container %q does not set runAsNonRoot: true", c.Name))
		}
		if !rootOK && (uid == nil || *uid != nonRootUID) {
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

// switchCaps are the only capabilities an executor that switches to
// CAPSTAN_EXECUTOR_RUN_AS may keep: switch user and group, signal and
// chown its attempts' processes and files, and remove what they wrote.
var switchCaps = map[corev1.Capability]bool{"SETUID": true, "SETGID": true, "KILL": true, "CHOWN": true,
	"DAC_OVERRIDE": true, "FOWNER": true}

// switchesUser reports whether c is an executor allowed to run as uid 0:
// it sets CAPSTAN_EXECUTOR_RUN_AS to a non-root uid, drops every
// capability and adds back only switchCaps.
func switchesUser(c corev1.Container, sc *corev1.SecurityContext) bool {
	runAs := ""
	for _, e := range c.Env {
		if e.Name == "CAPSTAN_EXECUTOR_RUN_AS" {
			runAs = e.Value
		}
	}
	uid, _, ok := strings.Cut(runAs, ":")
	if !ok || uid == "" || uid == "0" || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		return false
	}
	for _, c := range sc.Capabilities.Add {
		if !switchCaps[c] {
			return false
		}
	}
	return true
}

// selectorProblem says why a workload's selector does not select its own
// pod template, or "".
func selectorProblem(name string, selector *metav1.LabelSelector, template map[string]string) string {
	if selector == nil || len(selector.MatchLabels)+len(selector.MatchExpressions) == 0 {
		return fmt.Sprintf("%s has no selector", name)
	}
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return fmt.Sprintf("%s: %v", name, err)
	}
	if !sel.Matches(labels.Set(template)) {
		return fmt.Sprintf("%s: selector %s does not match template labels %v", name, sel, template)
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
// secretData is a Secret's keys and values, from data and stringData.
func secretData(s *corev1.Secret) map[string]string {
	data := map[string]string{}
	for k, v := range s.Data {
		data[k] = string(v)
	}
	for k, v := range s.StringData {
		data[k] = v
	}
	return data
}

func (c *cluster) containerEnv(ctr corev1.Container) (map[string]string, []string) {
	env := map[string]string{}
	var problems []string
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

func TestKustomizeFiles(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	dirs, err := filepath.Glob(filepath.Join(root, "deploy", "k8s", "overlays", "*"))
	require.NoError(t, err)
	var names []string
	for _, d := range dirs {
		names = append(names, filepath.Base(d))
	}
	require.ElementsMatch(t, sortedKeys(overlays), names, "deploy/k8s/overlays holds the overlays this test knows")
	for _, dir := range append([]string{filepath.Join(root, "deploy", "k8s", "base")}, dirs...) {
		rel, _ := filepath.Rel(root, dir)
		raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
		require.NoErrorf(t, err, "%s has a kustomization.yaml", rel)
		var k ktypes.Kustomization
		require.NoErrorf(t, yaml.UnmarshalStrict(raw, &k), "%s/kustomization.yaml decodes strictly into kustomize's Kustomization", rel)
		require.Equalf(t, namespace, k.Namespace, "%s puts everything in namespace %s", rel, namespace)
		paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		require.NoError(t, err)
		var files, listed []string
		for _, p := range paths {
			if filepath.Base(p) == "kustomization.yaml" {
				continue
			}
			files = append(files, filepath.Base(p))
			f, err := os.Open(p)
			require.NoError(t, err)
			_, err = decodeManifests(f)
			require.NoError(t, f.Close())
			require.NoErrorf(t, err, "%s/%s decodes strictly", rel, filepath.Base(p))
		}
		for _, r := range k.Resources {
			if !strings.HasPrefix(r, "..") {
				listed = append(listed, r)
			}
		}
		require.ElementsMatchf(t, files, listed, "%s/kustomization.yaml lists every manifest beside it", rel)
	}
}

func TestKubernetesManifests(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	reads := serviceEnvVars(t, root)
	p, err := loadCompose(t.Context(), filepath.Join(root, "docker-compose.yml"), composeSecrets...)
	require.NoError(t, err)
	for overlay, replicas := range overlays {
		t.Run(overlay, func(t *testing.T) {
			t.Parallel()
			c := loadOverlay(t, root, overlay)
			t.Run("namespace", func(t *testing.T) { checkNamespace(t, c) })
			t.Run("pods", func(t *testing.T) { checkPods(t, c, p, overlay) })
			t.Run("replicas", func(t *testing.T) { checkReplicas(t, c, overlay, replicas) })
			t.Run("selectors", func(t *testing.T) { checkSelectors(t, c) })
			t.Run("probes", func(t *testing.T) { checkProbes(t, root, c) })
			t.Run("environment", func(t *testing.T) { checkEnvironment(t, c, reads) })
			t.Run("migrate job", func(t *testing.T) { checkMigrateJob(t, c) })
			t.Run("executor", func(t *testing.T) { checkExecutor(t, c, reads) })
			t.Run("executor rbac", func(t *testing.T) { checkExecutorRBAC(t, c) })
			t.Run("disruption budgets", func(t *testing.T) { checkPDBs(t, c) })
			t.Run("autoscalers", func(t *testing.T) { checkHPAs(t, c, overlay) })
			t.Run("network policy", func(t *testing.T) { checkNetworkPolicy(t, c) })
			t.Run("postgres and redis", func(t *testing.T) { checkBackends(t, c, overlay) })
		})
	}
}

// capstanComponents are the workloads built from Capstan's images.
var capstanComponents = append([]string{"migrate"}, components...)

func checkNamespace(t *testing.T, c *cluster) {
	require.Contains(t, c.namespaces, namespace, "the overlay defines the capstan namespace")
	for _, obj := range c.objects {
		if _, isNS := obj.(*corev1.Namespace); isNS {
			continue
		}
		meta := objectMeta(obj)
		require.Equalf(t, namespace, meta.Namespace, "%T %s lives in namespace %s", obj, meta.Name, namespace)
	}
}

func checkPods(t *testing.T, c *cluster, p *types.Project, overlay string) {
	var tags, comps []string
	for _, w := range c.workloads() {
		comps = append(comps, w.component())
		require.Emptyf(t, podProblems(w.spec), "%s %s: every container has resource requests and limits, runs as non-root uid %d, and uses a pinned image", w.kind, w.name, nonRootUID)
		require.Lenf(t, w.spec.Containers, 1, "%s %s runs one container", w.kind, w.name)
		image := w.spec.Containers[0].Image
		svc, ok := p.Services[w.component()]
		require.Truef(t, ok, "%s %s is the compose service %s", w.kind, w.name, w.component())
		require.Equalf(t, svc.Image, image, "%s %s runs the image compose names for %s", w.kind, w.name, w.component())
		if slices.Contains(capstanComponents, w.component()) {
			want := w.component()
			if want == "migrate" {
				want = "api"
			}
			repo, tag := splitImage(image)
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
	require.Len(t, slices.Compact(tags), 1, "every Capstan image is of one release")
	want := slices.Clone(capstanComponents)
	if overlay == "dev" {
		want = append(want, "postgres", "redis")
	}
	require.ElementsMatch(t, want, comps, "overlays/%s runs these workloads", overlay)
	for _, name := range components {
		require.Equalf(t, "Deployment", c.byComponent(t, name).kind, "%s runs as a Deployment", name)
	}
}

func checkReplicas(t *testing.T, c *cluster, overlay string, want map[string]int32) {
	for name, n := range want {
		w := c.byComponent(t, name)
		require.Equalf(t, n, w.replicas, "overlays/%s runs %d %s", overlay, n, name)
		if hpa, ok := c.hpas[w.name]; ok {
			require.NotNil(t, hpa.Spec.MinReplicas)
			require.Equalf(t, n, *hpa.Spec.MinReplicas, "the %s autoscaler starts from the Deployment's replicas", name)
		}
	}
}

func checkSelectors(t *testing.T, c *cluster) {
	for _, d := range c.deployments {
		require.Empty(t, selectorProblem(d.Name, d.Spec.Selector, d.Spec.Template.Labels), "every Deployment's selector matches its template labels")
	}
	for _, s := range c.statefulSets {
		require.Empty(t, selectorProblem(s.Name, s.Spec.Selector, s.Spec.Template.Labels), "every StatefulSet's selector matches its template labels")
		require.Containsf(t, c.services, s.Spec.ServiceName, "StatefulSet %s's serviceName is a Service", s.Name)
	}
	require.NotEmpty(t, c.services)
	for _, svc := range c.services {
		require.NotEmptyf(t, svc.Spec.Selector, "Service %s selects pods", svc.Name)
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		var matched []workload
		for _, w := range c.workloads() {
			if w.kind != "Job" && sel.Matches(labels.Set(w.labels)) {
				matched = append(matched, w)
			}
		}
		require.Lenf(t, matched, 1, "Service %s's selector %s matches one workload's pods", svc.Name, sel)
		for _, port := range svc.Spec.Ports {
			target := port.TargetPort
			if target.Type == intstr.Int && target.IntVal == 0 {
				target = intstr.FromInt32(port.Port)
			}
			require.NotZerof(t, containerPort(matched[0].spec.Containers[0], target), "Service %s port %d targets %s, a port %s declares", svc.Name, port.Port, target.String(), matched[0].name)
		}
	}
}

// listenVar is the variable holding a component's HTTP listen address.
var listenVar = map[string]string{"api": "CAPSTAN_API_ADDR", "scheduler": "CAPSTAN_METRICS_ADDR",
	"abort-reconciler": "CAPSTAN_METRICS_ADDR", "executor": "CAPSTAN_EXECUTOR_ADDR"}

func checkProbes(t *testing.T, root string, c *cluster) {
	for _, name := range components {
		w := c.byComponent(t, name)
		ctr := w.spec.Containers[0]
		env, _ := c.containerEnv(ctr)
		port := addrPort(t, env[listenVar[name]])
		served := servedPaths(t, root, name)
		for probe, path := range map[*corev1.Probe]string{ctr.ReadinessProbe: "/readyz", ctr.LivenessProbe: "/healthz"} {
			require.NotNilf(t, probe, "%s has a readiness probe on /readyz and a liveness probe on /healthz", name)
			require.NotNilf(t, probe.HTTPGet, "%s probes %s over HTTP", name, path)
			require.Equalf(t, path, probe.HTTPGet.Path, "%s probes %s", name, path)
			require.Containsf(t, served, path, "the %s serves %s", name, path)
			require.Equalf(t, port, strconv.Itoa(int(containerPort(ctr, probe.HTTPGet.Port))),
				"%s probes %s on the port of %s", name, path, listenVar[name])
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
}

// servedPaths returns the /healthz and /readyz string literals in a
// service's source, and in pkg/svc when the service serves
// svc.NewHealthServer.
func servedPaths(t testing.TB, root, service string) []string {
	t.Helper()
	var paths []string
	var usesHealthServer bool
	scan := func(dir string) {
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			src, err := os.ReadFile(path)
			usesHealthServer = usesHealthServer || strings.Contains(string(src), "svc.NewHealthServer(")
			for _, p := range []string{"/healthz", "/readyz"} {
				if strings.Contains(string(src), strconv.Quote(p)) {
					paths = append(paths, p)
				}
			}
			return err
		})
		require.NoError(t, err)
	}
	scan(filepath.Join(root, "services", service))
	if usesHealthServer {
		scan(filepath.Join(root, "pkg", "svc"))
	}
	return paths
}

func checkEnvironment(t *testing.T, c *cluster, reads map[string]map[string]envVar) {
	given := map[string]map[string]string{}
	for _, name := range capstanComponents {
		w := c.byComponent(t, name)
		ctr := w.spec.Containers[0]
		env, problems := c.containerEnv(ctr)
		require.Emptyf(t, problems, "%s: every env source exists and every $(VAR) is defined before use", name)
		given[name] = env
		for key, value := range wantEnv[name] {
			got, ok := env[key]
			require.Truef(t, ok, "%s: %s must be set directly or through envFrom", name, key)
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
	require.Empty(t, envProblems(reads, given), "every variable a service reads is set or has a documented default")
	_, dbInExecutor := given["executor"]["CAPSTAN_DATABASE_URL"]
	require.False(t, dbInExecutor, "the executor never opens Postgres: it gets no database credentials")
	s, ok := c.secrets["capstan-db"]
	require.True(t, ok, "the overlay defines the Secret capstan-db")
	require.Contains(t, secretData(s), "CAPSTAN_DATABASE_URL", "the Secret capstan-db gives the database URL")
	require.Contains(t, c.secrets, "capstan-redis", "the overlay defines the Secret capstan-redis")
}

func checkMigrateJob(t *testing.T, c *cluster) {
	w := c.byComponent(t, "migrate")
	require.Equal(t, "Job", w.kind, "the migration is a Job")
	require.Contains(t, []corev1.RestartPolicy{corev1.RestartPolicyNever, corev1.RestartPolicyOnFailure}, w.spec.RestartPolicy, "a Job's pods restart Never or OnFailure")
	ctr := w.spec.Containers[0]
	require.Empty(t, ctr.Command, "command would replace the image's ENTRYPOINT; the argument goes in args")
	require.Equal(t, []string{"migrate"}, ctr.Args, `the Job runs the api binary with args ["migrate"]`)
}

// effective returns a variable's value in env, else its envDefault.
func effective(env map[string]string, v envVar) string {
	if s, ok := env[v.Name]; ok {
		return s
	}
	return v.Default
}

func checkExecutor(t *testing.T, c *cluster, reads map[string]map[string]envVar) {
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
	require.NotNil(t, pvc, "the overlay defines capstan-runs")
	if _, scales := c.hpas[w.name]; scales || w.replicas > 1 {
		require.Contains(t, pvc.Spec.AccessModes, corev1.ReadWriteMany,
			"executors of one run share its run directory, so with more than one executor the claim is ReadWriteMany")
	}
	_, sized := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	require.True(t, sized, "the claim requests a storage size")
	require.NotNil(t, w.spec.SecurityContext.FSGroup, "fsGroup makes the shared volume writable by the non-root user")
	require.EqualValues(t, nonRootUID, *w.spec.SecurityContext.FSGroup)

	drain, err := time.ParseDuration(effective(env, reads["executor"]["CAPSTAN_DRAIN_TIMEOUT"]))
	require.NoError(t, err, "CAPSTAN_DRAIN_TIMEOUT")
	shutdown, err := time.ParseDuration(effective(env, reads["executor"]["CAPSTAN_SHUTDOWN_TIMEOUT"]))
	require.NoError(t, err, "CAPSTAN_SHUTDOWN_TIMEOUT")
	require.NotNil(t, w.spec.TerminationGracePeriodSeconds)
	grace := time.Duration(*w.spec.TerminationGracePeriodSeconds) * time.Second
	require.Greaterf(t, grace, drain+shutdown,
		"terminationGracePeriodSeconds (%s) outlasts CAPSTAN_DRAIN_TIMEOUT (%s) + CAPSTAN_SHUTDOWN_TIMEOUT (%s), so a rollout drains executors", grace, drain, shutdown)
}

func checkPDBs(t *testing.T, c *cluster) {
	for _, name := range components {
		w := c.byComponent(t, name)
		var budgets []*policyv1.PodDisruptionBudget
		for _, pdb := range c.pdbs {
			if selects(pdb.Spec.Selector, w.labels) {
				budgets = append(budgets, pdb)
			}
		}
		require.Lenf(t, budgets, 1, "one PodDisruptionBudget covers the %s pods", name)
		pdb := budgets[0]
		for _, other := range c.workloads() {
			if other.name != w.name {
				require.Falsef(t, selects(pdb.Spec.Selector, other.labels), "PodDisruptionBudget %s selects only %s pods, not %s", pdb.Name, name, other.name)
			}
		}
		switch {
		case pdb.Spec.MaxUnavailable != nil:
			require.Equalf(t, intstr.Int, pdb.Spec.MaxUnavailable.Type, "%s: maxUnavailable is a count", pdb.Name)
			require.GreaterOrEqualf(t, pdb.Spec.MaxUnavailable.IntVal, int32(1), "%s lets a drain evict a pod", pdb.Name)
		case pdb.Spec.MinAvailable != nil:
			require.Lessf(t, pdb.Spec.MinAvailable.IntVal, w.replicas, "%s lets a drain evict a pod", pdb.Name)
		default:
			t.Fatalf("%s sets neither maxUnavailable nor minAvailable", pdb.Name)
		}
	}
}

func checkHPAs(t *testing.T, c *cluster, overlay string) {
	var scaled []string
	for _, hpa := range c.hpas {
		ref := hpa.Spec.ScaleTargetRef
		require.Equalf(t, "Deployment", ref.Kind, "%s scales a Deployment", hpa.Name)
		d, ok := c.deployments[ref.Name]
		require.Truef(t, ok, "%s scales Deployment %s, which exists", hpa.Name, ref.Name)
		scaled = append(scaled, d.Spec.Template.Labels[componentLabel])
		require.NotNil(t, hpa.Spec.MinReplicas)
		require.Greaterf(t, hpa.Spec.MaxReplicas, *hpa.Spec.MinReplicas, "%s has room to scale", hpa.Name)
		require.Lenf(t, hpa.Spec.Metrics, 1, "%s scales on one metric", hpa.Name)
		m := hpa.Spec.Metrics[0]
		require.Equalf(t, autoscalingv2.ResourceMetricSourceType, m.Type, "%s scales on a resource", hpa.Name)
		require.Equalf(t, corev1.ResourceCPU, m.Resource.Name, "%s scales on CPU", hpa.Name)
		require.NotNilf(t, m.Resource.Target.AverageUtilization, "%s targets a CPU utilisation", hpa.Name)
		for _, ctr := range d.Spec.Template.Spec.Containers {
			_, ok := ctr.Resources.Requests[corev1.ResourceCPU]
			require.Truef(t, ok, "%s: utilisation is of the CPU request, which %s sets", hpa.Name, ctr.Name)
		}
	}
	want := []string{"api", "executor"}
	if overlay == "dev" {
		want = nil // one replica each
	}
	require.ElementsMatch(t, want, scaled, "overlays/%s autoscales these", overlay)
}

// podIn is a pod of namespace ns, with labels, IP and named ports.
func podIn(ns string, l map[string]string, ip string, ports map[string]int32) endpoint {
	return endpoint{labels: l, nsLabels: map[string]string{"kubernetes.io/metadata.name": ns}, namespace: ns,
		ip: netip.MustParseAddr(ip), ports: ports}
}

// reaches is what each component's pods may open to another's, by target
// component and port name; every other connection between the overlay's
// pods must be refused.
var reaches = map[string]map[string][]string{
	"api":      {"http": {"executor"}},
	"executor": {"http": {"abort-reconciler"}},
	"postgres": {"postgres": {"api", "scheduler", "abort-reconciler", "migrate"}},
	"redis":    {"redis": {"api", "scheduler", "abort-reconciler", "executor"}},
}

// checkNetworkPolicy evaluates the overlay's NetworkPolicies for every
// connection between its pods, on every port they declare, and for the
// addresses and labelled clients outside them: exactly what reaches lists
// (and base/networkpolicy.yaml's comment says) is allowed.
func checkNetworkPolicy(t *testing.T, c *cluster) {
	var policies []*networkingv1.NetworkPolicy
	for _, p := range c.netpols {
		policies = append(policies, p)
		if comp := p.Labels[componentLabel]; comp != "" {
			w := c.byComponent(t, comp)
			for _, other := range c.workloads() {
				require.Equalf(t, other.name == w.name, selects(&p.Spec.PodSelector, other.labels),
					"NetworkPolicy %s selects the %s pods and only them (checked against %s)", p.Name, comp, other.name)
			}
		}
		for _, rule := range p.Spec.Ingress {
			for _, port := range rule.Ports {
				require.NotNilf(t, port.Port, "NetworkPolicy %s names its ports", p.Name)
			}
		}
	}
	pods := map[string]endpoint{}
	for i, w := range c.workloads() {
		ports := map[string]int32{}
		for _, p := range w.spec.Containers[0].Ports {
			ports[p.Name] = p.ContainerPort
		}
		pods[w.component()] = podIn(namespace, w.labels, fmt.Sprintf("10.244.0.%d", i+2), ports)
	}
	tcp := corev1.ProtocolTCP
	for target, dst := range pods {
		for name, port := range dst.ports {
			for source, src := range pods {
				if source == target {
					continue
				}
				want := slices.Contains(reaches[target][name], source)
				require.Equalf(t, want, allowed(policies, namespace, src, dst, port, tcp),
					"%s pods reach the %s's port %s (%d): %v", source, target, name, port, want)
			}
			outsider := podIn("other", map[string]string{"app": "other"}, "10.244.9.9", nil)
			require.Falsef(t, allowed(policies, namespace, outsider, dst, port, tcp),
				"an unlabelled pod elsewhere cannot reach the %s's port %s", target, name)
		}
	}
	dns := podIn("kube-system", map[string]string{"k8s-app": "kube-dns"}, "10.244.5.5", map[string]int32{"dns": 53})
	for comp, src := range pods {
		require.Truef(t, allowed(policies, namespace, src, dns, 53, corev1.ProtocolUDP), "%s asks the cluster DNS", comp)
	}
	outside := map[string]struct {
		addr  string
		port  int32
		comps []string
	}{
		"a task's download":           {"203.0.113.7", 443, []string{"api", "scheduler", "abort-reconciler", "executor"}},
		"a task's plain HTTP":         {"203.0.113.7", 80, []string{"executor"}},
		"the cloud metadata service":  {"169.254.169.254", 80, nil},
		"a managed Postgres":          {"10.20.0.5", 5432, []string{"api", "scheduler", "abort-reconciler", "migrate"}},
		"a managed Redis":             {"10.20.0.6", 6379, []string{"api", "scheduler", "abort-reconciler", "executor"}},
		"a private service elsewhere": {"10.30.0.9", 8443, nil},
		"an OTLP collector":           {"10.40.0.2", 4318, []string{"api", "scheduler", "abort-reconciler"}},
	}
	for what, o := range outside {
		for comp, src := range pods {
			if comp == "postgres" || comp == "redis" {
				continue
			}
			want := slices.Contains(o.comps, comp)
			require.Equalf(t, want, allowed(policies, namespace, src, external(o.addr), o.port, tcp),
				"%s reaches %s (%s:%d): %v", comp, what, o.addr, o.port, want)
		}
	}
	client := map[string]string{"capstan.run/api-client": "true"}
	api := pods["api"]
	require.True(t, allowed(policies, namespace, podIn(namespace, client, "10.244.7.1", nil), api, 8080, tcp),
		"a pod labelled as an api client reaches the api")
	ingress := podIn("ingress", map[string]string{"app": "ingress"}, "10.244.7.2", nil)
	ingress.nsLabels = client
	require.True(t, allowed(policies, namespace, ingress, api, 8080, tcp), "so does any pod of a namespace labelled as an api client")
	scraper := podIn("monitoring", map[string]string{"app": "prometheus"}, "10.244.7.3", nil)
	scraper.nsLabels = map[string]string{"capstan.run/metrics-client": "true"}
	localScraper := podIn(namespace, map[string]string{"capstan.run/metrics-client": "true"}, "10.244.7.4", nil)
	for _, comp := range []string{"scheduler", "abort-reconciler"} {
		require.Truef(t, allowed(policies, namespace, scraper, pods[comp], pods[comp].ports["metrics"], tcp),
			"a namespace labelled as a metrics client scrapes the %s", comp)
		require.Truef(t, allowed(policies, namespace, localScraper, pods[comp], pods[comp].ports["metrics"], tcp),
			"so does a pod of this namespace labelled as one")
		require.Falsef(t, allowed(policies, namespace, localScraper, pods[comp], 5432, tcp), "on no other port")
	}
}

func checkBackends(t *testing.T, c *cluster, overlay string) {
	api := c.byComponent(t, "api")
	env, _ := c.containerEnv(api.spec.Containers[0])
	db, err := url.Parse(env["CAPSTAN_DATABASE_URL"])
	require.NoError(t, err)
	dbSvc, dbInCluster := c.services[db.Hostname()]
	redisHost, redisPort, _ := net.SplitHostPort(env["CAPSTAN_REDIS_ADDR"])
	switch overlay {
	case "dev":
		require.True(t, dbInCluster, "dev: CAPSTAN_DATABASE_URL names the in-cluster Postgres Service")
		require.Equal(t, "postgres", dbSvc.Spec.Selector[componentLabel])
		require.Equal(t, strconv.Itoa(int(dbSvc.Spec.Ports[0].Port)), db.Port())
		pg := c.byComponent(t, "postgres")
		require.Equal(t, "StatefulSet", pg.kind, "Postgres keeps its data on a claim of its own")
		pgEnv, problems := c.containerEnv(pg.spec.Containers[0])
		require.Empty(t, problems)
		pass, _ := db.User.Password()
		require.Equal(t, pgEnv["POSTGRES_USER"], db.User.Username(), "the URL's user is the one Postgres creates")
		require.Equal(t, pgEnv["POSTGRES_PASSWORD"], pass, "the URL's password is the one Postgres sets")
		require.Equal(t, "/"+pgEnv["POSTGRES_DB"], db.Path, "the URL's database is the one Postgres creates")
		redisSvc, ok := c.services[redisHost]
		require.True(t, ok, "dev: CAPSTAN_REDIS_ADDR names the in-cluster Redis Service")
		require.Equal(t, "redis", redisSvc.Spec.Selector[componentLabel])
		require.Equal(t, strconv.Itoa(int(redisSvc.Spec.Ports[0].Port)), redisPort)
		redisPod := c.byComponent(t, "redis")
		redisEnv, problems := c.containerEnv(redisPod.spec.Containers[0])
		require.Empty(t, problems)
		require.NotEmpty(t, env["CAPSTAN_REDIS_PASSWORD"], "dev: the services reach Redis with a password")
		require.Equal(t, env["CAPSTAN_REDIS_PASSWORD"], redisEnv["REDIS_PASSWORD"], "dev: Redis requires the password the services are given")
		args := redisPod.spec.Containers[0].Args
		i := slices.Index(args, "--requirepass")
		require.True(t, i >= 0 && i+1 < len(args) && args[i+1] == "$(REDIS_PASSWORD)", "dev: Redis runs with --requirepass $(REDIS_PASSWORD): %v", args)
		for _, s := range []string{"capstan-db", "capstan-postgres", "capstan-redis", "capstan-tokens"} {
			require.Emptyf(t, c.secrets[s].StringData, "dev: %s is generated from a git-ignored file, not written in the repository", s)
		}
	case "prod":
		require.False(t, dbInCluster, "prod: Postgres is outside the overlay")
		require.Equal(t, "require", db.Query().Get("sslmode"), "prod: the database connection uses TLS")
		redis := c.secrets["capstan-redis"].StringData
		require.NotEmpty(t, redis["CAPSTAN_REDIS_SENTINELS"], "prod: Redis is reached through Sentinel")
		require.NotEmpty(t, redis["CAPSTAN_REDIS_MASTER"], "prod: the sentinels' master name is set")
		for _, s := range strings.Split(redis["CAPSTAN_REDIS_SENTINELS"], ",") {
			addrPort(t, s)
		}
		require.NotContains(t, redis, "CAPSTAN_REDIS_ADDR", "prod: no single Redis address beside the sentinels")
	}
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
		d := objs[0].(*appsv1.Deployment)
		require.Contains(t, selectorProblem(d.Name, d.Spec.Selector, d.Spec.Template.Labels), "does not match template labels")
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

// TestSwitchesUser: only an executor that runs attempts as a non-root
// CAPSTAN_EXECUTOR_RUN_AS, drops ALL and adds back only switchCaps may run as
// root.
func TestSwitchesUser(t *testing.T) {
	t.Parallel()
	runAs := func(v string) []corev1.EnvVar { return []corev1.EnvVar{{Name: "CAPSTAN_EXECUTOR_RUN_AS", Value: v}} }
	caps := func(add ...corev1.Capability) *corev1.SecurityContext {
		return &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: add}}
	}
	require.True(t, switchesUser(corev1.Container{Env: runAs("10002:10002")}, caps("SETUID", "SETGID", "KILL")))
	require.False(t, switchesUser(corev1.Container{Env: runAs("0:0")}, caps("SETUID")), "root tasks")
	require.False(t, switchesUser(corev1.Container{}, caps("SETUID")), "no RUN_AS")
	require.False(t, switchesUser(corev1.Container{Env: runAs("10002:10002")}, caps("SETUID", "SYS_ADMIN")), "a cap too many")
	require.False(t, switchesUser(corev1.Container{Env: runAs("10002:10002")},
		&corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SETUID"}}}), "ALL kept")
}

// checkExecutorRBAC: the executor runs under its service account, whose
// only grant is a Role of its namespace over pods, pods/log and events (the
// kubernetes plugin's needs), never a ClusterRole.
func checkExecutorRBAC(t *testing.T, c *cluster) {
	var roles []*rbacv1.Role
	var bindings []*rbacv1.RoleBinding
	for _, obj := range c.objects {
		switch o := obj.(type) {
		case *rbacv1.Role:
			roles = append(roles, o)
		case *rbacv1.RoleBinding:
			bindings = append(bindings, o)
		}
	}
	require.Len(t, roles, 1, "one Role: the executor's")
	role := roles[0]
	require.Equal(t, namespace, role.Namespace)
	allowed := map[string]bool{"pods": true, "pods/log": true, "events": true}
	for _, r := range role.Rules {
		require.Equal(t, []string{""}, r.APIGroups, "core resources only")
		for _, res := range r.Resources {
			require.Truef(t, allowed[res], "the Role grants %s: only pods, pods/log and events", res)
		}
		require.NotContains(t, r.Verbs, "*")
	}
	require.Len(t, bindings, 1)
	b := bindings[0]
	require.Equal(t, rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name}, b.RoleRef)
	w := c.byComponent(t, "executor")
	require.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: w.spec.ServiceAccountName, Namespace: namespace}},
		b.Subjects, "bound to the executor's service account")
}
