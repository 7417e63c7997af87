package plugin_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/kubetest"
	"github.com/capstan-run/capstan/services/executor/internal/plugin"
)

// kube is a kubernetes plugin on the test cluster, in a namespace of the
// test's own.
type kube struct {
	t      *testing.T
	client kubernetes.Interface
	ns     string
	p      *plugin.Kubernetes
}

// newKube returns a kubernetes plugin of cfg in a new namespace of the
// test's, which goes with the test.
func newKube(t *testing.T, cfg plugin.KubernetesConfig) *kube {
	t.Helper()
	rest, err := clientcmd.BuildConfigFromFlags("", kubetest.Kubeconfig(t))
	require.NoError(t, err)
	rest.QPS, rest.Burst = 200, 400
	httpClient, err := restclient.HTTPClientFor(rest)
	require.NoError(t, err)
	t.Cleanup(httpClient.CloseIdleConnections) // last: after the plugin's informers and log streams stopped
	client, err := kubernetes.NewForConfigAndClient(rest, httpClient)
	require.NoError(t, err)
	ns := "t-" + uuid.NewString()[:8]
	ctx := context.Background()
	_, err = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		// Pods the test left keep the finalizer; drop them so the namespace goes.
		pods, _ := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		for _, p := range pods.Items {
			_ = plugin.RemovePod(ctx, client, ns, p.Name, 0)
		}
		_ = client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	})
	// Pod creation needs the namespace's default service account, which the
	// controller manager makes.
	require.Eventually(t, func() bool {
		_, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	}, 30*time.Second, 20*time.Millisecond)
	pctx, cancel := context.WithCancel(context.Background())
	cfg.Client, cfg.Namespace = client, ns
	p, err := plugin.NewKubernetes(pctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		cancel()
		p.Wait()
	})
	return &kube{t: t, client: client, ns: ns, p: p}
}

var ids = struct {
	sync.Mutex
	n int64
}{n: time.Now().UnixNano() % 1e12}

func newID() int64 {
	ids.Lock()
	defer ids.Unlock()
	ids.n++
	return ids.n
}

// task is an attempt of spec, its outputs named.
func task(spec domain.KubernetesSpec, outputs ...string) *plugin.Task {
	id := newID()
	return &plugin.Task{ID: id, Spec: domain.PluginSpec{Plugin: domain.PluginKubernetes, Kubernetes: &spec},
		Outputs: outputs, KillGrace: time.Second, LogLimit: 64 << 10,
		AttemptEnv: []string{"CAPSTAN_PROJECT=p", "CAPSTAN_DOMAIN=d", "CAPSTAN_RUN=r1", "CAPSTAN_ACTION=a",
			"CAPSTAN_TASK_INDEX=0", fmt.Sprintf("CAPSTAN_ATTEMPT_ID=%d", id), "CAPSTAN_WORK_DIR=/host/only"}}
}

// run drives tk's Handle until its work ends, within 30s.
func (k *kube) run(tk *plugin.Task) plugin.Transition {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		tr, err := k.p.Handle(ctx, tk)
		require.NoError(k.t, err)
		if tr.Ended() {
			return tr
		}
		require.NoError(k.t, ctx.Err(), "the Pod did not end")
	}
}

// untilRunning calls Handle once: it returns when the Pod runs.
func (k *kube) untilRunning(tk *plugin.Task) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := k.p.Handle(ctx, tk)
	require.NoError(k.t, err)
	require.Equal(k.t, plugin.PhaseRunning, tr.Phase)
	require.NoError(k.t, ctx.Err(), "the Pod did not run")
	pod := k.pod(tk)
	require.NotNil(k.t, pod)
	require.Equal(k.t, corev1.PodRunning, pod.Status.Phase)
}

func (k *kube) pod(tk *plugin.Task) *corev1.Pod {
	pod, err := k.client.CoreV1().Pods(k.ns).Get(context.Background(), plugin.PodName(tk.ID), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	require.NoError(k.t, err)
	return pod
}

// finalize runs Finalize and checks the Pod is gone from the API.
func (k *kube) finalize(tk *plugin.Task) {
	k.t.Helper()
	require.NoError(k.t, k.p.Finalize(context.Background(), tk))
	require.Eventually(k.t, func() bool { return k.pod(tk) == nil }, 10*time.Second, 10*time.Millisecond,
		"the Pod outlived its attempt")
}

func TestKubernetesPodSucceedsWithLogsAndOutputs(t *testing.T) {
	t.Parallel()
	k := newKube(t, plugin.KubernetesConfig{})
	tk := task(domain.KubernetesSpec{Image: "busybox:1", Command: []string{"sh", "-c"}, Args: []string{"echo hi"},
		Env:       map[string]string{"KWOK_TERMINATION_MESSAGE": `{"greeting":"hello","n":3}`},
		Resources: &domain.KubernetesResources{Requests: map[string]string{"cpu": "100m", "memory": "64Mi"}}}, "greeting", "n")
	tr := k.run(tk)
	require.Equal(t, plugin.PhaseSuccess, tr.Phase, tr.Err)
	require.Equal(t, map[string]string{"greeting": "hello", "n": "3"}, tr.Outputs)
	require.NotNil(t, tr.ExitCode)
	require.Equal(t, 0, *tr.ExitCode)
	require.Equal(t, 1, strings.Count(string(tr.Stdout), "hello from kwok"), "the log once: %q", tr.Stdout)

	pod := k.pod(tk)
	require.NotNil(t, pod, "the Pod stays until finalized")
	require.Contains(t, pod.Finalizers, plugin.Finalizer)
	require.Equal(t, map[string]string{plugin.LabelManaged: "true", plugin.LabelAttempt: fmt.Sprint(tk.ID),
		plugin.LabelProject: "p", plugin.LabelDomain: "d", plugin.LabelRun: "r1", plugin.LabelAction: "a", plugin.LabelTask: "0"},
		pod.Labels)
	c := pod.Spec.Containers[0]
	require.Equal(t, "busybox:1", c.Image)
	require.Equal(t, []string{"sh", "-c"}, c.Command)
	require.Equal(t, corev1.RestartPolicyNever, pod.Spec.RestartPolicy)
	require.Equal(t, "100m", c.Resources.Requests.Cpu().String())
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	require.Equal(t, "r1", env["CAPSTAN_RUN"])
	require.NotContains(t, env, "CAPSTAN_WORK_DIR", "a Pod has none of the executor's directories")
	k.finalize(tk)
}

// TestKubernetesLogSkipShipsOnlyWhatFollows: an attempt whose output the
// control plane partly holds (LogSkip, a Pod adopted again) hands on only
// the rest of the Pod's log, and keeps the whole in its transition.
func TestKubernetesLogSkipShipsOnlyWhatFollows(t *testing.T) {
	t.Parallel()
	k := newKube(t, plugin.KubernetesConfig{})
	var mu sync.Mutex
	var shipped []byte
	tk := task(domain.KubernetesSpec{Image: "busybox:1"})
	tk.LogSkip = int64(len("hello from kwok\n"))
	tk.OnOutput = func(_ string, p []byte) {
		mu.Lock()
		defer mu.Unlock()
		shipped = append(shipped, p...)
	}
	tr := k.run(tk)
	require.Equal(t, plugin.PhaseSuccess, tr.Phase, tr.Err)
	require.True(t, strings.HasPrefix(string(tr.Stdout), "hello from kwok\n"), "the whole log: %q", tr.Stdout)
	mu.Lock()
	require.Equal(t, strings.TrimPrefix(string(tr.Stdout), "hello from kwok\n"), string(shipped))
	mu.Unlock()
	k.finalize(tk)
}

func TestKubernetesPodFailsWithItsExitCode(t *testing.T) {
	t.Parallel()
	k := newKube(t, plugin.KubernetesConfig{})
	tk := task(domain.KubernetesSpec{Image: "busybox:1", Env: map[string]string{"KWOK_EXIT_CODE": "3"}})
	tr := k.run(tk)
	require.Equal(t, plugin.PhaseRetryableFailure, tr.Phase)
	require.Equal(t, plugin.CodeNonZeroExit, tr.Code)
	require.Equal(t, 3, *tr.ExitCode)
	require.Equal(t, "exit status 3", tr.Err)
	k.finalize(tk)
}

func TestKubernetesOOMKilled(t *testing.T) {
	t.Parallel()
	k := newKube(t, plugin.KubernetesConfig{})
	tk := task(domain.KubernetesSpec{Image: "busybox:1", Env: map[string]string{"KWOK_EXIT_CODE": "137", "KWOK_REASON": "OOMKilled"}})
	tr := k.run(tk)
	require.Equal(t, plugin.PhaseRetryableFailure, tr.Phase)
	require.Equal(t, plugin.CodeOOMKilled, tr.Code)
	require.Equal(t, 137, *tr.ExitCode)
	k.finalize(tk)
}

func TestKubernetesOutputsPastTheTerminationMessageBound(t *testing.T) {
	t.Parallel()
	k := newKube(t, plugin.KubernetesConfig{})
	big := `{"out":"` + strings.Repeat("x", plugin.MaxTerminationMessage) + `"}`
	tk := task(domain.KubernetesSpec{Image: "busybox:1", Env: map[string]string{"KWOK_TERMINATION_MESSAGE": big}}, "out")
	tr := k.run(tk)
	require.Equal(t, plugin.PhaseRetryableFailure, tr.Phase)
	require.Equal(t, plugin.CodeInvalidOutputs, tr.Code)
	require.Contains(t, tr.Err, "must fit in 4096")
	k.finalize(tk)

	tk = task(domain.KubernetesSpec{Image: "busybox:1", Env: map[string]string{"KWOK_TERMINATION_MESSAGE": "not json"}}, "out")
	tr = k.run(tk)
	require.Equal(t, plugin.CodeInvalidOutputs, tr.Code)
	require.Contains(t, tr.Err, "must be a JSON object")
	k.finalize(tk)
}

func TestKubernetesImagePullFailsAfterTheGrace(t *testing.T) {
	t.Parallel()
	k := newKube(t, plugin.KubernetesConfig{ImagePullGrace: 500 * time.Millisecond})
	tk := task(domain.KubernetesSpec{Image: "registry.invalid/none:1", Env: map[string]string{"KWOK_WAITING_REASON": "ImagePullBackOff"}})
	start := time.Now()
	tr := k.run(tk)
	require.Equal(t, plugin.PhaseRetryableFailure, tr.Phase)
	require.Equal(t, plugin.CodeImagePullBackOff, tr.Code)
	require.Contains(t, tr.Err, "registry.invalid/none:1")
	require.GreaterOrEqual(t, time.Since(start), 500*time.Millisecond, "not before the grace")
	k.finalize(tk)
}

func TestKubernetesUnschedulableShowsTheSchedulersMessage(t *testing.T) {
	t.Parallel()
	k := newKube(t, plugin.KubernetesConfig{})
	tk := task(domain.KubernetesSpec{Image: "busybox:1", NodeSelector: map[string]string{"zone": "nowhere"}})
	reasons := make(chan string, 4)
	tk.OnPending = func(r string) { reasons <- r }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan plugin.Transition, 1)
	go func() {
		tr, _ := k.p.Handle(ctx, tk)
		done <- tr
	}()
	select {
	case r := <-reasons:
		require.Contains(t, r, "0/1 nodes are available")
		require.Contains(t, r, "node affinity/selector")
	case <-time.After(30 * time.Second):
		t.Fatal("no pending reason")
	}
	cancel() // as an abort does
	require.Equal(t, plugin.PhaseRunning, (<-done).Phase)
	require.NoError(t, k.p.Abort(context.Background(), tk))
	k.finalize(tk)
}

func TestKubernetesAbortDeletesTheRunningPod(t *testing.T) {
	t.Parallel()
	k := newKube(t, plugin.KubernetesConfig{})
	tk := task(domain.KubernetesSpec{Image: "busybox:1", Env: map[string]string{"KWOK_RUN_TIME": "1h"}})
	k.untilRunning(tk)
	require.NoError(t, k.p.Abort(context.Background(), tk))
	require.NoError(t, k.p.Abort(context.Background(), tk), "aborting stopped work does nothing")
	tr, err := k.p.Handle(context.Background(), tk)
	require.NoError(t, err)
	require.True(t, tr.Ended())
	require.Equal(t, 1, strings.Count(string(tr.Stdout), "hello from kwok"),
		"the last logs are collected, once, before the finalizer goes: %q", tr.Stdout)
	k.finalize(tk)
	require.NoError(t, k.p.Finalize(context.Background(), tk), "finalize is idempotent")
}

func TestKubernetesAbortOfAPodAlreadyGone(t *testing.T) {
	t.Parallel()
	k := newKube(t, plugin.KubernetesConfig{})
	tk := task(domain.KubernetesSpec{Image: "busybox:1", Env: map[string]string{"KWOK_RUN_TIME": "1h"}})
	k.untilRunning(tk)
	require.NoError(t, plugin.RemovePod(context.Background(), k.client, k.ns, plugin.PodName(tk.ID), 0))
	require.Eventually(t, func() bool { return k.pod(tk) == nil }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, k.p.Abort(context.Background(), tk), "NotFound is already terminated")
	k.finalize(tk)
}

func TestKubernetesPodDeletedByHandFailsTheAttempt(t *testing.T) {
	t.Parallel()
	k := newKube(t, plugin.KubernetesConfig{})
	tk := task(domain.KubernetesSpec{Image: "busybox:1", Env: map[string]string{"KWOK_RUN_TIME": "1h"}})
	k.untilRunning(tk)
	require.NoError(t, k.client.CoreV1().Pods(k.ns).Delete(context.Background(), plugin.PodName(tk.ID), metav1.DeleteOptions{}))
	tr := k.run(tk)
	require.Equal(t, plugin.PhaseRetryableFailure, tr.Phase)
	require.Equal(t, plugin.CodePodDeleted, tr.Code)
	require.NotNil(t, k.pod(tk), "the finalizer holds the deleted Pod until Capstan recorded it")
	k.finalize(tk)
}

func TestKubernetesDisruptedPodIsALostAttempt(t *testing.T) {
	t.Parallel()
	k := newKube(t, plugin.KubernetesConfig{})
	tk := task(domain.KubernetesSpec{Image: "busybox:1", Env: map[string]string{"KWOK_RUN_TIME": "1h"}})
	k.untilRunning(tk)
	pod := k.pod(tk)
	// A transition time of now: the disruption controller resets to False a
	// DisruptionTarget older than its timeout on a Pod not being deleted.
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget,
		Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now(), Reason: "DeletionByTaintManager",
		Message: "Taint manager: deleting due to NoExecute taint"})
	_, err := k.client.CoreV1().Pods(k.ns).UpdateStatus(context.Background(), pod, metav1.UpdateOptions{})
	require.NoError(t, err)
	tr := k.run(tk)
	require.Equal(t, plugin.PhaseLost, tr.Phase)
	require.Equal(t, plugin.CodePodLost, tr.Code)
	require.Contains(t, tr.Err, "DeletionByTaintManager")
	k.finalize(tk)
}

func TestKubernetesSweepDeletesOrphanPods(t *testing.T) {
	t.Parallel()
	k := newKube(t, plugin.KubernetesConfig{})
	orphan := task(domain.KubernetesSpec{Image: "busybox:1", Env: map[string]string{"KWOK_RUN_TIME": "1h"}})
	live := task(domain.KubernetesSpec{Image: "busybox:1", Env: map[string]string{"KWOK_RUN_TIME": "1h"}})
	held := task(domain.KubernetesSpec{Image: "busybox:1", Env: map[string]string{"KWOK_RUN_TIME": "1h"}})
	for _, tk := range []*plugin.Task{orphan, live, held} {
		k.untilRunning(tk)
	}
	alive := func(_ context.Context, ids []int64) (map[int64]bool, error) {
		return map[int64]bool{live.ID: true}, nil
	}
	adopted := task(domain.KubernetesSpec{Image: "busybox:1", Env: map[string]string{"KWOK_RUN_TIME": "1h"}})
	k.untilRunning(adopted)
	adopt := func(_ context.Context, ids []int64) (map[int64]bool, error) {
		require.NotContains(t, ids, held.ID, "a held attempt is not adopted")
		return map[int64]bool{adopted.ID: true}, nil
	}
	n, err := k.p.SweepOrphans(context.Background(), adopt, alive, func(id int64) bool { return id == held.ID })
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NotNil(t, k.pod(adopted), "an adopted attempt's Pod stays")
	require.Eventually(t, func() bool { return k.pod(orphan) == nil }, 10*time.Second, 10*time.Millisecond)
	require.NotNil(t, k.pod(live))
	require.NotNil(t, k.pod(held))
}

// A step runs as the executor's default service account or one it lists,
// never another (the executor's own, which may create Pods): that Pod is
// refused before it is created, an invalid spec.
func TestKubernetesServiceAccountOutsideTheListIsRefused(t *testing.T) {
	t.Parallel()
	k := newKube(t, plugin.KubernetesConfig{ServiceAccount: "runner", ServiceAccounts: []string{"trainer"}})
	for sa, want := range map[string]string{"": "runner", "runner": "runner", "trainer": "trainer"} {
		pod, err := k.p.PodFor(task(domain.KubernetesSpec{Image: "busybox:1", ServiceAccount: sa}))
		require.NoError(t, err, sa)
		require.Equal(t, want, pod.Spec.ServiceAccountName)
	}
	tk := task(domain.KubernetesSpec{Image: "busybox:1", ServiceAccount: "capstan-executor"})
	tr := k.run(tk)
	require.Equal(t, plugin.PhasePermanentFailure, tr.Phase)
	require.Equal(t, plugin.CodeInvalidPluginSpec, tr.Code)
	require.Contains(t, tr.Err, `kubernetes.service_account: "capstan-executor"`)
	require.Nil(t, k.pod(tk), "no Pod is created")
}
