package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/sandboxd/sandboxd/sandbox"
)

// watcher is the runtime's one watch on the Pods of its scope (an
// informer: list, then watch, relisting when the watch breaks), with a
// second one on the Warning Events about Pods (events.go). It wakes
// Starts waiting for their Pod to run, and ends the agent streams of a
// session whose Pod failed or went away: the manager then inspects the
// sandbox and fails the session with the reason Inspect gives (evicted for
// its disk limit, OOM-killed, past its deadline, deleted), at once rather
// than when a health ping times out.
type watcher struct {
	r      *Runtime
	inf    cache.SharedIndexInformer
	ctx    context.Context // the informers' (stop cancels it)
	cancel context.CancelFunc
	done   chan struct{}
	evDone chan struct{} // nil without the Events informer (events.go)

	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{} // Pod name → Starts waiting on it
	events  map[string]podEvent                   // Pod name → its last Warning Event, while a Start waits on it
	streams map[string]map[*stream]struct{}       // session → its open agent streams
}

func newWatcher(r *Runtime) *watcher {
	return &watcher{r: r, waiters: map[string]map[chan struct{}]struct{}{}, events: map[string]podEvent{}, streams: map[string]map[*stream]struct{}{}}
}

// start runs the informer until stop and waits for its first list.
func (w *watcher) start(ctx context.Context) error {
	r := w.r
	sel := r.selector("")
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.LabelSelector = sel
			return r.cli.CoreV1().Pods(r.cfg.Namespace).List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = sel
			return r.cli.CoreV1().Pods(r.cfg.Namespace).Watch(ctx, opts)
		},
	}
	// The clientset says whether it speaks watch-list (fake ones do not).
	w.inf = cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, r.cli), &corev1.Pod{}, 0, cache.Indexers{})
	if _, err := w.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.changed(obj) },
		UpdateFunc: func(_, obj any) { w.changed(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			w.changed(obj)
			if pod, ok := obj.(*corev1.Pod); ok {
				w.fail(pod.Labels[sandbox.LabelSession], "its Pod was deleted")
			}
		},
	}); err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.ctx, w.cancel, w.done = rctx, cancel, make(chan struct{})
	go func() {
		defer close(w.done)
		w.inf.RunWithContext(rctx)
	}()
	sctx, scancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer scancel()
	if !cache.WaitForCacheSync(sctx.Done(), w.inf.HasSynced) {
		w.stop()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errors.New("the first list of Pods did not come within the call timeout")
	}
	if err := w.startEvents(ctx); err != nil {
		w.stop()
		return fmt.Errorf("watching the Events of Pods: %w", err)
	}
	return nil
}

// stop ends the informer and waits for it.
func (w *watcher) stop() {
	if w.cancel == nil {
		return
	}
	w.cancel()
	<-w.done
	if w.evDone != nil {
		<-w.evDone
	}
}

// changed wakes the Starts waiting on the Pod and, when it failed, ends
// its session's streams.
func (w *watcher) changed(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	w.mu.Lock()
	for ch := range w.waiters[pod.Name] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	w.mu.Unlock()
	if why := podEnded(pod); why != "" {
		w.fail(pod.Labels[sandbox.LabelSession], why)
	}
}

// fail ends the agent streams of a session whose Pod ended.
func (w *watcher) fail(session, why string) {
	if session == "" {
		return
	}
	w.mu.Lock()
	open := w.streams[session]
	delete(w.streams, session)
	w.mu.Unlock()
	for s := range open {
		w.r.log.Info("the sandbox's Pod ended; closing its agent stream", "session", session, "why", why)
		s.end()
	}
}

// wait registers a Start's interest in a Pod; the channel gets a value
// (coalesced) whenever the Pod changes. done unregisters it.
func (w *watcher) wait(name string) (ch chan struct{}, done func()) {
	ch = make(chan struct{}, 1)
	w.mu.Lock()
	if w.waiters[name] == nil {
		w.waiters[name] = map[chan struct{}]struct{}{}
	}
	w.waiters[name][ch] = struct{}{}
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		delete(w.waiters[name], ch)
		if len(w.waiters[name]) == 0 {
			delete(w.waiters, name)
			delete(w.events, name)
		}
		w.mu.Unlock()
	}
}

// cached is the informer's copy of a Pod (nil if it has none).
func (w *watcher) cached(name string) *corev1.Pod {
	obj, ok, err := w.inf.GetStore().GetByKey(w.r.cfg.Namespace + "/" + name)
	if err != nil || !ok {
		return nil
	}
	pod, _ := obj.(*corev1.Pod)
	return pod
}

// track records an open agent stream of a session, so that its Pod's end
// ends it; the stream's Close forgets it.
func (w *watcher) track(session string, rwc io.ReadWriteCloser) *stream {
	s := &stream{ReadWriteCloser: rwc, w: w, session: session}
	w.mu.Lock()
	if w.streams[session] == nil {
		w.streams[session] = map[*stream]struct{}{}
	}
	w.streams[session][s] = struct{}{}
	w.mu.Unlock()
	return s
}

// forget drops every stream of a session (Remove) and ends them.
func (w *watcher) forget(session string) { w.fail(session, "removed") }

// stream is an agent stream the watcher knows of.
type stream struct {
	io.ReadWriteCloser
	w       *watcher
	session string
	once    sync.Once
	err     error
}

// Close ends the exec and forgets the stream.
func (s *stream) Close() error {
	s.w.mu.Lock()
	delete(s.w.streams[s.session], s)
	if len(s.w.streams[s.session]) == 0 {
		delete(s.w.streams, s.session)
	}
	s.w.mu.Unlock()
	s.end()
	return s.err
}

func (s *stream) end() {
	s.once.Do(func() { s.err = s.ReadWriteCloser.Close() })
}

// podEnded says why a Pod's sandbox is over; "" while it is starting or
// running.
func podEnded(pod *corev1.Pod) string {
	switch {
	case pod.DeletionTimestamp != nil:
		return "its Pod is being deleted"
	case pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded:
		return "its Pod's phase is " + string(pod.Status.Phase)
	}
	if cs := containerStatus(pod); cs != nil && cs.State.Terminated != nil {
		return "its container terminated"
	}
	return ""
}

// containerStatus is the status of the sandbox's container (nil before
// the kubelet reports one).
func containerStatus(pod *corev1.Pod) *corev1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == ContainerName {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}
