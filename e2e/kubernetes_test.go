package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/kubetest"
	"github.com/capstan-run/capstan/pkg/store"
)

// The kubernetes plugin end to end, on the test cluster scripts/kube-deps.sh
// runs (started once per test process): a real API server, scheduler and
// controller manager, with kwok playing the node. kwok ends a Pod as its
// container's KWOK_* variables say (tools/kube/kwok/stages): KWOK_RUN_TIME,
// KWOK_EXIT_CODE, KWOK_REASON, KWOK_TERMINATION_MESSAGE,
// KWOK_WAITING_REASON. Each test has a namespace of its own.

// kubeNS is a namespace of the test's own on the test cluster.
type kubeNS struct {
	t          testing.TB
	client     kubernetes.Interface
	kubeconfig string
	ns         string
}

// newKubeNS makes a namespace for t, removed (with whatever Pods t left,
// their finalizers dropped) when t ends, after the stack t starts next.
func newKubeNS(t testing.TB) *kubeNS {
	t.Helper()
	kc := kubetest.Kubeconfig(t)
	rest, err := clientcmd.BuildConfigFromFlags("", kc)
	require.NoError(t, err)
	rest.QPS, rest.Burst = 200, 400
	client, err := kubernetes.NewForConfig(rest)
	require.NoError(t, err)
	ns := "e2e-" + uuid.NewString()[:8]
	ctx := context.Background()
	_, err = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		metav1.CreateOptions{})
	require.NoError(t, err)
	k := &kubeNS{t: t, client: client, kubeconfig: kc, ns: ns}
	t.Cleanup(func() {
		for _, p := range k.pods() {
			p.Finalizers = nil
			_, _ = client.CoreV1().Pods(ns).Update(ctx, &p, metav1.UpdateOptions{})
			_ = client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{})
		}
		_ = client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	})
	// Pods need the namespace's default service account, which the
	// controller manager makes.
	require.Eventually(t, func() bool {
		_, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	}, 30*time.Second, 20*time.Millisecond)
	return k
}

// executorEnv is what turns an executor into a kubernetes one whose Pods
// default to k's namespace, its durations shrunk for tests.
func (k *kubeNS) executorEnv() []string {
	return []string{"CAPSTAN_KUBERNETES=true", "KUBECONFIG=" + k.kubeconfig, "CAPSTAN_KUBERNETES_NAMESPACE=" + k.ns,
		"CAPSTAN_KUBERNETES_IMAGE_PULL_GRACE=1s", "CAPSTAN_KUBERNETES_SWEEP_INTERVAL=1s", "CAPSTAN_CONTAINER_RUNTIME=none"}
}

// pods lists the namespace's Pods.
func (k *kubeNS) pods() []corev1.Pod {
	k.t.Helper()
	list, err := k.client.CoreV1().Pods(k.ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(k.t, err)
	return list.Items
}

// pod returns attempt id's Pod, nil when there is none.
func (k *kubeNS) pod(id int64) *corev1.Pod {
	k.t.Helper()
	p, err := k.client.CoreV1().Pods(k.ns).Get(context.Background(), "capstan-"+strconv.FormatInt(id, 10),
		metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	require.NoError(k.t, err)
	return p
}

// awaitNoPods waits until the namespace holds no Pod.
func (k *kubeNS) awaitNoPods(s *Stack, timeout time.Duration) {
	k.t.Helper()
	s.Eventually(timeout, "no Pod left in "+k.ns, func() bool { return len(k.pods()) == 0 })
}

// kubeStep is a kubernetes step of image whose container has env.
func kubeStep(name string, env map[string]string) api.Step {
	step := api.Step{Name: name, Plugin: ptr("kubernetes"), KillGrace: ptr("1s"),
		Kubernetes: &api.KubernetesSpec{Image: "busybox:1", Command: &[]string{"sh", "-c"}, Args: &[]string{"echo hi"}}}
	if env != nil {
		step.Kubernetes.Env = &env
	}
	return step
}

// kubeAttempt waits until step's first task has an attempt in state want
// and returns it.
func kubeAttempt(t *testing.T, s *Stack, run, step string, want api.TaskState) api.Attempt {
	t.Helper()
	var at api.Attempt
	s.Eventually(30*time.Second, step+" attempt "+string(want), func() bool {
		tasks := action(getRun(t, s, run), step).Tasks
		if len(tasks) == 0 || len(tasks[0].Attempts) == 0 {
			return false
		}
		at = tasks[0].Attempts[len(tasks[0].Attempts)-1]
		return at.State == want
	})
	return at
}

// TestKubernetes runs kubernetes steps as Pods through one kubernetes
// executor: success with logs and outputs, a failure's exit code, an image
// that cannot be pulled, an abort, a Pod deleted by hand, an abort whose
// Pod is already gone. Every Pod is gone at the end.
func TestKubernetes(t *testing.T) {
	t.Parallel()
	k := newKubeNS(t)
	s := Start(t, bins, Options{Executors: 1, ExecutorEnv: func(int) []string { return k.executorEnv() }})

	t.Run("SucceedsWithLogsAndOutputs", func(t *testing.T) {
		t.Parallel()
		step := kubeStep("greet", map[string]string{"KWOK_TERMINATION_MESSAGE": `{"greeting":"hello","n":3}`})
		step.Outputs = &[]string{"greeting", "n"}
		name := create(t, s, api.WorkflowSpec{Steps: []api.Step{step}})
		run := waitPhase(t, s, name, 60*time.Second, api.PhaseSUCCEEDED)
		require.Equal(t, map[string]string{"greeting": "hello", "n": "3"}, *action(run, "greet").Outputs)
		require.Contains(t, logs(t, s, name, "greet", 0, 1), "hello from kwok", "the Pod's log, from the Pod log API")
		at := action(run, "greet").Tasks[0].Attempts[0]
		require.Equal(t, 0, *at.ExitCode)
		s.Eventually(10*time.Second, "the Pod removed", func() bool { return k.pod(at.Id) == nil })
	})

	t.Run("FailsWithItsExitCode", func(t *testing.T) {
		t.Parallel()
		name := create(t, s, api.WorkflowSpec{Steps: []api.Step{kubeStep("fail", map[string]string{"KWOK_EXIT_CODE": "3"})}})
		run := waitPhase(t, s, name, 60*time.Second, api.PhaseFAILED)
		at := action(run, "fail").Tasks[0].Attempts[0]
		require.Equal(t, 3, *at.ExitCode)
		require.Equal(t, "user", *at.Cause)
		require.Equal(t, "NonZeroExit", *at.Code)
	})

	t.Run("ImagePullBackOffAfterTheGrace", func(t *testing.T) {
		t.Parallel()
		step := kubeStep("pull", map[string]string{"KWOK_WAITING_REASON": "ImagePullBackOff"})
		step.Kubernetes.Image = "registry.invalid/none:1"
		name := create(t, s, api.WorkflowSpec{Steps: []api.Step{step}})
		run := waitPhase(t, s, name, 60*time.Second, api.PhaseFAILED)
		at := action(run, "pull").Tasks[0].Attempts[0]
		require.Equal(t, "ImagePullBackOff", *at.Code)
		require.Equal(t, "user", *at.Cause)
		require.Contains(t, *at.Error, "registry.invalid/none:1")
	})

	t.Run("AbortWhileRunningDeletesThePod", func(t *testing.T) {
		t.Parallel()
		name := create(t, s, api.WorkflowSpec{Steps: []api.Step{kubeStep("long", map[string]string{"KWOK_RUN_TIME": "1h"})}})
		at := kubeAttempt(t, s, name, "long", api.TaskStateRUNNING)
		require.NotNil(t, k.pod(at.Id))
		abortRun(t, s, name, "enough")
		waitOutcome(t, s, name, 30*time.Second, store.AbortDelivered)
		require.Equal(t, api.PhaseABORTED, getRun(t, s, name).Phase)
		s.Eventually(10*time.Second, "the Pod deleted", func() bool { return k.pod(at.Id) == nil })
	})

	t.Run("PodDeletedByHandFailsTheAttempt", func(t *testing.T) {
		t.Parallel()
		name := create(t, s, api.WorkflowSpec{Steps: []api.Step{kubeStep("gone", map[string]string{"KWOK_RUN_TIME": "1h"})}})
		at := kubeAttempt(t, s, name, "gone", api.TaskStateRUNNING)
		require.NoError(t, k.client.CoreV1().Pods(k.ns).Delete(context.Background(), "capstan-"+strconv.FormatInt(at.Id, 10),
			metav1.DeleteOptions{}))
		run := waitPhase(t, s, name, 30*time.Second, api.PhaseFAILED)
		got := action(run, "gone").Tasks[0].Attempts[0]
		require.Equal(t, "PodDeleted", *got.Code)
		require.Contains(t, *got.Error, "deleted")
		require.Contains(t, logs(t, s, name, "gone", 0, 1), "hello from kwok", "its last logs recorded before the finalizer went")
		s.Eventually(10*time.Second, "the Pod gone", func() bool { return k.pod(at.Id) == nil })
	})

	t.Run("AbortOfAGonePodIsDelivered", func(t *testing.T) {
		t.Parallel()
		name := create(t, s, api.WorkflowSpec{Steps: []api.Step{kubeStep("vanish", map[string]string{"KWOK_RUN_TIME": "1h"})}})
		at := kubeAttempt(t, s, name, "vanish", api.TaskStateRUNNING)
		pod := k.pod(at.Id)
		pod.Finalizers = nil // gone at once, as if a previous abort had removed it
		_, err := k.client.CoreV1().Pods(k.ns).Update(context.Background(), pod, metav1.UpdateOptions{})
		require.NoError(t, err)
		abortRun(t, s, name, "enough")
		require.NoError(t, k.client.CoreV1().Pods(k.ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}))
		run := waitOutcome(t, s, name, 30*time.Second, store.AbortDelivered)
		require.Equal(t, api.PhaseABORTED, run.Phase)
	})

	t.Run("Unschedulable", func(t *testing.T) {
		t.Parallel()
		step := kubeStep("nowhere", nil)
		step.Kubernetes.NodeSelector = &map[string]string{"zone": "nowhere"}
		name := create(t, s, api.WorkflowSpec{Steps: []api.Step{step}})
		var reason string
		s.Eventually(30*time.Second, "the scheduler's message as the pending reason", func() bool {
			tasks := action(getRun(t, s, name), "nowhere").Tasks
			if len(tasks) == 0 || tasks[0].PendingReason == nil {
				return false
			}
			reason = *tasks[0].PendingReason
			return true
		})
		require.Contains(t, reason, "0/1 nodes are available")
		abortRun(t, s, name, "enough")
		waitOutcome(t, s, name, 30*time.Second, store.AbortDelivered)
	})

	t.Cleanup(func() {
		if !t.Failed() {
			k.awaitNoPods(s, 30*time.Second)
		}
	})
}

// TestKubernetesExecutorKilled kills -9 a kubernetes executor with running
// Pods. Restarted at once, it re-adopts them: each attempt runs and counts
// once, its log holds each line of its Pod's once, and it ends as its Pod
// does. Killed again and restarted only once
// the control plane declared it dead, its attempts are WORKER_FAILED and
// retried; the sweep deletes their Pods within a sweep period. No Pod is
// left at the end.
func TestKubernetesExecutorKilled(t *testing.T) {
	t.Parallel()
	k := newKubeNS(t)
	s := Start(t, bins, Options{Executors: 1, Env: []string{"CAPSTAN_WORKER_GRACE=5s"},
		ExecutorEnv: func(int) []string { return k.executorEnv() }})

	short := create(t, s, api.WorkflowSpec{Steps: []api.Step{kubeStep("short", map[string]string{"KWOK_RUN_TIME": "6s"})}})
	long := create(t, s, api.WorkflowSpec{Steps: []api.Step{kubeStep("long", map[string]string{"KWOK_RUN_TIME": "1h"})}})
	shortAt := kubeAttempt(t, s, short, "short", api.TaskStateRUNNING)
	longAt := kubeAttempt(t, s, long, "long", api.TaskStateRUNNING)
	podLog := []string{"hello from kwok\n", "warning from kwok\n"} // every Pod's log (scripts/kube-deps.sh)
	s.Eventually(10*time.Second, "the short Pod's log shipped", func() bool {
		return strings.HasSuffix(logs(t, s, short, "short", 0, 1), podLog[1])
	})

	s.Kill("executor-1")
	s.StartExecutor(1)
	run := waitPhase(t, s, short, 60*time.Second, api.PhaseSUCCEEDED)
	require.Len(t, action(run, "short").Tasks[0].Attempts, 1, "re-adopted: one attempt, counted once")
	require.Equal(t, shortAt.Id, action(run, "short").Tasks[0].Attempts[0].Id)
	require.Equal(t, strings.Join(podLog, ""), logs(t, s, short, "short", 0, 1),
		"the re-adopted Pod's log shipped from where the api's ends: each line once")
	s.Eventually(10*time.Second, "the short Pod removed", func() bool { return k.pod(shortAt.Id) == nil })
	require.Equal(t, api.TaskStateRUNNING, kubeAttempt(t, s, long, "long", api.TaskStateRUNNING).State)

	s.Kill("executor-1")
	kubeAttempt(t, s, long, "long", api.TaskStateWORKERFAILED) // the killed executor declared dead
	require.NotNil(t, k.pod(longAt.Id), "its Pod outlived the executor")
	s.StartExecutor(1)
	start := time.Now()
	s.Eventually(1*time.Second+5*time.Second+10*time.Second, "the orphan Pod deleted by the sweep", func() bool {
		return k.pod(longAt.Id) == nil
	})
	t.Logf("orphan Pod deleted %s after the executor started", time.Since(start))
	retried := kubeAttempt(t, s, long, "long", api.TaskStateRUNNING)
	require.NotEqual(t, longAt.Id, retried.Id, "the lost attempt is retried")
	run = getRun(t, s, long)
	require.Equal(t, api.TaskStateWORKERFAILED, action(run, "long").Tasks[0].Attempts[0].State)

	abortRun(t, s, long, "enough")
	waitOutcome(t, s, long, 30*time.Second, store.AbortDelivered)
	k.awaitNoPods(s, 30*time.Second)
}
