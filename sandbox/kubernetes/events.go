package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// What the kubelet and the scheduler cannot do for a Pod they report as
// Warning Events on it, not in its status: a sandbox the container runtime
// cannot create (FailedCreatePodSandBox: a RuntimeClass handler the node
// lacks, a CNI failure), a volume it cannot mount (FailedMount), a Pod no
// node fits (FailedScheduling). The runtime watches the Warning Events of
// its namespace's Pods and keeps the last one of each Pod a Start waits
// on: a terminal one ends the start at once, and a start that reaches its
// deadline names the last one (decision 0048).

// podEvent is the last Warning Event of a Pod a Start waits on.
type podEvent struct {
	uid             types.UID
	reason, message string
	count           int32
}

func (e podEvent) String() string {
	s := e.reason + ": " + strings.TrimSpace(e.message)
	if e.count > 1 {
		s += fmt.Sprintf(" (%d times)", e.count)
	}
	return s
}

// terminal says whether the kubelet could never get past the event: it
// would only retry it with a back-off. A sandbox whose RuntimeClass handler
// the node's container runtime does not have (containerd: `no runtime for
// "runsc" is configured`; CRI-O: `failed to find runtime handler`) is one;
// a Pod asking `hostUsers: false` of a runtime without user namespaces
// (containerd 1.6: `runtime does not support user namespaces`, measured on
// a real node, 0049) is the other. A CNI failure, a mount or the
// scheduler's verdict may pass
// (a network plugin starting, a ConfigMap appearing, a node freed), so
// those are named when the start's deadline comes.
func (e podEvent) terminal() bool {
	if e.reason != "FailedCreatePodSandBox" {
		return false
	}
	m := strings.ToLower(e.message)
	return strings.Contains(m, "no runtime for") || strings.Contains(m, "runtime handler") ||
		strings.Contains(m, "does not support user namespaces")
}

// eventSelector selects the Warning Events about Pods.
const eventSelector = "type=" + corev1.EventTypeWarning + ",involvedObject.kind=Pod"

// startEvents runs an informer on the namespace's Warning Events about
// Pods, feeding the waiters of watcher w. Without the right to list them
// (a Role made before this runtime read Events) it logs why and runs
// without: starts then fail at their deadline without the kubelet's reason.
func (w *watcher) startEvents(ctx context.Context) error {
	r := w.r
	cctx, cancel := r.call(ctx)
	_, err := r.cli.CoreV1().Events(r.cfg.Namespace).List(cctx, metav1.ListOptions{FieldSelector: eventSelector, Limit: 1})
	cancel()
	if apierrors.IsForbidden(err) {
		r.log.Warn("cannot list Events: a Pod that cannot start fails at the start's deadline without the kubelet's reason; "+
			"grant events list and watch in the namespace (deploy/kubernetes/rbac.yaml)", "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = eventSelector
			return r.cli.CoreV1().Events(r.cfg.Namespace).List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = eventSelector
			return r.cli.CoreV1().Events(r.cfg.Namespace).Watch(ctx, opts)
		},
	}
	// Only the handler's copy matters: the store keeps nothing.
	store, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: cache.ToListWatcherWithWatchListSemantics(lw, r.cli),
		ObjectType:    &corev1.Event{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    w.event,
			UpdateFunc: func(_, obj any) { w.event(obj) },
		},
		Transform: func(obj any) (any, error) { // the store keeps only what the handler needs
			if ev, ok := obj.(*corev1.Event); ok {
				return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: ev.Name, Namespace: ev.Namespace, ResourceVersion: ev.ResourceVersion},
					InvolvedObject: ev.InvolvedObject, Reason: ev.Reason, Message: ev.Message, Type: ev.Type, Count: ev.Count}, nil
			}
			return obj, nil
		},
	})
	_ = store
	w.evDone = make(chan struct{})
	go func() {
		defer close(w.evDone)
		ctrl.RunWithContext(w.ctx)
	}()
	sctx, scancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer scancel()
	if !cache.WaitForCacheSync(sctx.Done(), ctrl.HasSynced) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errors.New("the first list of Events did not come within the call timeout")
	}
	return nil
}

// event keeps a Warning Event about a Pod a Start waits on, and wakes it.
func (w *watcher) event(obj any) {
	ev, ok := obj.(*corev1.Event)
	if !ok || ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.Kind != "Pod" || ev.InvolvedObject.Namespace != w.r.cfg.Namespace {
		return // the field selector's work, again: the fake clientset ignores it
	}
	name := ev.InvolvedObject.Name
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.waiters[name]) == 0 {
		return
	}
	w.events[name] = podEvent{uid: ev.InvolvedObject.UID, reason: ev.Reason, message: ev.Message, count: ev.Count}
	for ch := range w.waiters[name] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// lastEvent is the last Warning Event of the Pod name with uid, while a
// Start waits on it.
func (w *watcher) lastEvent(name string, uid types.UID) (podEvent, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ev, ok := w.events[name]
	if !ok || ev.uid != uid {
		return podEvent{}, false
	}
	return ev, true
}
