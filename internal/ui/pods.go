package ui

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Bounds of the Pods an object's page lists and of the logs it streams.
const (
	// maxObjectPods caps the Pods listed for one workload.
	maxObjectPods = 100
	// defaultLogLines is how many of a container's last lines are shown; maxLogLines caps
	// what a request may ask.
	defaultLogLines = 500
	maxLogLines     = 5000
	// maxLogBytes caps one log request, followed or not.
	maxLogBytes = 2 << 20
	// maxLogFollow ends a followed log after this long (the page can follow again).
	maxLogFollow = 10 * time.Minute
	// maxLogStreams caps the logs one user streams at once.
	maxLogStreams = 4
)

// workloadKinds are the kinds whose Pods an object's page lists, by their selector.
var workloadKinds = map[string]bool{
	"apps/Deployment": true, "apps/StatefulSet": true, "apps/DaemonSet": true, "apps/ReplicaSet": true, "batch/Job": true,
}

// podView is one Pod of a workload: where it stands and why, and its containers' logs.
type podView struct {
	Name, Owner, Phase, Ready, Reason string
	Restarts                          int32
	Age                               timeView
	Containers                        []string
	// Bad marks a Pod that is not running well (a container waiting, failed, restarting).
	Bad bool
}

// podsOf lists the Pods of the workload live (or live itself, a Pod) with c: the Pods its
// selector matches, in its namespace, at most maxObjectPods. It returns nil and no error
// for a kind without Pods.
func podsOf(ctx context.Context, c client.Reader, live *unstructured.Unstructured) ([]corev1.Pod, error) {
	gvk := live.GroupVersionKind()
	if gvk.Group == "" && gvk.Kind == "Pod" {
		pod := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(live), pod); err != nil {
			return nil, err
		}
		return []corev1.Pod{*pod}, nil
	}
	if !workloadKinds[gvk.Group+"/"+gvk.Kind] {
		return nil, nil
	}
	raw, ok, _ := unstructured.NestedMap(live.Object, "spec", "selector")
	if !ok {
		return nil, nil
	}
	var ls metav1.LabelSelector
	if err := runtimeConvert(raw, &ls); err != nil {
		return nil, err
	}
	sel, err := metav1.LabelSelectorAsSelector(&ls)
	if err != nil || sel.Empty() {
		return nil, err // an empty selector would list every Pod of the namespace
	}
	var list corev1.PodList
	if err := c.List(ctx, &list, client.InNamespace(live.GetNamespace()), client.MatchingLabelsSelector{Selector: sel},
		client.Limit(maxObjectPods)); err != nil {
		return nil, err
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items, nil
}

// podViews describes pods for the page.
func podViews(pods []corev1.Pod, now time.Time) []podView {
	out := make([]podView, 0, len(pods))
	for _, p := range pods {
		v := podView{Name: p.Name, Phase: string(p.Status.Phase), Age: timeOf(p.CreationTimestamp.Time, now)}
		if ref := metav1.GetControllerOf(&p); ref != nil {
			v.Owner = ref.Kind + " " + ref.Name
		}
		if p.DeletionTimestamp != nil {
			v.Phase = "Terminating"
		}
		ready := 0
		for _, cs := range p.Status.ContainerStatuses {
			v.Restarts += cs.RestartCount
			if cs.Ready {
				ready++
			}
			switch {
			case cs.State.Waiting != nil && cs.State.Waiting.Reason != "":
				v.Reason, v.Bad = cs.State.Waiting.Reason, true
			case cs.State.Terminated != nil && cs.State.Terminated.ExitCode != 0:
				v.Reason, v.Bad = cs.State.Terminated.Reason, true
			case v.Reason == "" && cs.LastTerminationState.Terminated != nil:
				v.Reason = "last: " + cs.LastTerminationState.Terminated.Reason
			}
		}
		if p.Status.Phase == corev1.PodFailed || v.Restarts > 0 {
			v.Bad = true
		}
		v.Ready = fmt.Sprintf("%d/%d", ready, len(p.Spec.Containers))
		for _, c := range p.Spec.InitContainers {
			v.Containers = append(v.Containers, c.Name)
		}
		for _, c := range p.Spec.Containers {
			v.Containers = append(v.Containers, c.Name)
		}
		out = append(out, v)
	}
	return out
}

// objectPods fills the page's Pods of live, read with c as the user may: in in-cluster
// mode only when the user may list Pods there.
func (s *Server) objectPods(ctx context.Context, p *objectPage, c client.Reader, live *unstructured.Unstructured) {
	gvk := live.GroupVersionKind()
	p.Workload = workloadKinds[gvk.Group+"/"+gvk.Kind] || (gvk.Group == "" && gvk.Kind == "Pod")
	if !p.Workload {
		return
	}
	if s.opts.InCluster != nil && s.authorize(ctx, "list", "", "pods", live.GetNamespace(), "") != nil {
		p.PodsNote = "you may not list its Pods"
		return
	}
	pods, err := podsOf(ctx, c, live)
	if err != nil {
		p.PodsNote = "cannot list its Pods: " + s.explain(err)
		return
	}
	p.Pods = podViews(pods, s.opts.Now())
	if len(pods) == maxObjectPods {
		p.PodsNote = fmt.Sprintf("the first %d Pods", maxObjectPods)
	}
}

// logStreams counts the logs each user streams.
type logStreams struct {
	mu   sync.Mutex
	open map[string]int
}

func (l *logStreams) take(user string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open == nil {
		l.open = map[string]int{}
	}
	if l.open[user] >= maxLogStreams {
		return false
	}
	l.open[user]++
	return true
}

func (l *logStreams) give(user string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[user]--; l.open[user] <= 0 {
		delete(l.open, user)
	}
}

// errNoSuchPod is a Pod that is not one of the object's.
var errNoSuchPod = errors.New("no such Pod of the object")

// serveLogs streams the log of one container of one Pod of an inventory object, as text:
// ?pod=&container=, the last ?lines= lines (default 500, at most 5000), ?previous=1 for
// the container's previous run, ?follow=1 to follow it (at most 10 minutes). Bounded in
// bytes, and in streams per user. In in-cluster mode the user must be allowed to get the
// SyncTarget, to list the Pods of the object's namespace and to get pods/log there; a Pod
// that is not the object's is the same 404 whether it exists or not.
func (s *Server) serveLogs(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	pod, container, err := s.logPod(ctx, keyOf(r), r.PathValue("id"), r.URL.Query().Get("pod"), r.URL.Query().Get("container"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.authorize(ctx, "get", "", "pods/log", pod.Namespace, pod.Name); err != nil {
		s.fail(w, r, err)
		return
	}
	opts := logOptions(r.URL.Query(), container)
	user := requestUser(ctx)
	if !s.logs.take(user) {
		http.Error(w, fmt.Sprintf("at most %d logs are streamed at once per user: close one", maxLogStreams), http.StatusTooManyRequests)
		return
	}
	defer s.logs.give(user)
	cs, err := kubernetes.NewForConfig(s.opts.Config)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	sctx, cancel := context.WithTimeout(ctx, maxLogFollow)
	defer cancel()
	stream, err := cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, opts).Stream(sctx)
	if err != nil {
		http.Error(w, "cannot read the log: "+s.explain(err), http.StatusBadGateway)
		return
	}
	defer func() { _ = stream.Close() }()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	if err := copyLog(w, stream); err != nil && sctx.Err() == nil {
		_, _ = fmt.Fprintf(w, "\n[converge: the log ended: %s]\n", s.explain(err))
	}
}

// logOptions are the options of a log request: the container, the last ?lines= lines
// (default 500, at most 5000), ?previous=1, ?follow=1, at most maxLogBytes.
func logOptions(q url.Values, container string) *corev1.PodLogOptions {
	lines := int64(defaultLogLines)
	if n, err := strconv.ParseInt(q.Get("lines"), 10, 64); err == nil && n > 0 {
		lines = min(n, maxLogLines)
	}
	limit := int64(maxLogBytes)
	return &corev1.PodLogOptions{Container: container, TailLines: &lines, LimitBytes: &limit,
		Follow: q.Get("follow") == "1", Previous: q.Get("previous") == "1"}
}

// copyLog writes the stream to w as it comes, flushed, at most maxLogBytes (then it says
// so); it returns the stream's error, nil at its end.
func copyLog(w http.ResponseWriter, stream io.Reader) error {
	fl, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	var sent int64
	for sent < maxLogBytes {
		n, err := stream.Read(buf[:min(int64(len(buf)), maxLogBytes-sent)])
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return nil // the reader left
			}
			sent += int64(n)
			if fl != nil {
				fl.Flush()
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	_, _ = fmt.Fprintf(w, "\n[converge: the log was cut at %d bytes]\n", maxLogBytes)
	return nil
}

// logPod is the Pod named pod of the inventory object id of the SyncTarget key, and the
// container to read (the first when container is empty).
func (s *Server) logPod(ctx context.Context, key client.ObjectKey, id, pod, container string) (*corev1.Pod, string, error) {
	st, want, err := s.readObject(ctx, key, id)
	if err != nil {
		return nil, "", err
	}
	if st.Spec.KubeConfig != nil {
		return nil, "", errors.New("the logs of a remote cluster's Pods are not shown here: use kubectl logs with that cluster's credentials")
	}
	if s.opts.InCluster != nil {
		if err := s.authorize(ctx, "list", "", "pods", want.GetNamespace(), ""); err != nil {
			return nil, "", err
		}
		if !s.mayRead(ctx, want) {
			return nil, "", &deniedError{user: requestUser(ctx), verb: "get", resource: kindOf(want), namespace: want.GetNamespace()}
		}
	}
	live, _ := readLive(ctx, s.client, want)
	if live == nil {
		return nil, "", errNoSuchPod
	}
	pods, err := podsOf(ctx, s.client, live)
	if err != nil {
		return nil, "", err
	}
	for i := range pods {
		p := &pods[i]
		if p.Name != pod {
			continue
		}
		if container == "" && len(p.Spec.Containers) > 0 {
			return p, p.Spec.Containers[0].Name, nil
		}
		for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
			if c.Name == container {
				return p, container, nil
			}
		}
	}
	return nil, "", errNoSuchPod
}

// runtimeConvert converts an unstructured map into a typed value.
func runtimeConvert(m map[string]any, into any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(m, into)
}
