package plugin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Labels, annotations and the finalizer Capstan puts on the Pods of the
// kubernetes plugin.
const (
	// LabelManaged marks every Pod the plugin creates ("true"); the informers
	// and the orphan sweep see only those.
	LabelManaged = "capstan.run/managed"
	// LabelAttempt is the attempt's id: the Pod's owner.
	LabelAttempt = "capstan.run/attempt"
	// LabelProject, LabelDomain, LabelRun, LabelAction and LabelTask name
	// the attempt's task (its index within its step).
	LabelProject = "capstan.run/project"
	LabelDomain  = "capstan.run/domain"
	LabelRun     = "capstan.run/run"
	LabelAction  = "capstan.run/action"
	LabelTask    = "capstan.run/task"
	// Finalizer keeps a Pod in the API until Capstan recorded its final
	// state and its last logs (Flyte's Finalize), however it was deleted.
	Finalizer = "capstan.run/attempt"
	// PodContainer is the Pod's one container.
	PodContainer = "main"
)

// Error codes of the kubernetes plugin's failures.
const (
	CodeImagePullBackOff  = "ImagePullBackOff"
	CodeOOMKilled         = "OOMKilled"
	CodePodDeleted        = "PodDeleted"
	CodePodLost           = "PodLost"
	CodeKubernetesError   = "KubernetesError"
	CodeInvalidImage      = "InvalidImageName"
	CodeInvalidOutputs    = "InvalidOutputs"
	CodeCreateContainer   = "CreateContainerError"
	CodeTerminationFailed = "PodNotTerminated"
)

// MaxTerminationMessage is Kubernetes' bound on a container's termination
// message (/dev/termination-log): the kubelet keeps its first 4 KiB, so
// outputs written there must fit.
const MaxTerminationMessage = 4096

// Defaults of KubernetesConfig.
const (
	DefaultImagePullGrace = 5 * time.Minute
	DefaultPodSweep       = 30 * time.Second
	DefaultNamespace      = "default"
	// logWait bounds the final read of an ended container's log.
	logWait = 5 * time.Second
	// terminateWait bounds, beyond the kill grace, how long Abort waits for
	// a deleted Pod's containers to stop.
	terminateWait = 30 * time.Second
)

// KubernetesConfig configures the kubernetes plugin.
type KubernetesConfig struct {
	// Client talks to the API server. Required.
	Client kubernetes.Interface
	// Namespace holds the Pods of steps that name none. Default "default".
	Namespace string
	// ImagePullGrace is how long a Pod's image may fail to pull
	// (ErrImagePull, ImagePullBackOff) before the attempt fails with
	// ImagePullBackOff. Default DefaultImagePullGrace.
	ImagePullGrace time.Duration
	// ServiceAccount is the Pods' service account when the step names none;
	// empty: the namespace's default.
	ServiceAccount string
	// ServiceAccounts lists the other service accounts a step may name.
	// Default none: a step that names one not listed (the executor's own,
	// which may create Pods, above all) fails with InvalidPluginSpec.
	ServiceAccounts []string
}

// Kubernetes is the kubernetes plugin: one Pod per attempt, named
// PodName(id), labelled with the attempt's task and LabelManaged, holding
// Finalizer, created with client-go and observed through one shared
// informer per namespace (no polling per attempt). Pending without a node
// waits, the scheduler's message as its reason; Pending on a node is
// BUILDING; Running is RUNNING; Succeeded is SUCCEEDED; Failed is FAILED
// with the container's exit code (OOMKilled its own code). An image that
// cannot be pulled for ImagePullGrace fails the attempt (ImagePullBackOff);
// a Pod evicted or lost with its node is a lost attempt (PhaseLost); a Pod
// deleted by someone else fails it (PodDeleted). Logs are followed from the
// Pod log API; outputs are the container's termination message, a JSON
// object of at most MaxTerminationMessage bytes.
type Kubernetes struct {
	cfg     KubernetesConfig
	watches *podWatches
}

var _ Plugin = (*Kubernetes)(nil)

// NewKubernetes returns the kubernetes plugin; its informers start with
// the first attempt of each namespace and stop with ctx. Errors: no client.
func NewKubernetes(ctx context.Context, cfg KubernetesConfig) (*Kubernetes, error) {
	if cfg.Client == nil {
		return nil, errors.New("kubernetes plugin: a client is required")
	}
	cfg.Namespace = cmp.Or(cfg.Namespace, DefaultNamespace)
	cfg.ImagePullGrace = cmp.Or(cfg.ImagePullGrace, DefaultImagePullGrace)
	return &Kubernetes{cfg: cfg, watches: newPodWatches(ctx, cfg.Client)}, nil
}

// Wait returns once the plugin stopped: its context ended and its
// informers are down.
func (k *Kubernetes) Wait() { k.watches.shutdown() }

// PodName is the Pod of attempt id: capstan-<id>.
func PodName(id int64) string { return "capstan-" + strconv.FormatInt(id, 10) }

// podState is an attempt's Pod as its plugin tracks it.
type podState struct {
	namespace, name string
	// seen: the informer has shown the Pod at least once.
	seen bool
	// pullFailingSince is when its image was first seen failing to pull.
	pullFailingSince time.Time
	// pending is the last reason reported for a Pod without a node.
	pending string
	logs    *podLogs
	// final, once set, is the Pod's end as Abort collected it.
	final *Transition
}

// namespaceOf is the namespace of t's Pod.
func (k *Kubernetes) namespaceOf(t *Task) string {
	if s := t.Spec.Kubernetes; s != nil && s.Namespace != "" {
		return s.Namespace
	}
	return k.cfg.Namespace
}

// Handle creates the attempt's Pod (a Pod of that name already there is
// the attempt's own: it is taken as created), then observes it until it
// runs or ends: it answers PhaseRunning once the Pod runs, and on later
// calls waits until it ends or ctx ends.
func (k *Kubernetes) Handle(ctx context.Context, t *Task) (Transition, error) {
	st, ok := t.State.(*podState)
	if !ok {
		if t.Spec.Kubernetes == nil {
			return Transition{}, errors.New("kubernetes plugin without a kubernetes spec")
		}
		pod, err := k.PodFor(t)
		if err != nil {
			return Transition{Phase: PhasePermanentFailure, Code: CodeInvalidPluginSpec, Err: err.Error()}, nil
		}
		st = &podState{namespace: pod.Namespace, name: pod.Name}
		k.watches.ensure(st.namespace)
		_, err = k.cfg.Client.CoreV1().Pods(st.namespace).Create(ctx, pod, metav1.CreateOptions{})
		switch {
		case apierrors.IsAlreadyExists(err):
		case apierrors.IsInvalid(err) || apierrors.IsForbidden(err) && !isQuota(err):
			return Transition{Phase: PhasePermanentFailure, Code: CodeInvalidPluginSpec,
				Err: "the API server refused the Pod: " + err.Error()}, nil
		case err != nil:
			return Transition{}, &SystemError{Code: CodeKubernetesError, Err: fmt.Errorf("create Pod %s/%s: %w", st.namespace, st.name, err)}
		}
		st.logs = newPodLogs(t.LogLimit, t.LogSkip, t.OnOutput)
		t.State = st
		return k.observe(ctx, t, st, true)
	}
	if st.final != nil {
		return *st.final, nil
	}
	return k.observe(ctx, t, st, false)
}

func isQuota(err error) bool { return strings.Contains(err.Error(), "exceeded quota") }

// observe waits for the Pod's next state of note: its end, or (first) its
// running. It answers PhaseRunning when ctx ends first.
func (k *Kubernetes) observe(ctx context.Context, t *Task, st *podState, first bool) (Transition, error) {
	w := k.watches.watch(st.namespace, st.name)
	defer k.watches.unwatch(st.namespace, st.name, w)
	for {
		pod, err := k.watches.get(st.namespace, st.name)
		if err != nil {
			return Transition{}, &SystemError{Code: CodeKubernetesError, Err: err}
		}
		tr, wake, done := k.decide(ctx, t, st, pod)
		if done || first && tr.Phase == PhaseRunning && pod != nil && pod.Status.Phase == corev1.PodRunning {
			return tr, nil
		}
		var timer <-chan time.Time
		if wake > 0 {
			tm := time.NewTimer(wake)
			defer tm.Stop()
			timer = tm.C
		}
		select {
		case <-ctx.Done():
			return Transition{Phase: PhaseRunning}, nil
		case <-w:
		case <-timer:
		}
	}
}

// decide maps the Pod as the informer shows it (nil: not there) to a
// transition; done says the transition is final; wake, when not 0, is how
// soon to look again without news (the image-pull grace's end).
func (k *Kubernetes) decide(ctx context.Context, t *Task, st *podState, pod *corev1.Pod) (tr Transition, wake time.Duration, done bool) {
	if pod == nil {
		if !st.seen {
			return Transition{Phase: PhaseRunning}, 0, false // created, not yet in the informer's cache
		}
		return k.ended(ctx, t, st, nil, Transition{Phase: PhaseRetryableFailure, Code: CodePodDeleted,
			Err: fmt.Sprintf("Pod %s/%s was removed from the API before its container ended", st.namespace, st.name)}), 0, true
	}
	st.seen = true
	cs := mainStatus(pod)
	if lost, why := podLost(pod); lost {
		return k.ended(ctx, t, st, pod, Transition{Phase: PhaseLost, Code: CodePodLost, Err: why}), 0, true
	}
	switch pod.Status.Phase {
	case corev1.PodSucceeded:
		return k.ended(ctx, t, st, pod, k.succeeded(t, cs)), 0, true
	case corev1.PodFailed:
		return k.ended(ctx, t, st, pod, failedTransition(pod, cs)), 0, true
	}
	if pod.DeletionTimestamp != nil {
		return k.ended(ctx, t, st, pod, Transition{Phase: PhaseRetryableFailure, Code: CodePodDeleted,
			Err: fmt.Sprintf("Pod %s/%s was deleted before its container ended", st.namespace, st.name)}), 0, true
	}
	if pod.Status.Phase == corev1.PodRunning {
		st.logs.follow(k.watches.ctx, k.cfg.Client, st.namespace, st.name)
		return Transition{Phase: PhaseRunning}, 0, false
	}
	// Pending.
	if pod.Spec.NodeName == "" {
		if reason := unschedulable(pod); reason != "" && reason != st.pending {
			st.pending = reason
			if t.OnPending != nil {
				t.OnPending(reason)
			}
		}
		return Transition{Phase: PhaseRunning}, 0, false
	}
	if cs != nil && cs.State.Waiting != nil {
		switch w := cs.State.Waiting; w.Reason {
		case "ErrImagePull", "ImagePullBackOff":
			now := time.Now()
			if st.pullFailingSince.IsZero() {
				st.pullFailingSince = now
			}
			if left := k.cfg.ImagePullGrace - now.Sub(st.pullFailingSince); left > 0 {
				return Transition{Phase: PhaseRunning}, left, false
			}
			return k.ended(ctx, t, st, pod, Transition{Phase: PhaseRetryableFailure, Code: CodeImagePullBackOff,
				Err: fmt.Sprintf("image %q could not be pulled for %s: %s: %s", containerImage(pod), k.cfg.ImagePullGrace,
					w.Reason, w.Message)}), 0, true
		case "InvalidImageName":
			return k.ended(ctx, t, st, pod, Transition{Phase: PhasePermanentFailure, Code: CodeInvalidImage,
				Err: fmt.Sprintf("image %q: %s", containerImage(pod), w.Message)}), 0, true
		case "CreateContainerConfigError", "CreateContainerError":
			return k.ended(ctx, t, st, pod, Transition{Phase: PhaseRetryableFailure, Code: CodeCreateContainer,
				Err: w.Reason + ": " + w.Message}), 0, true
		default:
			st.pullFailingSince = time.Time{}
		}
	}
	return Transition{Phase: PhaseRunning}, 0, false
}

// ended completes a final transition with the container's exit code (when
// it ran) and the Pod's logs.
func (k *Kubernetes) ended(ctx context.Context, t *Task, st *podState, pod *corev1.Pod, tr Transition) Transition {
	if cs := mainStatus(pod); cs != nil && cs.State.Terminated != nil {
		code := int(cs.State.Terminated.ExitCode)
		tr.ExitCode = &code
	}
	if pod != nil {
		tr.Stdout, tr.Truncated = st.logs.collect(ctx, k.cfg.Client, st.namespace, st.name)
	}
	return tr
}

// succeeded is a Succeeded Pod's transition: its outputs are the
// termination message's JSON object (when the step declares outputs).
func (k *Kubernetes) succeeded(t *Task, cs *corev1.ContainerStatus) Transition {
	tr := Transition{Phase: PhaseSuccess}
	if len(t.Outputs) == 0 {
		return tr
	}
	msg := ""
	if cs != nil && cs.State.Terminated != nil {
		msg = cs.State.Terminated.Message
	}
	outs, err := terminationOutputs(msg, t.Outputs)
	if err != nil {
		return Transition{Phase: PhaseRetryableFailure, Code: CodeInvalidOutputs, Err: err.Error()}
	}
	tr.Outputs = outs
	return tr
}

// terminationOutputs reads the declared outputs names from a termination
// message: a JSON object, output name → value (a string, or any JSON value
// taken as its JSON text), of at most MaxTerminationMessage bytes.
// Errors: a message too long (the kubelet would have cut it), not such an
// object, or without a declared output.
func terminationOutputs(msg string, names []string) (map[string]string, error) {
	if len(msg) > MaxTerminationMessage {
		return nil, fmt.Errorf("the termination message is %d bytes; outputs written to /dev/termination-log must fit in %d (Kubernetes keeps no more)",
			len(msg), MaxTerminationMessage)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(msg), &raw); err != nil || raw == nil {
		return nil, fmt.Errorf("the termination message must be a JSON object of the outputs (name → value) written to /dev/termination-log; got %q",
			clipString(msg, 200))
	}
	outs := make(map[string]string, len(names))
	var missing []string
	for _, n := range names {
		v, ok := raw[n]
		if !ok {
			missing = append(missing, n)
			continue
		}
		var s string
		if json.Unmarshal(v, &s) != nil {
			s = string(v)
		}
		outs[n] = s
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("outputs not in the termination message: %s", strings.Join(missing, ", "))
	}
	return outs, nil
}

// failedTransition is a Failed Pod's: OOMKilled, or a non-zero exit.
func failedTransition(pod *corev1.Pod, cs *corev1.ContainerStatus) Transition {
	if cs != nil && cs.State.Terminated != nil {
		term := cs.State.Terminated
		if term.Reason == "OOMKilled" {
			return Transition{Phase: PhaseRetryableFailure, Code: CodeOOMKilled,
				Err: fmt.Sprintf("the container was killed for using more memory than its limit (OOMKilled, exit status %d)", term.ExitCode)}
		}
		msg := fmt.Sprintf("exit status %d", term.ExitCode)
		if term.Reason != "" && term.Reason != "Error" {
			msg += " (" + term.Reason + ")"
		}
		return Transition{Phase: PhaseRetryableFailure, Code: CodeNonZeroExit, Err: msg}
	}
	return Transition{Phase: PhaseRetryableFailure, Code: CodeNonZeroExit,
		Err: cmp.Or(strings.TrimSpace(pod.Status.Reason+": "+pod.Status.Message), "the Pod failed")}
}

// podLost reports whether the Pod was evicted, preempted or lost with its
// node (a DisruptionTarget condition, or phase Failed with reason Evicted).
func podLost(pod *corev1.Pod) (bool, string) {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return true, fmt.Sprintf("Pod %s/%s was disrupted (%s): %s", pod.Namespace, pod.Name, c.Reason, c.Message)
		}
	}
	if pod.Status.Phase == corev1.PodFailed && pod.Status.Reason == "Evicted" {
		return true, fmt.Sprintf("Pod %s/%s was evicted: %s", pod.Namespace, pod.Name, pod.Status.Message)
	}
	return false, ""
}

// unschedulable is the scheduler's message on a Pod it could not place.
func unschedulable(pod *corev1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
			return c.Message
		}
	}
	return ""
}

func mainStatus(pod *corev1.Pod) *corev1.ContainerStatus {
	if pod == nil {
		return nil
	}
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == PodContainer {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

func containerImage(pod *corev1.Pod) string {
	if len(pod.Spec.Containers) == 0 {
		return ""
	}
	return pod.Spec.Containers[0].Image
}

// Abort deletes the Pod with the kill grace as its grace period (at least
// 1s: 0 would remove it before its containers stop), then waits until its
// containers stopped and collects its end and logs. A Pod not found is
// already terminated. Errors: the API's, or a Pod still terminating after
// the grace and terminateWait (the caller retries).
func (k *Kubernetes) Abort(ctx context.Context, t *Task) error {
	st, ok := t.State.(*podState)
	if !ok || st.final != nil {
		return nil
	}
	grace := max(int64(1), int64(math.Ceil(t.KillGrace.Seconds())))
	err := k.cfg.Client.CoreV1().Pods(st.namespace).Delete(ctx, st.name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if apierrors.IsNotFound(err) {
		final := Transition{Phase: PhaseRetryableFailure, Code: CodePodDeleted, Err: "the Pod was already gone"}
		st.final = &final
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete Pod %s/%s: %w", st.namespace, st.name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, t.KillGrace+terminateWait)
	defer cancel()
	w := k.watches.watch(st.namespace, st.name)
	defer k.watches.unwatch(st.namespace, st.name, w)
	for {
		pod, err := k.watches.get(st.namespace, st.name)
		if err != nil {
			return err
		}
		if pod == nil || stopped(pod) {
			tr := Transition{Phase: PhaseRetryableFailure, Code: CodePodDeleted, Err: "the Pod was deleted"}
			if pod != nil && pod.Status.Phase == corev1.PodSucceeded {
				tr = k.succeeded(t, mainStatus(pod))
			} else if pod != nil && pod.Status.Phase == corev1.PodFailed {
				tr = failedTransition(pod, mainStatus(pod))
			}
			tr = k.ended(ctx, t, st, pod, tr)
			st.final = &tr
			return nil
		}
		select {
		case <-ctx.Done():
			return &SystemError{Code: CodeTerminationFailed, Err: fmt.Errorf("pod %s/%s still terminating: %w", st.namespace, st.name, ctx.Err())}
		case <-w:
		}
	}
}

// stopped reports whether a Pod's containers no longer run: it ended, its
// containers all terminated, or its deletion was completed by its node (a
// grace period of 0 left).
func stopped(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return true
	}
	if pod.DeletionTimestamp != nil && pod.DeletionGracePeriodSeconds != nil && *pod.DeletionGracePeriodSeconds == 0 {
		return true
	}
	if pod.Spec.NodeName == "" {
		return pod.DeletionTimestamp != nil
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Terminated == nil {
			return false
		}
	}
	return len(pod.Status.ContainerStatuses) > 0
}

// Finalize deletes the attempt's Pod (when it is not being deleted yet)
// and then removes Finalizer from it, so the API server lets it go: its
// final state and logs are in the transition Handle or Abort returned. A
// Pod not found is done.
func (k *Kubernetes) Finalize(ctx context.Context, t *Task) error {
	ns, name := k.namespaceOf(t), PodName(t.ID)
	if st, ok := t.State.(*podState); ok {
		ns, name = st.namespace, st.name
		st.logs.stop()
	}
	return RemovePod(ctx, k.cfg.Client, ns, name, t.KillGrace)
}

// RemovePod removes Finalizer from a Pod of the plugin and then deletes it
// unless it is being deleted already: two requests, neither a read nor a
// conflict (the finalizer goes by a strategic merge patch, which needs no
// resourceVersion). A Pod that ended (Succeeded, Failed) is deleted at
// once (grace 0: no container is left for its node to stop, so the API
// server removes it without waiting for the node); any other with grace,
// its containers' stop grace, at least 1s. Not found is success. Errors:
// the API's.
func RemovePod(ctx context.Context, c kubernetes.Interface, ns, name string, grace time.Duration) error {
	pods := c.CoreV1().Pods(ns)
	pod, err := pods.Patch(ctx, name, types.StrategicMergePatchType, dropFinalizer, metav1.PatchOptions{})
	if err == nil && pod.DeletionTimestamp == nil {
		secs := max(int64(1), int64(math.Ceil(grace.Seconds())))
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			secs = 0
		}
		err = pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &secs})
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove Pod %s/%s: %w", ns, name, err)
	}
	return nil
}

// dropFinalizer is the strategic merge patch that removes Finalizer from a
// Pod's finalizers (a list merged as a set), whatever else it holds.
var dropFinalizer = []byte(`{"metadata":{"$deleteFromPrimitiveList/finalizers":["` + Finalizer + `"]}}`)

// attemptEnvSkipped are the attempt variables that name the executor's own
// directories: a Pod has none of them.
var attemptEnvSkipped = []string{"CAPSTAN_RUN_DIR", "CAPSTAN_WORK_DIR", "CAPSTAN_OUTPUTS_DIR", "CAPSTAN_INPUTS_DIR"}

// PodFor returns the Pod of attempt t: its spec's image, command, args,
// env (the attempt's variables, then the spec's own, which never override
// CAPSTAN_*), resources, node selector, tolerations and service account,
// restart policy Never, the termination message from /dev/termination-log,
// labelled and finalized as the plugin's. Errors: a resource quantity that
// does not parse.
func (k *Kubernetes) PodFor(t *Task) (*corev1.Pod, error) {
	spec := t.Spec.Kubernetes
	if sa := spec.ServiceAccount; sa != "" && sa != k.cfg.ServiceAccount && !slices.Contains(k.cfg.ServiceAccounts, sa) {
		return nil, fmt.Errorf("kubernetes.service_account: %q is not one this executor's Pods may run as (CAPSTAN_KUBERNETES_SERVICE_ACCOUNTS)", sa)
	}
	env := map[string]string{}
	for _, kv := range t.AttemptEnv {
		name, value, _ := strings.Cut(kv, "=")
		if !slices.Contains(attemptEnvSkipped, name) {
			env[name] = value
		}
	}
	for name, value := range spec.Env {
		if !strings.HasPrefix(name, "CAPSTAN_") {
			env[name] = value
		}
	}
	envList := make([]corev1.EnvVar, 0, len(env))
	for _, name := range slices.Sorted(maps.Keys(env)) {
		envList = append(envList, corev1.EnvVar{Name: name, Value: env[name]})
	}
	labels := map[string]string{LabelManaged: "true", LabelAttempt: strconv.FormatInt(t.ID, 10)}
	for label, variable := range map[string]string{LabelProject: "CAPSTAN_PROJECT", LabelDomain: "CAPSTAN_DOMAIN",
		LabelRun: "CAPSTAN_RUN", LabelAction: "CAPSTAN_ACTION", LabelTask: "CAPSTAN_TASK_INDEX"} {
		if v := env[variable]; v != "" && len(v) <= 63 {
			labels[label] = v
		}
	}
	c := corev1.Container{Name: PodContainer, Image: spec.Image, Command: spec.Command, Args: spec.Args, Env: envList,
		TerminationMessagePath: corev1.TerminationMessagePathDefault, TerminationMessagePolicy: corev1.TerminationMessageReadFile}
	if r := spec.Resources; r != nil {
		var err error
		if c.Resources.Requests, err = resourceList("requests", r.Requests); err != nil {
			return nil, err
		}
		if c.Resources.Limits, err = resourceList("limits", r.Limits); err != nil {
			return nil, err
		}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: PodName(t.ID), Namespace: k.namespaceOf(t), Labels: labels,
			Finalizers: []string{Finalizer}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{c},
			NodeSelector: spec.NodeSelector, ServiceAccountName: cmp.Or(spec.ServiceAccount, k.cfg.ServiceAccount)},
	}
	if grace := int64(math.Ceil(t.KillGrace.Seconds())); grace > 0 {
		pod.Spec.TerminationGracePeriodSeconds = &grace
	}
	for _, tol := range spec.Tolerations {
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Key: tol.Key,
			Operator: corev1.TolerationOperator(tol.Operator), Value: tol.Value, Effect: corev1.TaintEffect(tol.Effect),
			TolerationSeconds: tol.TolerationSeconds})
	}
	return pod, nil
}

func resourceList(field string, m map[string]string) (corev1.ResourceList, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := corev1.ResourceList{}
	for name, q := range m {
		v, err := resource.ParseQuantity(q)
		if err != nil {
			return nil, fmt.Errorf("kubernetes.resources.%s.%s: %q: %w", field, name, q, err)
		}
		out[corev1.ResourceName(name)] = v
	}
	return out, nil
}

func clipString(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// podLogs follows a Pod's log, hands it to onOutput but for its first
// skip bytes as shipped, and keeps its last bytes.
type podLogs struct {
	limit    int
	onOutput func(stream string, p []byte)

	mu sync.Mutex
	// total counts the bytes read so far, buf keeps their last limit.
	total     int64
	buf       []byte
	truncated bool
	started   bool
	done      chan struct{}
	cancel    context.CancelFunc
	// skip is how many bytes, as shipped (shippedPrefix), are still kept
	// from onOutput; held is the start of a rune cut by a read while
	// skipping.
	skip int64
	held []byte
}

func newPodLogs(limit int, skip int64, onOutput func(string, []byte)) *podLogs {
	return &podLogs{limit: limit, skip: skip, onOutput: onOutput}
}

func (l *podLogs) write(p []byte) {
	if out := l.unshipped(p); l.onOutput != nil && len(out) > 0 {
		l.onOutput("stdout", out)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total += int64(len(p))
	l.buf = append(l.buf, p...)
	if l.limit > 0 && len(l.buf) > l.limit {
		l.buf = append([]byte(nil), l.buf[len(l.buf)-l.limit:]...)
		l.truncated = true
	}
}

// unshipped is what of p the control plane does not hold yet: p less
// what is left of the skip.
func (l *podLogs) unshipped(p []byte) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.skip <= 0 {
		return p
	}
	b := append(l.held, p...)
	cut, left := shippedPrefix(b, l.skip)
	l.skip, l.held = left, nil
	if left > 0 {
		l.held = slices.Clone(b[cut:])
		return nil
	}
	return b[cut:]
}

// shippedPrefix returns the length of the start of b that the supervisor
// ships as skip bytes (its logText: a run of invalid UTF-8 as one U+FFFD,
// NUL dropped), at most all of b but for a rune b cuts, and the skip left
// past it. The count is exact but where the previous shipper cut a run of
// invalid bytes between two writes (two U+FFFD), where it shipped a marker
// of output it dropped (its bytes counted, none of the Pod's log), and
// where the api masked a secret value (SecretMask's length counted, not
// the value's): there the skip falls a few bytes off, and a line at the
// cut is shipped twice or partly lost.
func shippedPrefix(b []byte, skip int64) (int, int64) {
	cut := 0
	for cut < len(b) && skip > 0 && utf8.FullRune(b[cut:]) {
		switch r, n := utf8.DecodeRune(b[cut:]); {
		case r == utf8.RuneError && n == 1:
			for cut < len(b) && invalidAt(b[cut:]) {
				cut++
			}
			skip -= int64(utf8.RuneLen(utf8.RuneError))
		case r == 0:
			cut++
		default:
			cut += n
			skip -= int64(n)
		}
	}
	return cut, max(skip, 0)
}

// invalidAt reports whether b starts with a byte that is no UTF-8
// encoding (a rune b cuts is not).
func invalidAt(b []byte) bool {
	r, n := utf8.DecodeRune(b)
	return r == utf8.RuneError && n == 1 && utf8.FullRune(b)
}

// follow starts following the Pod's log once (the Pod log API with
// follow), in the background, until the container's log ends, stop is
// called or parent ends.
func (l *podLogs) follow(parent context.Context, c kubernetes.Interface, ns, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		return
	}
	l.started = true
	ctx, cancel := context.WithCancel(parent)
	l.done, l.cancel = make(chan struct{}), cancel
	go func() {
		defer close(l.done)
		l.read(ctx, c, ns, name, true, 0)
	}()
}

// read copies the Pod's log (followed or not) into the buffer, but for
// its first skip bytes (those a follow read already copied).
func (l *podLogs) read(ctx context.Context, c kubernetes.Interface, ns, name string, follow bool, skip int64) {
	rc, err := c.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Container: PodContainer, Follow: follow}).Stream(ctx)
	if err != nil {
		return
	}
	defer rc.Close()
	p := make([]byte, 32<<10)
	for {
		n, err := rc.Read(p)
		b := p[:n]
		if skip > 0 {
			cut := min(skip, int64(n))
			b, skip = b[cut:], skip-cut
		}
		if len(b) > 0 {
			l.write(slices.Clone(b))
		}
		if err != nil {
			return
		}
	}
}

// stop ends the following of the log, if any, and waits for its end.
func (l *podLogs) stop() {
	l.mu.Lock()
	l.started = true // no follow after the stop
	done, cancel := l.done, l.cancel
	l.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// collect returns the log once its container ended: the follow (if any)
// is stopped, and one read of the whole log (within logWait) adds what it
// had not copied yet. A follow stream need not end by itself when the
// container does.
func (l *podLogs) collect(ctx context.Context, c kubernetes.Interface, ns, name string) ([]byte, bool) {
	l.stop()
	l.mu.Lock()
	copied := l.total
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, logWait)
	l.read(ctx, c, ns, name, false, copied)
	cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.buf), l.truncated
}
