package plugin

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// informerResync is the informers' resync period: each Pod's handlers run
// again this often even without a change, a backstop for a wake-up lost.
const informerResync = time.Minute

// syncTimeout bounds the first list of a namespace's informer.
const syncTimeout = time.Minute

// podWatches holds one shared informer per namespace over the plugin's Pods
// (LabelManaged=true) and wakes the attempts that wait for news of a Pod.
type podWatches struct {
	ctx    context.Context
	client kubernetes.Interface

	mu      sync.Mutex
	listers map[string]*nsInformer
	// waiters are the channels of the attempts waiting for news of a Pod,
	// by namespace/name.
	waiters map[string]map[chan struct{}]struct{}
}

type nsInformer struct {
	factory informers.SharedInformerFactory
	lister  listersv1.PodLister
	synced  cache.InformerSynced
}

func newPodWatches(ctx context.Context, c kubernetes.Interface) *podWatches {
	return &podWatches{ctx: ctx, client: c, listers: map[string]*nsInformer{}, waiters: map[string]map[chan struct{}]struct{}{}}
}

// ensure starts the informer of namespace ns, once; it runs until the
// plugin's context ends.
func (w *podWatches) ensure(ns string) *nsInformer {
	w.mu.Lock()
	defer w.mu.Unlock()
	if inf := w.listers[ns]; inf != nil {
		return inf
	}
	f := informers.NewSharedInformerFactoryWithOptions(w.client, informerResync, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LabelManaged + "=true" }))
	pods := f.Core().V1().Pods()
	notify := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if pod, ok := obj.(*corev1.Pod); ok {
			w.wake(pod.Namespace, pod.Name)
		}
	}
	_, _ = pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: notify,
		UpdateFunc: func(_, obj any) { notify(obj) }, DeleteFunc: notify})
	inf := &nsInformer{factory: f, lister: pods.Lister(), synced: pods.Informer().HasSynced}
	w.listers[ns] = inf
	f.Start(w.ctx.Done())
	return inf
}

// shutdown waits for the informers to stop, once the plugin's context
// ended.
func (w *podWatches) shutdown() {
	<-w.ctx.Done()
	w.mu.Lock()
	infs := slices.Collect(maps.Values(w.listers))
	w.mu.Unlock()
	for _, inf := range infs {
		inf.factory.Shutdown()
	}
}

// get returns the Pod as the informer last saw it, nil when it has none,
// once the namespace's informer has synced. Errors: it did not sync within
// syncTimeout.
func (w *podWatches) get(ns, name string) (*corev1.Pod, error) {
	inf, err := w.sync(ns)
	if err != nil {
		return nil, err
	}
	pod, err := inf.lister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return pod, err
}

// sync returns the informer of namespace ns once it has synced. Errors: it
// did not sync within syncTimeout.
func (w *podWatches) sync(ns string) (*nsInformer, error) {
	inf := w.ensure(ns)
	if !inf.synced() {
		ctx, cancel := context.WithTimeout(w.ctx, syncTimeout)
		ok := cache.WaitForCacheSync(ctx.Done(), inf.synced)
		cancel()
		if !ok {
			return nil, fmt.Errorf("the Pod informer of namespace %s did not sync (can the executor list and watch its Pods?)", ns)
		}
	}
	return inf, nil
}

// list returns the plugin's Pods of namespace ns, as the informer sees them.
func (w *podWatches) list(ns string) ([]*corev1.Pod, error) {
	inf, err := w.sync(ns)
	if err != nil {
		return nil, err
	}
	return inf.lister.Pods(ns).List(labels.Everything())
}

// namespaces lists the namespaces whose informers run.
func (w *podWatches) namespaces() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(maps.Keys(w.listers))
}

// watch returns a channel that receives (without blocking the informer)
// when the Pod changes; unwatch releases it.
func (w *podWatches) watch(ns, name string) chan struct{} {
	ch := make(chan struct{}, 1)
	key := ns + "/" + name
	w.mu.Lock()
	if w.waiters[key] == nil {
		w.waiters[key] = map[chan struct{}]struct{}{}
	}
	w.waiters[key][ch] = struct{}{}
	w.mu.Unlock()
	return ch
}

func (w *podWatches) unwatch(ns, name string, ch chan struct{}) {
	key := ns + "/" + name
	w.mu.Lock()
	delete(w.waiters[key], ch)
	if len(w.waiters[key]) == 0 {
		delete(w.waiters, key)
	}
	w.mu.Unlock()
}

func (w *podWatches) wake(ns, name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.waiters[ns+"/"+name] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
