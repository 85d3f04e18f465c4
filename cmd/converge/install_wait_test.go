package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/converge-gitops/converge/internal/localcluster"
	"github.com/converge-gitops/converge/internal/localcluster/clustertest"
)

// TestRolloutStatus: the rollout is done only when the controller has seen the latest
// spec and every replica is new and available, as `kubectl rollout status` has it.
func TestRolloutStatus(t *testing.T) {
	dep := func(gen, observed int64, replicas *int32, s appsv1.DeploymentStatus) *appsv1.Deployment {
		s.ObservedGeneration = observed
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "converge", Generation: gen},
			Spec:       appsv1.DeploymentSpec{Replicas: replicas},
			Status:     s,
		}
	}
	for _, tc := range []struct {
		name    string
		d       *appsv1.Deployment
		want    string
		done    bool
		wantErr string
	}{
		{name: "not observed", d: dep(2, 1, ptr.To[int32](1), appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1}),
			want: "waiting for the Deployment controller to observe generation 2"},
		{name: "updating", d: dep(1, 1, ptr.To[int32](2), appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 1}),
			want: "1 of 2 replicas updated"},
		{name: "old replicas left", d: dep(1, 1, ptr.To[int32](1), appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 1, AvailableReplicas: 1}),
			want: "1 old replicas pending termination"},
		{name: "not available", d: dep(1, 1, ptr.To[int32](1), appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 1}),
			want: "0 of 1 updated replicas available"},
		{name: "done", d: dep(3, 3, ptr.To[int32](1), appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1}),
			want: "rolled out, 1 of 1 replicas available", done: true},
		{name: "replicas defaulted to one", d: dep(1, 1, nil, appsv1.DeploymentStatus{}),
			want: "0 of 1 replicas updated"},
		{name: "deadline exceeded", d: dep(1, 1, ptr.To[int32](1), appsv1.DeploymentStatus{Conditions: []appsv1.DeploymentCondition{{
			Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded",
			Message: `ReplicaSet "converge-5d8f" has timed out progressing.`}}}),
			wantErr: `the rollout exceeded its progress deadline: ReplicaSet "converge-5d8f" has timed out progressing.`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			msg, done, err := rolloutStatus(tc.d)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(tc.wantErr))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(msg).To(Equal(tc.want))
			g.Expect(done).To(Equal(tc.done))
		})
	}
}

// TestWaitRolloutErrors: a read that may pass (a dropped connection, the client's rate
// limiter near the deadline) is tried again; one that cannot (forbidden, gone) fails at once.
func TestWaitRolloutErrors(t *testing.T) {
	done := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: installNamespace, Name: "converge", Generation: 1},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](1)},
		Status:     appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1},
	}
	u := &unstructured.Unstructured{}
	u.SetNamespace(installNamespace)
	u.SetName("converge")
	for _, tc := range []struct {
		name    string
		fail    error
		wantErr string
	}{
		{name: "transient", fail: errors.New("client rate limiter Wait returned an error: rate: Wait(n=1) would exceed context deadline")},
		{name: "forbidden", fail: apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "converge", errors.New("no")),
			wantErr: `reading Deployment/converge-system/converge: deployments.apps "converge" is forbidden: no`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			failures := 2
			c := fake.NewClientBuilder().WithScheme(cliScheme()).WithObjects(done.DeepCopy()).
				WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if failures > 0 {
						failures--
						return tc.fail
					}
					return c.Get(ctx, key, obj, opts...)
				}}).Build()
			var out bytes.Buffer
			err := waitRollout(context.Background(), c, &out, u, time.Millisecond, time.Minute)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(tc.wantErr))
				g.Expect(out.String()).To(BeEmpty())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(failures).To(BeZero())
			g.Expect(out.String()).To(Equal("Deployment/converge-system/converge: rolled out, 1 of 1 replicas available\n"))
		})
	}
}

// lockedBuffer is a bytes.Buffer a command writes to while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startCommand runs the CLI in-process in the background; the channel gets its result.
func startCommand(t *testing.T, out *lockedBuffer, args ...string) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	finished := make(chan struct{})
	cmd := newRootCommand()
	cmd.SetOut(out)
	cmd.SetErr(out)
	cmd.SetArgs(args)
	go func() {
		defer close(finished)
		done <- cmd.ExecuteContext(ctx)
	}()
	t.Cleanup(func() { cancel(); <-finished })
	return done
}

// TestInstallWait: on an API server where this test plays the Deployment controller,
// `converge install --wait` prints the rollout's progress as the Deployment's status
// moves and returns once it has rolled out; when it never does, it fails at --timeout
// saying how far it got and why the pod is stuck.
func TestInstallWait(t *testing.T) {
	t.Parallel()
	ctrl.SetLogger(logr.Discard())
	cluster := clustertest.Start(t, localcluster.Options{}) // no controller-manager: nothing rolls out by itself
	c, err := client.New(cluster.Config, client.Options{Scheme: cliScheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := client.ObjectKey{Namespace: installNamespace, Name: "converge"}

	t.Run("timeout says why", func(t *testing.T) {
		g := NewWithT(t)
		// The install, without waiting; then a pod of the daemon that cannot pull its image.
		runCommand(t, "install", "--kubeconfig", cluster.Kubeconfig)
		var dep appsv1.Deployment
		g.Expect(c.Get(ctx, key, &dep)).To(Succeed())
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: installNamespace, Name: "converge-7f9c-x1", Labels: dep.Spec.Template.Labels},
			Spec:       dep.Spec.Template.Spec,
		}
		g.Expect(c.Create(ctx, pod)).To(Succeed())
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "manager", Image: "ghcr.io/converge-gitops/converge:latest",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff",
				Message: `Back-off pulling image "ghcr.io/converge-gitops/converge:latest"`}}}}
		g.Expect(c.Status().Update(ctx, pod)).To(Succeed())

		var out lockedBuffer
		done := startCommand(t, &out, "install", "--wait", "--timeout", "3s", "--kubeconfig", cluster.Kubeconfig)
		var err error
		g.Eventually(done).WithTimeout(time.Minute).Should(Receive(&err))
		g.Expect(err).To(MatchError(`timed out after 3s waiting for the rollout of Deployment/converge-system/converge: ` +
			`waiting for the Deployment controller to observe generation 1; pod converge-7f9c-x1: container manager waiting: ` +
			`ImagePullBackOff (Back-off pulling image "ghcr.io/converge-gitops/converge:latest")`))
		g.Expect(out.String()).To(ContainSubstring("Deployment/converge-system/converge: waiting for the Deployment controller to observe generation 1\n"))
		g.Expect(c.Delete(ctx, pod, client.GracePeriodSeconds(0))).To(Succeed())
	})

	t.Run("progress until rolled out", func(t *testing.T) {
		g := NewWithT(t)
		var out lockedBuffer
		done := startCommand(t, &out, "install", "--wait", "--kubeconfig", cluster.Kubeconfig)
		const subject = "Deployment/converge-system/converge: "
		g.Eventually(out.String).WithTimeout(time.Minute).Should(ContainSubstring(subject + "waiting for the Deployment controller to observe generation 1\n"))

		// The controller's steps, each shown once seen.
		var dep appsv1.Deployment
		g.Expect(c.Get(ctx, key, &dep)).To(Succeed())
		for _, step := range []struct {
			status appsv1.DeploymentStatus
			line   string
		}{
			{appsv1.DeploymentStatus{Replicas: 1}, "0 of 1 replicas updated"},
			{appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}, "1 old replicas pending termination"},
			{appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 1}, "0 of 1 updated replicas available"},
		} {
			step.status.ObservedGeneration = dep.Generation
			dep.Status = step.status
			g.Expect(c.Status().Update(ctx, &dep)).To(Succeed())
			g.Eventually(out.String).WithTimeout(time.Minute).Should(ContainSubstring(subject + step.line + "\n"))
			g.Consistently(done).WithTimeout(1500 * time.Millisecond).ShouldNot(Receive())
		}
		dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
		g.Expect(c.Status().Update(ctx, &dep)).To(Succeed())
		var err error
		g.Eventually(done).WithTimeout(time.Minute).Should(Receive(&err))
		g.Expect(err).NotTo(HaveOccurred())

		// One line per change, in the controller's order, after the install's summary.
		var progress []string
		for line := range strings.SplitSeq(strings.TrimSpace(out.String()), "\n") {
			if rest, ok := strings.CutPrefix(line, subject); ok {
				progress = append(progress, rest)
			}
		}
		g.Expect(progress).To(Equal([]string{
			"waiting for the Deployment controller to observe generation 1",
			"0 of 1 replicas updated",
			"1 old replicas pending termination",
			"0 of 1 updated replicas available",
			"rolled out, 1 of 1 replicas available",
		}))
		g.Expect(out.String()).To(MatchRegexp(`converge installed \(default\) in converge-system: .*; image ghcr.io/converge-gitops/converge:latest\n`))
	})
}

// TestInstallWaitRollsOut: on a cluster with the real Deployment controller, scheduler
// and a (kwok) node, `converge install --wait` returns once the daemon's Deployment has
// rolled out — the pods do not really run converge there, kwok marks them Ready.
func TestInstallWaitRollsOut(t *testing.T) {
	t.Parallel()
	ctrl.SetLogger(logr.Discard())
	g := NewWithT(t)
	cluster := clustertest.Start(t, localcluster.Options{Workloads: true, Nodes: 1})
	out := string(runCommand(t, "install", "--wait", "--kubeconfig", cluster.Kubeconfig))
	g.Expect(out).To(HaveSuffix("Deployment/converge-system/converge: rolled out, 1 of 1 replicas available\n"))

	c, err := client.New(cluster.Config, client.Options{Scheme: cliScheme()})
	g.Expect(err).NotTo(HaveOccurred())
	var dep appsv1.Deployment
	g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: installNamespace, Name: "converge"}, &dep)).To(Succeed())
	g.Expect(dep.Status.AvailableReplicas).To(Equal(int32(1)))
	g.Expect(dep.Status.ObservedGeneration).To(Equal(dep.Generation))
}
