package localcluster_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/converge-gitops/converge/internal/localcluster"
)

// TestWorkloads runs the whole local cluster: a Deployment that can be scheduled becomes
// Available through the real controller-manager, scheduler and kwok, one that cannot
// reports ProgressDeadlineExceeded, and Stop leaves no process behind.
func TestWorkloads(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the control plane: make test")
	}
	g := NewWithT(t)
	ctx := t.Context()
	c, err := localcluster.Start(ctx, localcluster.Options{Workloads: true, Nodes: 2})
	g.Expect(err).NotTo(HaveOccurred())
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Stop()
		}
	})
	pids := localcluster.ChildrenMentioning(os.Getpid(), c.Dir)
	g.Expect(len(pids)).To(BeNumerically(">=", 5), "etcd, kube-apiserver, controller-manager, scheduler and kwok run")

	cs, err := kubernetes.NewForConfig(c.Config)
	g.Expect(err).NotTo(HaveOccurred())
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(nodes.Items).To(HaveLen(2))

	good := deployment("good", 2, nil)
	bad := deployment("unschedulable", 1, map[string]string{"no-such-label": "anywhere"})
	for _, d := range []*appsv1.Deployment{good, bad} {
		_, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}

	g.Eventually(func(g Gomega) {
		d, err := cs.AppsV1().Deployments("default").Get(ctx, "good", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(d.Status.AvailableReplicas).To(Equal(int32(2)))
		g.Expect(condition(d, appsv1.DeploymentAvailable)).To(HaveField("Status", corev1.ConditionTrue))
	}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

	g.Eventually(func(g Gomega) {
		d, err := cs.AppsV1().Deployments("default").Get(ctx, "unschedulable", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(condition(d, appsv1.DeploymentProgressing)).To(And(
			HaveField("Status", corev1.ConditionFalse),
			HaveField("Reason", "ProgressDeadlineExceeded"),
		))
		g.Expect(d.Status.AvailableReplicas).To(BeZero())
	}).WithTimeout(90 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())

	g.Expect(c.Stop()).To(Succeed())
	stopped = true
	g.Expect(localcluster.ChildrenMentioning(0, c.Dir)).To(BeEmpty(), "no process of the cluster is left")
	for _, pid := range pids {
		g.Expect(alive(pid)).To(BeFalse(), "process %d is gone", pid)
	}
	g.Expect(c.Dir).NotTo(BeADirectory())
}

func deployment(name string, replicas int32, nodeSelector map[string]string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas:                ptr.To(replicas),
			ProgressDeadlineSeconds: ptr.To(int32(10)),
			Selector:                &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: nodeSelector,
					Containers:   []corev1.Container{{Name: "app", Image: "example.com/app:1"}},
				},
			},
		},
	}
}

func condition(d *appsv1.Deployment, t appsv1.DeploymentConditionType) appsv1.DeploymentCondition {
	for _, c := range d.Status.Conditions {
		if c.Type == t {
			return c
		}
	}
	return appsv1.DeploymentCondition{}
}

func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	// A zombie still answers signal 0 until reaped; it runs nothing.
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(stat), ") Z ")
}

// TestNoProcessOutlivesAKilledParent starts a cluster in a child process, kills that child
// with SIGKILL (as a test timeout, a panic or a hard Ctrl-C would end it, with no chance to
// clean up), and checks that its etcd and kube-apiserver go away too.
func TestNoProcessOutlivesAKilledParent(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the control plane: make test")
	}
	if os.Getenv("LOCALCLUSTER_CHILD") == "1" {
		return // the child's work is done by TestMain
	}
	g := NewWithT(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LOCALCLUSTER_CHILD=1")
	out, err := cmd.StdoutPipe()
	g.Expect(err).NotTo(HaveOccurred())
	cmd.Stderr = os.Stderr
	g.Expect(cmd.Start()).To(Succeed())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	// The child prints its cluster directory once the API server answers.
	dir := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "cluster-dir="); ok {
				dir <- d
			}
		}
	}()
	var clusterDir string
	select {
	case clusterDir = <-dir:
	case <-time.After(90 * time.Second):
		t.Fatal("the child never started its cluster")
	}
	g.Expect(localcluster.ChildrenMentioning(cmd.Process.Pid, clusterDir)).To(HaveLen(2), "etcd and kube-apiserver run")

	g.Expect(cmd.Process.Signal(syscall.SIGKILL)).To(Succeed())
	_ = cmd.Wait()
	g.Eventually(func() []int {
		var live []int
		for _, pid := range localcluster.ChildrenMentioning(0, clusterDir) {
			if alive(pid) {
				live = append(live, pid)
			}
		}
		return live
	}).WithTimeout(10 * time.Second).WithPolling(100 * time.Millisecond).Should(BeEmpty())
	_ = os.RemoveAll(clusterDir)
}

func TestMain(m *testing.M) {
	if os.Getenv("LOCALCLUSTER_CHILD") == "1" {
		c, err := localcluster.Start(context.Background(), localcluster.Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("cluster-dir=%s\n", c.Dir)
		select {} // wait to be killed
	}
	os.Exit(m.Run())
}

// TestStartFailsClearlyWithoutBinaries checks the message a newcomer sees before 'make controlplane'.
func TestStartFailsClearlyWithoutBinaries(t *testing.T) {
	g := NewWithT(t)
	_, err := localcluster.Start(t.Context(), localcluster.Options{BinDir: t.TempDir()})
	g.Expect(err).To(MatchError(ContainSubstring("run 'make controlplane' first")))
}

// TestRestartAPIServer: after a restart, or a stop and a start, the API server answers on
// the same address with the same credentials and data, and Stop still leaves no process
// behind.
func TestRestartAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the control plane: make test")
	}
	g := NewWithT(t)
	ctx := t.Context()
	c, err := localcluster.Start(ctx, localcluster.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Stop()
		}
	})
	cs, err := kubernetes.NewForConfig(c.Config)
	g.Expect(err).NotTo(HaveOccurred())
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before", Namespace: "default"}, Data: map[string]string{"a": "1"}}
	_, err = cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	before := localcluster.ChildrenMentioning(os.Getpid(), c.Dir)

	for range 2 {
		g.Expect(c.RestartAPIServer(ctx)).To(Succeed())
		got, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got.Data).To(Equal(cm.Data))
	}

	// Stopped, it is away until started again.
	g.Expect(c.StopAPIServer()).To(Succeed())
	g.Expect(c.StopAPIServer()).To(MatchError(ContainSubstring("already stopped")))
	_, err = cs.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{})
	g.Expect(err).To(MatchError(ContainSubstring("connection refused")))
	g.Expect(c.StartAPIServer(ctx)).To(Succeed())
	g.Expect(c.StartAPIServer(ctx)).To(MatchError(ContainSubstring("not stopped")))
	got, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Data).To(Equal(cm.Data))
	after := localcluster.ChildrenMentioning(os.Getpid(), c.Dir)
	g.Expect(after).To(HaveLen(len(before)), "etcd and one kube-apiserver")
	g.Expect(after).NotTo(Equal(before), "the API server is a new process")

	g.Expect(c.Stop()).To(Succeed())
	stopped = true
	g.Expect(localcluster.ChildrenMentioning(0, c.Dir)).To(BeEmpty(), "no process of the cluster is left")
}
