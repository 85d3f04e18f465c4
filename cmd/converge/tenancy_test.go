package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/freeport"
	"github.com/converge-gitops/converge/internal/gittest"
	"github.com/converge-gitops/converge/internal/localcluster"
	"github.com/converge-gitops/converge/internal/localcluster/clustertest"
	"github.com/converge-gitops/converge/sources"
)

// TestTenancyRBACRoundTrip: `converge install --multi-tenant` applies cleanly (and takes
// the default install's cluster-admin binding away), and `converge serve`, run with a
// real token of the installed service account and the flags of the installed Deployment,
// reconciles a SyncTarget impersonating a tenant's service account — apply, health check,
// git credentials, webhook, events, leader lease — but cannot act beyond that account's
// rights, and a SyncTarget naming no account applies nothing.
func TestTenancyRBACRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := NewWithT(t)
	cluster := clustertest.Start(t, localcluster.Options{}) // no CRD: install brings it
	admin, err := client.New(cluster.Config, client.Options{Scheme: cliScheme()})
	g.Expect(err).NotTo(HaveOccurred())

	// The default install, then the multi-tenant one over it.
	out := install(t, cluster.Kubeconfig)
	g.Expect(out).To(ContainSubstring("CustomResourceDefinition/synctargets.converge.dev created"))
	g.Expect(out).To(ContainSubstring("ClusterRoleBinding/converge-cluster-admin created"))
	out = install(t, cluster.Kubeconfig, "--multi-tenant")
	g.Expect(out).To(ContainSubstring("ClusterRole/converge-multi-tenant created"))
	g.Expect(out).To(ContainSubstring("Deployment/converge-system/converge configured"))
	g.Expect(out).To(ContainSubstring("ClusterRoleBinding/converge-cluster-admin deleted"))
	err = admin.Get(ctx, client.ObjectKey{Name: "converge-cluster-admin"}, &rbacv1.ClusterRoleBinding{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the cluster-admin binding is gone: %v", err)
	out = install(t, cluster.Kubeconfig, "--multi-tenant")
	g.Expect(out).NotTo(MatchRegexp(`(?m)^\S+ (created|configured|deleted)$`), "installing again changes nothing")
	g.Expect(out).To(MatchRegexp(`(?m)^Deployment/converge-system/converge unchanged$`))

	// The daemon's credentials: a token of converge-system/converge from the TokenRequest API.
	daemonKubeconfig, daemonClient := serviceAccountKubeconfig(t, cluster, "converge-system", "converge")
	err = daemonClient.List(ctx, &corev1.ConfigMapList{}, client.InNamespace("team-a"))
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the daemon itself may not read what tenants deploy: %v", err)
	g.Expect(err.Error()).To(ContainSubstring(`"system:serviceaccount:converge-system:converge"`))

	// A tenant: team-a, whose deployer may manage ConfigMaps in team-a and nothing else.
	// team-b is someone else's.
	for _, ns := range []string{"team-a", "team-b"} {
		g.Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	g.Expect(admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: "team-a"}})).To(Succeed())
	g.Expect(admin.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "configmaps", Namespace: "team-a"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}},
	})).To(Succeed())
	g.Expect(admin.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: "team-a"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "configmaps"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "deployer", Namespace: "team-a"}},
	})).To(Succeed())

	// Its repository needs credentials, and pushes are announced by a signed webhook.
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "tenant")
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{Username: "git", Password: "s3cret"})
	url := srv.RepoURL(repo)
	g.Expect(admin.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "git", Namespace: "team-a"},
		StringData: map[string]string{sources.SecretUsername: "git", sources.SecretPassword: "s3cret"},
	})).To(Succeed())
	g.Expect(admin.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: "team-a"},
		StringData: map[string]string{"token": "hook-token"},
	})).To(Succeed())

	// converge serve as the Deployment runs it, with the local addresses and the token.
	probe, webhook := freeAddr(t), freeAddr(t)
	args := append(installedServeArgs(t, cluster.Kubeconfig),
		"--kubeconfig", daemonKubeconfig, "--leader-election-namespace", "converge-system",
		"--metrics-bind-address", "0", "--health-probe-bind-address", probe, "--webhook-bind-address", webhook,
		"--cache-dir", t.TempDir())
	d := runDaemon(t, args...)
	g.Eventually(func() (int, error) { return httpGet("http://" + probe + "/readyz") }).
		WithTimeout(30*time.Second).Should(Equal(http.StatusOK), d.describe)

	target := func(name, path, serviceAccount string) *convergev1.SyncTarget {
		st := &convergev1.SyncTarget{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a"},
			Spec: convergev1.SyncTargetSpec{
				Source: convergev1.GitSource{
					URL: url, Ref: convergev1.GitRef{Branch: "main"},
					SecretRef:        &convergev1.LocalObjectReference{Name: "git"},
					WebhookSecretRef: &convergev1.LocalObjectReference{Name: "hook"},
					Interval:         &metav1.Duration{Duration: time.Hour}, // pushes come by webhook
				},
				Path:               path,
				Prune:              true,
				Wait:               ptr.To(true),
				Timeout:            &metav1.Duration{Duration: 20 * time.Second},
				ServiceAccountName: serviceAccount,
			},
		}
		g.Expect(admin.Create(ctx, st)).To(Succeed())
		return st
	}
	status := func(g Gomega, st *convergev1.SyncTarget) (convergev1.SyncTargetStatus, metav1.Condition) {
		got := &convergev1.SyncTarget{}
		g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(st), got)).To(Succeed())
		ready := apimeta.FindStatusCondition(got.Status.Conditions, convergev1.ReadyCondition)
		g.Expect(ready).NotTo(BeNil())
		return got.Status, *ready
	}
	eventually := func(check func(g Gomega)) {
		t.Helper()
		g.Eventually(check).WithTimeout(60*time.Second).WithPolling(250*time.Millisecond).
			Should(Succeed(), d.describe)
	}

	// Within its rights: applied as deployer, and health-checked as deployer (the daemon
	// could not watch the ConfigMap itself).
	rev1 := "main@sha1:" + repo.Commit(t, "main", map[string]string{
		"app/cm.yaml":  "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app, namespace: team-a}\ndata: {value: \"1\"}\n",
		"anon/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: anon, namespace: team-a}\ndata: {value: \"1\"}\n",
	})
	app := target("app", "app", "deployer")
	eventually(func(g Gomega) {
		s, ready := status(g, app)
		g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), ready.Message)
		g.Expect(s.LastHealthyRevision).To(Equal(rev1))
	})
	cm := &corev1.ConfigMap{}
	g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "app"}, cm)).To(Succeed())
	g.Expect(cm.Data["value"]).To(Equal("1"))
	g.Expect(cm.Labels).To(HaveKeyWithValue(convergev1.NameLabel, "app"))
	// The daemon wrote events about it.
	eventually(func(g Gomega) {
		events := &eventsv1.EventList{}
		g.Expect(admin.List(ctx, events, client.InNamespace("team-a"))).To(Succeed())
		g.Expect(events.Items).To(ContainElement(And(
			HaveField("Regarding.Name", "app"), HaveField("Reason", convergev1.SucceededReason))))
	})

	// Beyond its rights: a ConfigMap in team-b. The push webhook (its token read by name)
	// brings the commit at once; the apply is forbidden and nothing lands in team-b.
	rev2 := "main@sha1:" + repo.Commit(t, "main", map[string]string{
		"app/intruder.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: intruder, namespace: team-b}\n",
	})
	g.Expect(push(t, "http://"+webhook+sources.WebhookPath, url, "hook-token")).To(Equal(http.StatusAccepted))
	eventually(func(g Gomega) {
		s, ready := status(g, app)
		g.Expect(s.LastAttemptedRevision).To(Equal(rev2))
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready.Message).To(ContainSubstring("forbidden"))
		g.Expect(ready.Message).To(ContainSubstring("system:serviceaccount:team-a:deployer"))
		g.Expect(s.LastHealthyRevision).To(Equal(rev1))
	})
	err = admin.Get(ctx, client.ObjectKey{Namespace: "team-b", Name: "intruder"}, &corev1.ConfigMap{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "nothing created in team-b: %v", err)

	// Naming no account: the default one is impersonated, which has no rights at all.
	anon := target("anon", "anon", "")
	eventually(func(g Gomega) {
		s, ready := status(g, anon)
		g.Expect(s.LastAttemptedRevision).To(Equal(rev2))
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready.Message).To(ContainSubstring("forbidden"))
		g.Expect(ready.Message).To(ContainSubstring("system:serviceaccount:team-a:converge-tenant-default"))
	})
	err = admin.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "anon"}, &corev1.ConfigMap{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "nothing applied: %v", err)

	// The daemon never needed a right it was not given: leases, SyncTargets, their
	// status and finalizers, Secrets and events all went through.
	g.Expect(daemonOutput(d)).NotTo(MatchRegexp(`system:serviceaccount:converge-system:converge\\*" cannot`))
	g.Expect(d.logged("Successfully acquired lease")).To(BeTrue(), d.describe)
}

// install runs `converge install` (the real binary) against the cluster and returns its output.
func install(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	line := strings.Join(append([]string{"converge", "install"}, args...), " ")
	out, err := exec.Command(binary, append([]string{"install", "--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
	t.Logf("%s:\n%s", line, out)
	return string(out)
}

// installedServeArgs are the arguments of `converge serve` in the Deployment the
// multi-tenant install created in the cluster.
func installedServeArgs(t *testing.T, kubeconfig string) []string {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dep, err := cs.AppsV1().Deployments("converge-system").Get(context.Background(), "converge", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return dep.Spec.Template.Spec.Containers[0].Args
}

// serviceAccountKubeconfig writes a kubeconfig holding a fresh token of the service
// account, and returns it and a client using it.
func serviceAccountKubeconfig(t *testing.T, cluster *localcluster.Cluster, namespace, name string) (string, client.Client) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token for %s/%s: %v", namespace, name, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: cluster.Config.Host, CertificateAuthorityData: cluster.Config.CAData}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: "local", AuthInfo: name, Namespace: namespace}
	kc.CurrentContext = name
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: cliScheme()})
	if err != nil {
		t.Fatal(err)
	}
	return path, c
}

// runDaemon starts the converge binary with exactly args (unlike serve, which adds its
// own flags first) and stops it when the test ends.
func runDaemon(t *testing.T, args ...string) *daemon {
	t.Helper()
	d := &daemon{}
	d.cmd = exec.Command(binary, args...)
	d.cmd.Stdout, d.cmd.Stderr = d, d
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.cmd.Process.Kill(); _ = d.cmd.Wait() })
	return d
}

func daemonOutput(d *daemon) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.out.String()
}

// describe is a failure message of Gomega, computed when the assertion fails.
func (d *daemon) describe() string { return "daemon output:\n" + daemonOutput(d) }

// freeAddr returns a loopback address with a port free right now and not handed out
// before in this process.
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

func httpGet(url string) (int, error) {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// push sends a push webhook for repoURL signed with token, and returns the status code.
func push(t *testing.T, url, repoURL, token string) int {
	t.Helper()
	body := []byte(fmt.Sprintf(`{"repository": {"url": %q}}`, repoURL))
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write(body)
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Signature", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}
