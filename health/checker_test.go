package health

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	kstatus "github.com/fluxcd/cli-utils/pkg/kstatus/status"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

var (
	secretGVK    = schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	serviceGVK   = schema.GroupVersionKind{Version: "v1", Kind: "Service"}
	namespaceGVK = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
	widgetGVR    = schema.GroupVersionResource{Group: "test.converge.dev", Version: "v1", Resource: "widgets"}
)

// ownerLabels are the labels converge puts on what it applies.
var ownerLabels = map[string]string{"converge.dev/name": "shop", "converge.dev/namespace": "team-a"}

// env is one cluster test's namespace, clients and a Checker of its own whose requests
// are counted.
type env struct {
	ns      string
	cs      kubernetes.Interface
	dyn     dynamic.Interface
	counter *requestCounter
	checker *Checker
}

func newEnv(t *testing.T) *env {
	t.Helper()
	c := testCluster(t)
	g := NewWithT(t)
	cs, err := kubernetes.NewForConfig(c.Config)
	g.Expect(err).NotTo(HaveOccurred())
	dyn, err := dynamic.NewForConfig(c.Config)
	g.Expect(err).NotTo(HaveOccurred())
	ns, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "health-"},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	counter := &requestCounter{}
	checker, err := New(counter.config(c.Config))
	g.Expect(err).NotTo(HaveOccurred())
	return &env{ns: ns.Name, cs: cs, dyn: dyn, counter: counter, checker: checker}
}

// when makes the checker signal, once, the first report during a wait for which pred
// holds. Set it before Wait.
func (e *env) when(pred func(Report) bool) <-chan struct{} {
	return signalWhen(e.checker, pred)
}

func signalWhen(c *Checker, pred func(Report) bool) <-chan struct{} {
	ch := make(chan struct{})
	var once sync.Once
	c.observe = func(r Report) {
		if pred(r) {
			once.Do(func() { close(ch) })
		}
	}
	return ch
}

type waitResult struct {
	report   Report
	err      error
	returned time.Time
}

// waitAsync runs Wait in the background.
func (e *env) waitAsync(ctx context.Context, refs []ObjectRef, opts Options) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		r, err := e.checker.Wait(ctx, refs, opts)
		ch <- waitResult{report: r, err: err, returned: time.Now()}
	}()
	return ch
}

// expectNoOpenWatch checks that Wait stopped every watch it opened before returning.
func (e *env) expectNoOpenWatch(g Gomega) {
	g.Expect(e.counter.open.Load()).To(BeZero(), "every watch is closed when Wait returns")
}

func (e *env) ref(gvk schema.GroupVersionKind, name string) ObjectRef {
	return ObjectRef{GVK: gvk, Namespace: e.ns, Name: name}
}

func (e *env) createDeployment(t *testing.T, name string, replicas int32, nodeSelector map[string]string, progressDeadline *int32) {
	t.Helper()
	sel := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns, Labels: ownerLabels},
		Spec: appsv1.DeploymentSpec{
			Replicas:                ptr.To(replicas),
			ProgressDeadlineSeconds: progressDeadline,
			Selector:                &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec: corev1.PodSpec{
					NodeSelector: nodeSelector,
					Containers:   []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
				},
			},
		},
	}
	_, err := e.cs.AppsV1().Deployments(e.ns).Create(t.Context(), d, metav1.CreateOptions{})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
}

func (e *env) createConfigMap(t *testing.T, name string, lbls map[string]string) {
	t.Helper()
	_, err := e.cs.CoreV1().ConfigMaps(e.ns).Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns, Labels: lbls},
		Data:       map[string]string{"key": "value-" + name},
	}, metav1.CreateOptions{})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
}

var unschedulable = map[string]string{"no-such-label": "anywhere"}

// A Deployment that rolls out is seen Current the moment its controller says so: Wait
// returns within moments of a watch of the test's own seeing the same, well before the
// timeout, after one list and one watch of Deployments and no per-object GET.
func TestWaitDeploymentBecomesCurrent(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	e := newEnv(t)
	ctx := t.Context()

	// The test's own watch, to know when the Deployment really became Current.
	w, err := e.dyn.Resource(appsv1.SchemeGroupVersion.WithResource("deployments")).Namespace(e.ns).
		Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=web"})
	g.Expect(err).NotTo(HaveOccurred())
	defer w.Stop()
	currentAt := make(chan time.Time, 1)
	go func() {
		for ev := range w.ResultChan() {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			if res, err := kstatus.Compute(u); err == nil && res.Status == kstatus.CurrentStatus {
				currentAt <- time.Now()
				return
			}
		}
	}()

	start := time.Now()
	e.createDeployment(t, "web", 2, nil, nil)
	_, err = e.cs.CoreV1().Services(e.ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: e.ns, Labels: ownerLabels},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	e.createConfigMap(t, "conf", ownerLabels)

	refs := []ObjectRef{
		e.ref(deployGVK, "web"), e.ref(serviceGVK, "web"), e.ref(cmGVK, "conf"),
		{GVK: namespaceGVK, Name: e.ns}, // cluster-scoped
	}
	report, err := e.checker.Wait(ctx, refs, Options{Timeout: 60 * time.Second, Selector: labels.SelectorFromSet(ownerLabels)})
	returned := time.Now()
	g.Expect(err).NotTo(HaveOccurred())
	e.expectNoOpenWatch(g)
	g.Expect(report.Ready()).To(BeTrue())
	g.Expect(report.Objects).To(HaveLen(4))
	g.Expect(report.Objects[0]).To(HaveField("Status", Current))
	g.Expect(report.Objects[0].Message).To(Equal("Deployment is available. Replicas: 2"))
	g.Expect(report.Elapsed).To(BeNumerically("<", 30*time.Second), "well before the 60s timeout")

	var seen time.Time
	g.Eventually(currentAt).WithTimeout(5 * time.Second).Should(Receive(&seen))
	lag := returned.Sub(seen)
	t.Logf("Deployment created → Wait returned: %s (Wait itself %s); Current seen by the test's watch → Wait returned: %s",
		returned.Sub(start).Round(time.Millisecond), report.Elapsed.Round(time.Millisecond), lag.Round(time.Millisecond))
	g.Expect(lag).To(BeNumerically("<", time.Second), "Wait learns from the watch, not from a poll")

	requests := e.counter.seen()
	t.Logf("requests: %d\n%s", len(requests), strings.Join(requests, "\n"))
	deployments := matching(requests, "/deployments")
	g.Expect(matching(deployments, "watch=true")).To(HaveLen(1), "one watch of Deployments")
	g.Expect(deployments).To(HaveLen(2), "one list and one watch of Deployments, no polling GET")
	g.Expect(matching(requests, "GET /api/v1/namespaces?fieldSelector=metadata.name%3D"+e.ns)).To(HaveLen(1), "the Namespace is listed cluster-wide by name")
}

// A Deployment that cannot be scheduled, with progressDeadlineSeconds 10, fails the wait
// as soon as the controller reports ProgressDeadlineExceeded, long before the timeout,
// with a message naming it and the reason — and nothing of the Secret beside it.
func TestWaitFailsOnProgressDeadline(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	e := newEnv(t)
	ctx := t.Context()

	e.createDeployment(t, "stuck", 1, unschedulable, ptr.To[int32](10))
	e.createConfigMap(t, "conf", ownerLabels)
	_, err := e.cs.CoreV1().Secrets(e.ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: e.ns, Labels: ownerLabels},
		StringData: map[string]string{"password": "hunter2-do-not-leak"},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	refs := []ObjectRef{e.ref(deployGVK, "stuck"), e.ref(cmGVK, "conf"), e.ref(secretGVK, "creds")}
	report, err := e.checker.Wait(ctx, refs, Options{Timeout: 60 * time.Second, Selector: labels.SelectorFromSet(ownerLabels)})
	g.Expect(err).To(HaveOccurred())
	e.expectNoOpenWatch(g)
	t.Logf("after %s: %v", report.Elapsed.Round(time.Millisecond), err)
	g.Expect(errors.Is(err, ErrFailed)).To(BeTrue())
	g.Expect(err.Error()).To(ContainSubstring(fmt.Sprintf("apps/v1 Deployment %s/stuck (Failed): Progress deadline exceeded (ProgressDeadlineExceeded", e.ns)))
	g.Expect(err.Error()).NotTo(ContainSubstring("hunter2"))
	g.Expect(fmt.Sprint(report)).NotTo(ContainSubstring("hunter2"))
	g.Expect(report.Elapsed).To(BeNumerically("<", 45*time.Second), "failed early, not at the 60s timeout")
	g.Expect(report.Objects[1:]).To(HaveEach(HaveField("Status", Current)))

	var herr *Error
	g.Expect(errors.As(err, &herr)).To(BeTrue())
	g.Expect(herr.NotReady).To(HaveLen(1))
	g.Expect(herr.NotReady[0].Ref).To(Equal(e.ref(deployGVK, "stuck")))

	// The Secret was read as metadata only: its data never reached this process.
	secrets := matching(e.counter.seen(), "/secrets")
	g.Expect(secrets).NotTo(BeEmpty())
	g.Expect(secrets).To(HaveEach(ContainSubstring("as=PartialObjectMeta")))
}

// At the timeout, the error names every object not ready with its status message: a
// Deployment that cannot be scheduled and a ConfigMap that does not exist.
func TestWaitTimeoutNamesObjects(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	e := newEnv(t)

	e.createDeployment(t, "stuck", 1, unschedulable, nil)
	e.createConfigMap(t, "present", nil)
	refs := []ObjectRef{e.ref(deployGVK, "stuck"), e.ref(cmGVK, "absent"), e.ref(cmGVK, "present")}
	report, err := e.checker.Wait(t.Context(), refs, Options{Timeout: 3 * time.Second})
	g.Expect(err).To(HaveOccurred())
	e.expectNoOpenWatch(g)
	t.Log(err)
	g.Expect(errors.Is(err, ErrTimeout)).To(BeTrue())
	g.Expect(err.Error()).To(HavePrefix("health check timed out after 3s: 2 of 3 objects not ready: "))
	g.Expect(err.Error()).To(ContainSubstring(fmt.Sprintf("apps/v1 Deployment %s/stuck (InProgress): ", e.ns)))
	g.Expect(err.Error()).To(ContainSubstring(fmt.Sprintf("v1 ConfigMap %s/absent (NotFound): not found", e.ns)))
	g.Expect(err.Error()).NotTo(ContainSubstring("present"))
	g.Expect(report.Elapsed).To(And(BeNumerically(">=", 3*time.Second), BeNumerically("<", 10*time.Second)))
}

// Objects a label selector does not find are looked up by name: one that lacks the owner
// labels is still judged, and one created during the wait is seen through the watch.
func TestWaitSeesObjectsOutsideTheSelectorAndCreatedLater(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	e := newEnv(t)
	ctx := t.Context()

	e.createConfigMap(t, "labelled", ownerLabels)
	e.createConfigMap(t, "unlabelled", nil)
	refs := []ObjectRef{e.ref(cmGVK, "labelled"), e.ref(cmGVK, "later"), e.ref(cmGVK, "unlabelled")}
	missing := e.when(func(r Report) bool {
		return r.Objects[1].Status == NotFound && r.Objects[2].Status == Current
	})
	done := e.waitAsync(ctx, refs, Options{Timeout: 60 * time.Second, Selector: labels.SelectorFromSet(ownerLabels)})

	select {
	case <-missing:
	case res := <-done:
		t.Fatalf("Wait returned before the missing ConfigMap was created: %v", res.err)
	}
	e.createConfigMap(t, "later", ownerLabels)
	var res waitResult
	g.Eventually(done).WithTimeout(30 * time.Second).Should(Receive(&res))
	g.Expect(res.err).NotTo(HaveOccurred())
	e.expectNoOpenWatch(g)
	g.Expect(res.report.Objects).To(HaveEach(HaveField("Status", Current)))

	requests := e.counter.seen()
	t.Logf("requests: %d\n%s", len(requests), strings.Join(requests, "\n"))
	g.Expect(matching(requests, "/configmaps?", "labelSelector=")).NotTo(BeEmpty(), "the group is listed by the owner labels")
	g.Expect(matching(requests, "/configmaps?", "watch=true")).To(HaveLen(2), "one labelled watch, one for what it did not find")
}

// Custom kinds are judged by their CEL expressions: failed, current, inProgress, the first
// that holds wins; a change of the object is seen through the watch; an expression that
// does not compile is reported before anything is sent to the API server. Without an
// expression for its kind, a custom object is judged by kstatus.
func TestWaitCustomKindCEL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	exprs := []convergev1.CustomHealthCheck{widgetCheck()}

	createWidget := func(t *testing.T, name string, status map[string]any) {
		t.Helper()
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "test.converge.dev/v1", "kind": "Widget",
			"metadata": map[string]any{"name": name, "namespace": e.ns},
			"status":   status,
		}}
		_, err := e.dyn.Resource(widgetGVR).Namespace(e.ns).Create(t.Context(), u, metav1.CreateOptions{})
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
	}

	t.Run("current", func(t *testing.T) {
		g := NewWithT(t)
		createWidget(t, "ready", map[string]any{"phase": "Ready"})
		report, err := e.checker.Wait(t.Context(), []ObjectRef{e.ref(widgetGVK, "ready")}, Options{Timeout: 30 * time.Second, Exprs: exprs})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(report.Objects[0].Message).To(HavePrefix("current expression holds: "))
	})

	t.Run("failed, at once", func(t *testing.T) {
		g := NewWithT(t)
		createWidget(t, "broken", map[string]any{"phase": "Failed"})
		report, err := e.checker.Wait(t.Context(), []ObjectRef{e.ref(widgetGVK, "broken")}, Options{Timeout: 30 * time.Second, Exprs: exprs})
		g.Expect(errors.Is(err, ErrFailed)).To(BeTrue(), "%v", err)
		g.Expect(err.Error()).To(ContainSubstring(fmt.Sprintf(`test.converge.dev/v1 Widget %s/broken (Failed): failed expression holds: has(self.status) && self.status.phase == "Failed"`, e.ns)))
		g.Expect(report.Elapsed).To(BeNumerically("<", 10*time.Second))
	})

	t.Run("in progress, then current", func(t *testing.T) {
		g := NewWithT(t)
		createWidget(t, "slow", map[string]any{"phase": "Pending"})
		inProgress := e.when(func(r Report) bool {
			return r.Objects[0].Status == InProgress && strings.HasPrefix(r.Objects[0].Message, "inProgress expression holds")
		})
		done := e.waitAsync(t.Context(), []ObjectRef{e.ref(widgetGVK, "slow")}, Options{Timeout: 60 * time.Second, Exprs: exprs})
		select {
		case <-inProgress:
		case res := <-done:
			t.Fatalf("Wait returned while the Widget was Pending: %v", res.err)
		}
		u, err := e.dyn.Resource(widgetGVR).Namespace(e.ns).Get(t.Context(), "slow", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(unstructured.SetNestedField(u.Object, "Ready", "status", "phase")).To(Succeed())
		_, err = e.dyn.Resource(widgetGVR).Namespace(e.ns).Update(t.Context(), u, metav1.UpdateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		var res waitResult
		g.Eventually(done).WithTimeout(30 * time.Second).Should(Receive(&res))
		g.Expect(res.err).NotTo(HaveOccurred())
		g.Expect(res.report.Objects[0].Status).To(Equal(Current))
	})

	t.Run("no expression for the kind: kstatus", func(t *testing.T) {
		g := NewWithT(t)
		createWidget(t, "stalled", map[string]any{"conditions": []any{
			map[string]any{"type": "Stalled", "status": "True", "reason": "BadConfig", "message": "port out of range"},
		}})
		_, err := e.checker.Wait(t.Context(), []ObjectRef{e.ref(widgetGVK, "stalled")}, Options{Timeout: 30 * time.Second})
		g.Expect(errors.Is(err, ErrFailed)).To(BeTrue(), "%v", err)
		g.Expect(err.Error()).To(ContainSubstring("Widget " + e.ns + "/stalled (Failed): port out of range (BadConfig)"))
	})

	t.Run("compile error", func(t *testing.T) {
		g := NewWithT(t)
		c := newChecker(e.checker.src, e.checker.mapper)
		before := len(e.counter.seen())
		bad := widgetCheck()
		bad.Current = `self.status.phase = "Ready"`
		_, err := c.Wait(t.Context(), []ObjectRef{e.ref(widgetGVK, "ready")}, Options{Timeout: 30 * time.Second, Exprs: []convergev1.CustomHealthCheck{bad}})
		g.Expect(errors.Is(err, ErrInvalidExpr)).To(BeTrue(), "%v", err)
		t.Log(err)
		g.Expect(err.Error()).To(HavePrefix("invalid health check expression: test.converge.dev/v1 Widget: current: 1:19: Syntax error"))
		g.Expect(e.counter.seen()).To(HaveLen(before), "nothing was sent to the API server")
	})
}

// Cancelling ctx (a newer commit arrived) ends a long wait at once, with ctx's error, and
// leaves no watch open.
func TestWaitCancel(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	e := newEnv(t)

	e.createDeployment(t, "stuck", 1, unschedulable, nil)
	watching := e.when(func(r Report) bool { return r.Objects[0].Status == InProgress })
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := e.waitAsync(ctx, []ObjectRef{e.ref(deployGVK, "stuck")}, Options{Timeout: 5 * time.Minute})
	g.Eventually(watching).WithTimeout(30 * time.Second).Should(BeClosed())
	g.Eventually(e.counter.open.Load).Should(BeEquivalentTo(1), "the wait is watching")

	cancelled := time.Now()
	cancel()
	var res waitResult
	g.Eventually(done).WithTimeout(5 * time.Second).Should(Receive(&res))
	t.Logf("returned %s after cancel: %v", res.returned.Sub(cancelled).Round(time.Millisecond), res.err)
	g.Expect(res.returned.Sub(cancelled)).To(BeNumerically("<", time.Second))
	g.Expect(errors.Is(res.err, context.Canceled)).To(BeTrue(), "%v", res.err)
	g.Expect(res.err.Error()).To(Equal("health check interrupted: context canceled"))
	g.Expect(res.report.Objects[0].Status).To(Equal(InProgress), "the report holds what was seen")
	e.expectNoOpenWatch(g)
}

// Waiting on hundreds of ConfigMaps costs a few requests — discovery, one list, perhaps
// one watch — whether the group is narrowed by the owner labels or not: nothing per object.
func TestWaitManyConfigMaps(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 250
	refs := make([]ObjectRef, n)
	var wg sync.WaitGroup
	names := make(chan string)
	for range 8 {
		wg.Go(func() {
			for name := range names {
				e.createConfigMap(t, name, ownerLabels)
			}
		})
	}
	for i := range n {
		refs[i] = e.ref(cmGVK, fmt.Sprintf("cm-%03d", i))
		names <- refs[i].Name
	}
	close(names)
	wg.Wait()

	tests := []struct {
		name     string
		selector labels.Selector
		list     string // what the one list of ConfigMaps carries
	}{
		{name: "by owner labels", selector: labels.SelectorFromSet(ownerLabels), list: "labelSelector=converge.dev"},
		{name: "whole namespace", list: "/configmaps accept="},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			counter := &requestCounter{}
			checker, err := New(counter.config(testCluster(t).Config))
			g.Expect(err).NotTo(HaveOccurred())
			report, err := checker.Wait(t.Context(), refs, Options{Timeout: 60 * time.Second, Selector: tt.selector})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(report.Objects).To(HaveLen(n))
			g.Expect(report.Objects).To(HaveEach(HaveField("Status", Current)))
			g.Eventually(counter.open.Load).Should(BeZero())

			requests := counter.seen()
			t.Logf("%d ConfigMaps Current in %s with %d requests:\n%s", n, report.Elapsed.Round(time.Millisecond), len(requests), strings.Join(requests, "\n"))
			g.Expect(len(requests)).To(BeNumerically("<=", 6))
			lists := matching(requests, "/configmaps")
			g.Expect(lists).To(HaveLen(1), "one list, and no watch was needed")
			g.Expect(lists[0]).To(And(ContainSubstring(tt.list), ContainSubstring("as=PartialObjectMetadataList")))
		})
	}
}

// Objects the caller observed Current after the apply (its answers) are taken as they are,
// with no request; an observed object that is not Current yet is watched as usual.
func TestWaitTakesObservedCurrentObjectsWithoutReadingThem(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	e := newEnv(t)
	ctx := t.Context()

	e.createConfigMap(t, "conf", ownerLabels)
	e.createDeployment(t, "web", 1, unschedulable, nil)
	cm, err := e.dyn.Resource(cmGVK.GroupVersion().WithResource("configmaps")).Namespace(e.ns).Get(ctx, "conf", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	web, err := e.dyn.Resource(deployGVK.GroupVersion().WithResource("deployments")).Namespace(e.ns).Get(ctx, "web", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	before := len(e.counter.seen())

	_, err = e.checker.Wait(ctx, []ObjectRef{e.ref(cmGVK, "conf")}, Options{Observed: []*unstructured.Unstructured{cm}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(e.counter.seen()[before:]).To(BeEmpty(), "a ConfigMap observed Current costs no request")

	report, err := e.checker.Wait(ctx, []ObjectRef{e.ref(cmGVK, "conf"), e.ref(deployGVK, "web")},
		Options{Timeout: 2 * time.Second, Observed: []*unstructured.Unstructured{cm, web}})
	g.Expect(err).To(MatchError(ErrTimeout))
	g.Expect(report.Objects[0].Status).To(Equal(Current))
	g.Expect(report.Objects[1].Status).To(Equal(InProgress), "the Deployment cannot roll out: it was watched, not taken as observed")
	requests := e.counter.seen()[before:]
	g.Expect(matching(requests, "/configmaps")).To(BeEmpty())
	g.Expect(matching(requests, "/deployments")).NotTo(BeEmpty())
	e.expectNoOpenWatch(g)
}

// A deadline of the caller's context that ends the wait before its own timeout still
// names what was not ready and why, not only that the wait was interrupted.
func TestWaitCallerDeadlineNamesWhatWasNotReady(t *testing.T) {
	g := NewWithT(t)
	e := newEnv(t)

	e.createDeployment(t, "late", 1, unschedulable, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	done := e.waitAsync(ctx, []ObjectRef{e.ref(deployGVK, "late")}, Options{Timeout: 5 * time.Minute})
	var res waitResult
	g.Eventually(done).WithTimeout(30 * time.Second).Should(Receive(&res))
	g.Expect(errors.Is(res.err, context.DeadlineExceeded)).To(BeTrue(), "%v", res.err)
	var herr *Error
	g.Expect(errors.As(res.err, &herr)).To(BeTrue(), "%v", res.err)
	g.Expect(res.err.Error()).To(And(
		HavePrefix("health check interrupted: context deadline exceeded: 1 of 1 object not ready: "),
		ContainSubstring("Deployment "), ContainSubstring("/late (InProgress)")))
	e.expectNoOpenWatch(g)
}

// A single object the caller observed in progress after Since (its apply's answer) is
// watched from the version observed: no list first, and the change the controller makes
// after the apply still ends the wait.
func TestWaitWatchesAnObservedObjectFromItsVersion(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	e := newEnv(t)
	ctx := t.Context()

	since := time.Now().Add(-time.Second)
	e.createDeployment(t, "web", 0, nil, nil)
	web, err := e.dyn.Resource(deployGVK.GroupVersion().WithResource("deployments")).Namespace(e.ns).Get(ctx, "web", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	if st, _ := computeStatus(web, nil); st != InProgress {
		t.Skipf("the controller rolled the Deployment out before the test read it (%s)", st)
	}
	before := len(e.counter.seen())

	report, err := e.checker.Wait(ctx, []ObjectRef{e.ref(deployGVK, "web")},
		Options{Timeout: 60 * time.Second, Since: since, Observed: []*unstructured.Unstructured{web}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(report.Objects[0].Status).To(Equal(Current))
	requests := matching(e.counter.seen()[before:], "/deployments")
	t.Logf("requests:\n%s", strings.Join(requests, "\n"))
	g.Expect(requests).To(HaveLen(1))
	g.Expect(requests[0]).To(And(ContainSubstring("/deployments?"), ContainSubstring("watch=true"),
		ContainSubstring("resourceVersion="+web.GetResourceVersion())), "one watch from the version observed")
	e.expectNoOpenWatch(g)
}
