package reconciler_test

// The hostile-input cases that need the daemon and a real API server: moved and
// deleted refs, credentials that must not leak, tenants reaching beyond their rights, Secret
// values that fail validation.

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/gittest"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sync/apply"
	"github.com/converge-gitops/converge/sync/cluster"
	"github.com/converge-gitops/converge/sync/reconciler"
	"github.com/converge-gitops/converge/sync/reconciler/reconcilertest"
)

// sha of a revision string such as main@sha1:<hex>.
func sha(revision string) string {
	return revision[strings.LastIndex(revision, ":")+1:]
}

// eventsOf lists the events about a SyncTarget.
func eventsOf(g Gomega, st *convergev1.SyncTarget) []corev1.Event {
	list := &corev1.EventList{}
	g.Expect(k8s.List(context.Background(), list, client.InNamespace(st.Namespace))).To(Succeed())
	var out []corev1.Event
	for _, e := range list.Items {
		if e.InvolvedObject.Name == st.Name && e.InvolvedObject.Kind == "SyncTarget" {
			out = append(out, e)
		}
	}
	return out
}

// noSecretAnywhere checks the whole status and every event of a SyncTarget for the secrets.
func noSecretAnywhere(g Gomega, st *convergev1.SyncTarget, secrets ...string) {
	status, err := json.Marshal(get(g, st).Status)
	g.Expect(err).NotTo(HaveOccurred())
	events, err := json.Marshal(eventsOf(g, st))
	g.Expect(err).NotTo(HaveOccurred())
	for _, s := range secrets {
		g.Expect(string(status)).NotTo(ContainSubstring(s), "the status of %s leaks a secret", st.Name)
		g.Expect(string(events)).NotTo(ContainSubstring(s), "an event of %s leaks a secret", st.Name)
	}
}

// tenant creates the service account deployer in f.ns with rights on ConfigMaps in f.app.
func tenant(g Gomega, f *fixture, verbs ...string) {
	ctx := context.Background()
	if len(verbs) == 0 {
		verbs = []string{"*"}
	}
	g.Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: f.ns}})).To(Succeed())
	grant(g, f, f.app, verbs...)
}

// grant gives f's deployer the verbs on ConfigMaps in namespace.
func grant(g Gomega, f *fixture, namespace string, verbs ...string) {
	ctx := context.Background()
	g.Expect(k8s.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "configmaps", Namespace: namespace},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: verbs}},
	})).To(Succeed())
	g.Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "configmaps"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "deployer", Namespace: f.ns}},
	})).To(Succeed())
}

func namespace(g Gomega, name string) string {
	g.Expect(k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	return name
}

func configMapIn(ns, name, value string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: %s\ndata:\n  value: %q\n", name, ns, value)
}

// TestHardeningForcePushAndDeletedBranch: a force-push is deployed as any new commit (what
// it dropped is pruned); a deleted branch is Ready=False FetchFailed naming the branch, with
// the cluster, the inventory and the history left exactly as they were; a branch pushed
// again from an unrelated history deploys.
func TestHardeningForcePushAndDeletedBranch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	g := NewWithT(t)
	f.repo.Commit(t, "other", map[string]string{"README.md": "another branch: the repository keeps a ref"})
	rev1 := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "1"), "deploy/b.yaml": configMap("b", "1")})
	st := f.syncTarget("branch", nil)
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev1), ready(st).Message)
	})
	rev2 := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "2"), "deploy/c.yaml": configMap("c", "2")})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev2), ready(st).Message)
	})
	getCM(g, f.app, "c")

	// Force-push: main goes back to a child of rev1; rev2 and its c are gone from history.
	rev3 := "main@sha1:" + f.repo.CommitOnto(t, "main", sha(rev1), gittest.Change{Path: "deploy/a.yaml", Content: configMap("a", "3")})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev3), ready(st).Message)
		g.Expect(st.Status.Inventory.Entries).To(HaveLen(2))
	})
	g.Expect(getCM(g, f.app, "a").Data["value"]).To(Equal("3"))
	getCM(g, f.app, "b")
	g.Eventually(func(g Gomega) { gone(g, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.app, Name: "c"}}) }).Should(Succeed())

	// The branch is deleted.
	before := get(g, st)
	f.repo.DeleteBranch(t, "main")
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready(st).Reason).To(Equal(convergev1.FetchFailedReason))
		g.Expect(ready(st).Message).To(ContainSubstring(`branch "main" does not exist`))
	})
	g.Consistently(func(g Gomega) {
		now := get(g, st)
		g.Expect(now.Status.LastAppliedRevision).To(Equal(rev3))
		g.Expect(now.Status.LastHealthyRevision).To(Equal(rev3))
		g.Expect(now.Status.Inventory).To(Equal(before.Status.Inventory), "nothing pruned from the inventory")
		g.Expect(now.Status.History).To(Equal(before.Status.History), "no sync attempted")
		g.Expect(getCM(g, f.app, "a").Data["value"]).To(Equal("3"))
		g.Expect(getCM(g, f.app, "b").Data["value"]).To(Equal("1"))
	}).WithTimeout(3 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())
	g.Expect(eventsOf(g, st)).To(ContainElement(And(HaveField("Reason", convergev1.FetchFailedReason),
		HaveField("Type", corev1.EventTypeWarning))))

	// Pushed again, as a new root commit: deployed, and what it lacks pruned.
	rev4 := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "4")})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev4), ready(st).Message)
		g.Expect(ready(st).Status).To(Equal(metav1.ConditionTrue))
	})
	g.Expect(getCM(g, f.app, "a").Data["value"]).To(Equal("4"))
	g.Eventually(func(g Gomega) { gone(g, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.app, Name: "b"}}) }).Should(Succeed())
}

// TestHardeningTagMoved: a SyncTarget following a tag deploys the tag's new commit when the
// tag is moved (the revision names the commit, so a moved tag is never taken for the same
// revision), and a deleted tag is FetchFailed with the cluster untouched.
func TestHardeningTagMoved(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	g := NewWithT(t)
	c1 := sha(f.commit(map[string]string{"deploy/a.yaml": configMap("a", "1")}))
	c2 := sha(f.commit(map[string]string{"deploy/a.yaml": configMap("a", "2")}))
	f.repo.Tag(t, "release", c1)
	st := f.syncTarget("tagged", func(st *convergev1.SyncTarget) {
		st.Spec.Source.Ref = convergev1.GitRef{Tag: "release"}
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal("release@sha1:"+c1), ready(st).Message)
	})
	g.Expect(getCM(g, f.app, "a").Data["value"]).To(Equal("1"))

	f.repo.Tag(t, "release", c2)
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal("release@sha1:"+c2), ready(st).Message)
	})
	g.Expect(getCM(g, f.app, "a").Data["value"]).To(Equal("2"))

	f.repo.DeleteTag(t, "release")
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Reason).To(Equal(convergev1.FetchFailedReason))
		g.Expect(ready(st).Message).To(ContainSubstring(`tag "release" does not exist`))
		g.Expect(st.Status.LastAppliedRevision).To(Equal("release@sha1:" + c2))
	})
	g.Expect(getCM(g, f.app, "a").Data["value"]).To(Equal("2"))
}

// TestHardeningCredentialsRedacted: credentials in a failing URL (refused, unreachable) or in
// the credentials Secret appear nowhere in the SyncTarget's status or events.
func TestHardeningCredentialsRedacted(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	g := NewWithT(t)
	f.commit(map[string]string{"deploy/a.yaml": configMap("a", "1")})
	guarded := gittest.NewHTTPServer(t, filepath.Dir(f.repo.Dir), gittest.HTTPOptions{Username: "alice", Password: "right-password-90b1"})
	const urlToken, secretPassword, unreachableToken = "url-token-90b1", "secret-password-90b1", "url-token-unreachable-90b1"
	g.Expect(k8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: f.ns},
		Data:       map[string][]byte{"username": []byte("alice"), "password": []byte(secretPassword)},
	})).To(Succeed())
	withCreds := func(u, user, password string) string {
		return strings.Replace(u, "http://", "http://"+user+":"+password+"@", 1)
	}

	targets := []*convergev1.SyncTarget{
		f.syncTarget("token-in-url", func(st *convergev1.SyncTarget) {
			st.Spec.Source.URL = withCreds(guarded.RepoURL(f.repo), "alice", urlToken)
		}),
		f.syncTarget("token-as-username", func(st *convergev1.SyncTarget) {
			st.Spec.Source.URL = withCreds(guarded.RepoURL(f.repo), urlToken, "x-oauth-basic")
		}),
		f.syncTarget("secret-password", func(st *convergev1.SyncTarget) {
			st.Spec.Source.URL = guarded.RepoURL(f.repo)
			st.Spec.Source.SecretRef = &convergev1.LocalObjectReference{Name: "creds"}
		}),
		f.syncTarget("unreachable", func(st *convergev1.SyncTarget) {
			st.Spec.Source.URL = "http://x-access-token:" + unreachableToken + "@127.0.0.1:1/org/app.git"
		}),
	}
	for _, st := range targets {
		eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(ready(st).Reason).To(Equal(convergev1.FetchFailedReason))
			g.Expect(ready(st).Message).To(Or(ContainSubstring("authentication failed"), ContainSubstring("unreachable")))
			g.Expect(eventsOf(g, st)).NotTo(BeEmpty())
		})
		t.Logf("%s: %s", st.Name, ready(get(g, st)).Message)
		noSecretAnywhere(g, st, urlToken, secretPassword, unreachableToken)
	}
	err := k8s.Get(ctx, client.ObjectKey{Namespace: f.app, Name: "a"}, &corev1.ConfigMap{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "nothing applied")
}

// TestHardeningSecretRefOtherNamespace: a SyncTarget cannot use a Secret of another namespace,
// neither for git credentials nor for webhook signatures: its references are looked up in its
// own namespace only, and a name with a namespace in it is refused.
func TestHardeningSecretRefOtherNamespace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	g := NewWithT(t)
	rev := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "1")})
	f.repo.Commit(t, "hooked", map[string]string{"hooked/h.yaml": configMap("h", "1")})
	guarded := gittest.NewHTTPServer(t, filepath.Dir(f.repo.Dir), gittest.HTTPOptions{Username: "alice", Password: "right-password-4a7"})
	creds := func(ns string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: ns},
			Data: map[string][]byte{"username": []byte("alice"), "password": []byte("right-password-4a7")}}
	}
	// Valid credentials, in the namespace of the tenant's applications, not in its own.
	g.Expect(k8s.Create(ctx, creds(f.app))).To(Succeed())

	st := f.syncTarget("creds", func(st *convergev1.SyncTarget) {
		st.Spec.Source.URL = guarded.RepoURL(f.repo)
		st.Spec.Source.SecretRef = &convergev1.LocalObjectReference{Name: "creds"}
	})
	qualified := f.syncTarget("qualified", func(st *convergev1.SyncTarget) {
		st.Spec.Source.URL = guarded.RepoURL(f.repo)
		st.Spec.Source.SecretRef = &convergev1.LocalObjectReference{Name: f.app + "/creds"}
		st.Spec.Path = "elsewhere"
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Reason).To(Equal(convergev1.FetchFailedReason))
		g.Expect(ready(st).Message).To(ContainSubstring("secret " + f.ns + "/creds"))
		g.Expect(ready(st).Message).To(ContainSubstring("not found"))
	})
	eventually(t, qualified, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Reason).To(Equal(convergev1.FetchFailedReason))
		g.Expect(ready(st).Message).To(ContainSubstring("invalid resource name"))
	})
	t.Logf("%s: %s", qualified.Name, ready(get(g, qualified)).Message)
	g.Expect(guarded.Stats().InfoRefs).To(BeZero(), "the other namespace's credentials were never used")

	// The same Secret in its own namespace works: the failure was the namespace.
	g.Expect(k8s.Create(ctx, creds(f.ns))).To(Succeed())
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev), ready(st).Message)
	})

	// Webhooks: the token of another namespace's Secret signs nothing for this SyncTarget.
	g.Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: f.app},
		Data: map[string][]byte{"token": []byte("other-namespace-token")}})).To(Succeed())
	hooked := f.syncTarget("hooked", func(st *convergev1.SyncTarget) {
		st.Spec.Source.Ref = convergev1.GitRef{Branch: "hooked"}
		st.Spec.Source.Interval = &metav1.Duration{Duration: time.Hour}
		st.Spec.Source.WebhookSecretRef = &convergev1.LocalObjectReference{Name: "hook"}
		st.Spec.Path = "hooked"
	})
	first := "hooked@sha1:" + f.repo.Head(t, "hooked")
	eventually(t, hooked, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(first), ready(st).Message)
	})
	// Its poller has made its first poll: the next one is an hour away.
	g.Eventually(func() string {
		ev, _ := hooks.Scheduler.Latest(client.ObjectKeyFromObject(hooked).String())
		return ev.Revision.String()
	}).WithTimeout(30 * time.Second).Should(Equal(first))
	next := "hooked@sha1:" + f.repo.Commit(t, "hooked", map[string]string{"hooked/h.yaml": configMap("h", "2")})
	g.Expect(pushWebhook(g, f.url, "other-namespace-token")).To(Equal(401))
	g.Consistently(func(g Gomega) {
		g.Expect(get(g, hooked).Status.LastFetchedRevision).To(Equal(first))
	}).WithTimeout(2 * time.Second).Should(Succeed())

	g.Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: f.ns},
		Data: map[string][]byte{"token": []byte("own-namespace-token")}})).To(Succeed())
	// Once the receiver's token cache has expired (TokenTTL), its token is accepted.
	g.Eventually(func(g Gomega) int { return pushWebhook(g, f.url, "own-namespace-token") }).
		WithTimeout(10 * time.Second).WithPolling(250 * time.Millisecond).Should(Equal(202))
	eventually(t, hooked, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(next), ready(st).Message)
	})
}

// TestHardeningTenantCannotWriteOutside: a tenant (serviceAccountName) whose commit adds an
// object in a namespace it may not write, or a cluster-scoped object, gets nothing of that
// commit applied — not even its allowed changes — and Ready=False with the API server's
// "forbidden"; the denial is not retried while the commit stays the same.
func TestHardeningTenantCannotWriteOutside(t *testing.T) {
	f := newFixture(t)
	g := NewWithT(t)
	tenant(g, f)
	outside := namespace(g, "outside-"+f.app)
	rev := f.commit(map[string]string{"deploy/a.yaml": configMapIn(f.app, "a", "1")})
	st := f.syncTarget("tenant", func(st *convergev1.SyncTarget) {
		st.Spec.ServiceAccountName = "deployer"
		st.Spec.TargetNamespace = "" // the namespaces in Git count
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev), ready(st).Message)
	})

	for _, tc := range []struct {
		name  string
		file  string
		check func(g Gomega)
	}{
		{name: "another namespace", file: configMapIn(outside, "x", "intruder"), check: func(g Gomega) {
			gone(g, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: outside, Name: "x"}})
		}},
		{name: "cluster-scoped", file: "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: escalate-" + f.app + "}\n" +
			"rules: [{apiGroups: ['*'], resources: ['*'], verbs: ['*']}]\n", check: func(g Gomega) {
			gone(g, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "escalate-" + f.app}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			bad := f.commit(map[string]string{"deploy/a.yaml": configMapIn(f.app, "a", "changed"), "deploy/x.yaml": tc.file})
			eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
				g.Expect(st.Status.History[0].Revision).To(Equal(bad))
				g.Expect(st.Status.History[0].Result).NotTo(Equal(convergev1.SyncSucceeded))
				g.Expect(ready(st).Status).To(Equal(metav1.ConditionFalse))
				g.Expect(ready(st).Message).To(ContainSubstring("forbidden"))
				g.Expect(st.Status.LastAppliedRevision).To(Equal(rev))
			})
			t.Logf("%s", ready(get(g, st)).Message)
			g.Expect(getCM(g, f.app, "a").Data["value"]).To(Equal("1"), "the allowed change of the commit was not applied either")
			tc.check(g)

			// Reported once, not retried: the history, the status and the API traffic stay still.
			history := len(get(g, st).Status.History)
			sent := requests.Load()
			g.Consistently(func(g Gomega) {
				now := get(g, st)
				g.Expect(now.Status.History).To(HaveLen(history))
				g.Expect(now.Status.LastAttemptedRevision).To(Equal(bad))
			}).WithTimeout(4 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())
			t.Logf("%d API requests in 4s after the denial", requests.Load()-sent)
			g.Expect(requests.Load()-sent).To(BeNumerically("<", 60), "no hot loop")
		})
	}
}

// TestHardeningPruneIsImpersonated: once a SyncTarget impersonates a service account, what it
// deployed before in a namespace that account cannot touch is not pruned when it leaves Git:
// the prune is denied, reported (PruneFailed, the object stays in the inventory) and retried
// with a growing backoff, not in a hot loop; given the rights, it goes.
func TestHardeningPruneIsImpersonated(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	g := NewWithT(t)
	outside := namespace(g, "outside-"+f.app)
	rev := f.commit(map[string]string{
		"deploy/a.yaml": configMapIn(f.app, "a", "1"),
		"deploy/b.yaml": configMapIn(outside, "b", "1"),
	})
	st := f.syncTarget("tenant", func(st *convergev1.SyncTarget) { st.Spec.TargetNamespace = "" })
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev), ready(st).Message)
	})

	// The SyncTarget is handed to a tenant that may only touch f.app: the same commit now
	// fails (b is outside), and nothing is pruned.
	tenant(g, f)
	latest := get(g, st)
	latest.Spec.ServiceAccountName = "deployer"
	g.Expect(k8s.Update(ctx, latest)).To(Succeed())
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.ObservedGeneration).To(Equal(st.Generation))
		g.Expect(ready(st).Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready(st).Message).To(ContainSubstring("forbidden"))
	})

	pruned := f.remove("deploy/b.yaml")
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastAttemptedRevision).To(Equal(pruned))
		g.Expect(ready(st).Reason).To(Equal(convergev1.PruneFailedReason))
		g.Expect(ready(st).Message).To(ContainSubstring("forbidden"))
		g.Expect(st.Status.Inventory.Entries).To(ContainElement(HaveField("ID", outside+"_b__ConfigMap")))
	})
	t.Logf("%s", ready(get(g, st)).Message)
	g.Expect(getCM(g, outside, "b").Data["value"]).To(Equal("1"), "not deleted with rights the tenant lacks")

	errorsBefore := metricValue(g, "controller_runtime_reconcile_errors_total", "controller", "synctarget")
	g.Consistently(func(g Gomega) {
		g.Expect(getCM(g, outside, "b").Data["value"]).To(Equal("1"))
		g.Expect(ready(get(g, st)).Reason).To(Equal(convergev1.PruneFailedReason))
	}).WithTimeout(5 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())
	retries := metricValue(g, "controller_runtime_reconcile_errors_total", "controller", "synctarget") - errorsBefore
	t.Logf("%v failed reconciles in 5s while the prune is denied", retries)
	g.Expect(retries).To(BeNumerically("<=", 12), "retried with a backoff, not in a hot loop")

	grant(g, f, outside, "*")
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Status).To(Equal(metav1.ConditionTrue), ready(st).Message)
		g.Expect(st.Status.Inventory.Entries).To(HaveLen(1))
	})
	gone(g, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: outside, Name: "b"}})
}

// TestHardeningSecretValueNotEchoed: Secrets in a commit that the API server refuses — an
// invalid key, a value of the wrong type, data that is not base64, a change to an immutable
// Secret — fail the commit without their values appearing in the status, the history or the
// events.
func TestHardeningSecretValueNotEchoed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	g := NewWithT(t)
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	good := f.commit(map[string]string{
		"deploy/a.yaml":      configMap("a", "1"),
		"deploy/frozen.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: frozen}\nimmutable: true\ndata: {key: " + b64("frozen-value-1") + "}\n",
	})
	st := f.syncTarget("secrets", nil)
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(good), ready(st).Message)
	})

	var secrets []string
	for _, tc := range []struct {
		name   string
		value  string
		change gittest.Change
	}{
		{name: "invalid data key", value: "value-of-a-bad-key-31d",
			change: gittest.Change{Path: "deploy/bad.yaml", Content: "apiVersion: v1\nkind: Secret\nmetadata: {name: bad-key}\ndata:\n  'bad key!': " + b64("value-of-a-bad-key-31d") + "\n"}},
		{name: "stringData value of the wrong type", value: "value-in-a-list-31d",
			change: gittest.Change{Path: "deploy/bad.yaml", Content: "apiVersion: v1\nkind: Secret\nmetadata: {name: wrong-type}\nstringData:\n  password: [value-in-a-list-31d]\n"}},
		{name: "data value of the wrong type", value: "value-in-a-map-31d",
			change: gittest.Change{Path: "deploy/bad.yaml", Content: "apiVersion: v1\nkind: Secret\nmetadata: {name: wrong-map}\ndata:\n  password: {nested: value-in-a-map-31d}\n"}},
		{name: "stringData value that is a number", value: "73915284",
			change: gittest.Change{Path: "deploy/bad.yaml", Content: "apiVersion: v1\nkind: Secret\nmetadata: {name: a-number}\nstringData:\n  pin: 73915284\n"}},
		{name: "data that is not base64", value: "value-not-base64-31d",
			change: gittest.Change{Path: "deploy/bad.yaml", Content: "apiVersion: v1\nkind: Secret\nmetadata: {name: not-base64}\ndata:\n  password: '!!value-not-base64-31d'\n"}},
		{name: "immutable Secret changed", value: "frozen-value-2-31d",
			change: gittest.Change{Path: "deploy/frozen.yaml", Content: "apiVersion: v1\nkind: Secret\nmetadata: {name: frozen}\nimmutable: true\ndata: {key: " + b64("frozen-value-2-31d") + "}\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			secrets = append(secrets, tc.value, b64(tc.value))
			changes := []gittest.Change{tc.change}
			if tc.change.Path != "deploy/bad.yaml" {
				changes = append(changes, gittest.Change{Path: "deploy/bad.yaml", Delete: true})
			}
			bad := "main@sha1:" + f.repo.CommitChanges(t, "main", changes...)
			eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
				g.Expect(st.Status.History[0].Revision).To(Equal(bad))
				g.Expect(st.Status.History[0].Result).NotTo(Equal(convergev1.SyncSucceeded))
				g.Expect(ready(st).Status).To(Equal(metav1.ConditionFalse))
				g.Expect(ready(st).Message).To(ContainSubstring("Secret"))
			})
			t.Logf("%s", ready(get(g, st)).Message)
			noSecretAnywhere(g, st, secrets...)
		})
	}
	frozen := &corev1.Secret{}
	g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: f.app, Name: "frozen"}, frozen)).To(Succeed())
	g.Expect(string(frozen.Data["key"])).To(Equal("frozen-value-1"))
}

// TestHardeningDefaultServiceAccount: with Reconciler.DefaultServiceAccount set (the
// --default-service-account flag), a SyncTarget naming no service account applies with the
// rights of that account — none here — while one naming its own account gets that account's
// rights. The shared reconciler of the suite has no default account, so this drives a
// Reconciler of its own, reading its SyncTargets from a fake client and applying to the real
// API server.
func TestHardeningDefaultServiceAccount(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	g := NewWithT(t)
	tenant(g, f)

	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	g.Expect(convergev1.AddToScheme(scheme)).To(Succeed())
	httpClient, err := rest.HTTPClientFor(admin)
	g.Expect(err).NotTo(HaveOccurred())
	mapper, err := apiutil.NewDynamicRESTMapper(admin, httpClient)
	g.Expect(err).NotTo(HaveOccurred())
	dir := t.TempDir()
	g.Expect(os.MkdirAll(filepath.Join(dir, "deploy"), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, "deploy", "cm.yaml"), []byte(configMap("defaulted", "1")), 0o644)).To(Succeed())

	newTarget := func(name, serviceAccount string) *convergev1.SyncTarget {
		return &convergev1.SyncTarget{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Generation: 1},
			Spec: convergev1.SyncTargetSpec{
				Source:             convergev1.GitSource{URL: f.url, Ref: convergev1.GitRef{Branch: "main"}},
				Path:               "deploy",
				TargetNamespace:    f.app,
				ServiceAccountName: serviceAccount,
			},
		}
	}
	nobody, own, daemon := newTarget("nobody", ""), newTarget("own", "deployer"), newTarget("daemon", "")
	c := fake.NewClientBuilder().WithScheme(scheme).WithRESTMapper(mapper).
		WithObjects(nobody, own, daemon).WithStatusSubresource(&convergev1.SyncTarget{}).Build()
	newReconciler := func(defaultServiceAccount string) *reconciler.Reconciler {
		return &reconciler.Reconciler{
			Client: c, Fetcher: dirFetcher(dir), Renderer: reconciler.KustomizeRenderer{Mapper: mapper},
			Applier: apply.Applier{}, Clock: clock.RealClock{}, DefaultServiceAccount: defaultServiceAccount,
			Clusters: cluster.NewSet(cluster.NewLocal(cluster.LocalOptions{Config: admin, Scheme: scheme, Mapper: mapper}), nil),
		}
	}
	run := func(r *reconciler.Reconciler, st *convergev1.SyncTarget) *metav1.Condition {
		_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(st)})
		g.Expect(err).NotTo(HaveOccurred())
		out := &convergev1.SyncTarget{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(st), out)).To(Succeed())
		cond := apimeta.FindStatusCondition(out.Status.Conditions, convergev1.ReadyCondition)
		g.Expect(cond).NotTo(BeNil())
		return cond
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.app, Name: "defaulted"}}

	locked := newReconciler("converge-tenant-default")
	cond := run(locked, nobody)
	t.Logf("no serviceAccountName, with a default: %s", cond.Message)
	g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(cond.Message).To(And(ContainSubstring("forbidden"),
		ContainSubstring("system:serviceaccount:"+f.ns+":converge-tenant-default")))
	gone(g, cm)

	cond = run(locked, own)
	g.Expect(cond.Status).To(Equal(metav1.ConditionTrue), cond.Message)
	g.Expect(getCM(g, f.app, "defaulted").Labels).To(HaveKeyWithValue(convergev1.NameLabel, "own"))
	g.Expect(k8s.Delete(ctx, cm)).To(Succeed())

	// The same SyncTarget without the default applies with the daemon's own rights.
	cond = run(newReconciler(""), daemon)
	g.Expect(cond.Status).To(Equal(metav1.ConditionTrue), cond.Message)
	g.Expect(getCM(g, f.app, "defaulted").Labels).To(HaveKeyWithValue(convergev1.NameLabel, "daemon"))
	g.Expect(k8s.Delete(ctx, cm)).To(Succeed())
}

// pushWebhook sends the suite's webhook receiver a push of repoURL signed with secret.
func pushWebhook(g Gomega, repoURL, secret string) int {
	srv := httptest.NewServer(sources.NewWebhookHandler(hooks, hooks, sources.WebhookOptions{}))
	defer srv.Close()
	body := []byte(fmt.Sprintf(`{"repository": {"url": %q}}`, repoURL))
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	req, err := http.NewRequest(http.MethodPost, srv.URL+sources.WebhookPath, bytes.NewReader(body))
	g.Expect(err).NotTo(HaveOccurred())
	req.Header.Set("X-Signature", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	resp, err := srv.Client().Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	return resp.StatusCode
}

// dirFetcher serves one fixed tree as the revision of every SyncTarget.
func dirFetcher(dir string) *reconcilertest.Fetcher {
	f := reconcilertest.NewFetcher("main@sha1:" + strings.Repeat("d", 40))
	f.Dir = dir
	return f
}
