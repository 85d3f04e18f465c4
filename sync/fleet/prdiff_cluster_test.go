package fleet

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/forgetest"
	"github.com/converge-gitops/converge/internal/gittest"
)

// A pull request's comment carries the diff of its preview at the head against what the
// base branch's SyncTarget applied, rendered as the preview renders: a Secret's values
// masked, a value read from a Secret redacted where the pull request copied it into a
// ConfigMap. Its commit status says the preview deploys, then that it is Ready.
func TestPreviewCommentCarriesItsDiff(t *testing.T) {
	ns := cluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	base := strings.TrimSpace(repo.Commit(t, "main", map[string]string{
		"app/cm.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  colour: blue\n",
		"app/secret.yaml": "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: old-password-1\n",
	}))
	head := strings.TrimSpace(repo.CommitOnto(t, "feature", base, gittest.Files(map[string]string{
		"app/cm.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  colour: green\n",
		"app/secret.yaml": "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: new-password-2\n",
		"app/leak.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: leak\ndata:\n  copied: \"token=${API_TOKEN}\"\n",
	})...))
	repo.SetRef(t, "refs/pull/7/head", head)

	g.Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vars"},
		StringData: map[string]string{"API_TOKEN": "tok-6b1e0c9d"}})).To(Succeed())
	g.Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "forge"},
		StringData: map[string]string{"token": "s3cret"}})).To(Succeed())
	// The previews' service account reads the variables' Secret: the diff reads them as it.
	g.Expect(k8s.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "previews"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"vars"}, Verbs: []string{"get"}}}})).To(Succeed())
	g.Expect(k8s.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "previews"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "previews"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "previews", Namespace: ns}}})).To(Succeed())

	// The base branch's SyncTarget, as if it had applied main.
	prod := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "prod"},
		Spec: convergev1.SyncTargetSpec{Source: convergev1.GitSource{URL: srv.RepoURL(repo), Ref: convergev1.GitRef{Branch: "main"}},
			Path: "app"}}
	g.Expect(k8s.Create(ctx, prod)).To(Succeed())
	prod.Status.LastAppliedRevision = "main@sha1:" + base
	g.Expect(k8s.Status().Update(ctx, prod)).To(Succeed())

	gh := forgetest.NewGitHub(t, "o/app", "s3cret")
	gh.Writer("maintainer")
	gh.Open(7, "feature", head, "maintainer", false)
	set := &convergev1.SyncTargetSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "previews"},
		Spec: convergev1.SyncTargetSetSpec{
			Generators: []convergev1.Generator{{PullRequests: &convergev1.PullRequestsGenerator{
				Provider: convergev1.GitHubForge, Address: gh.URL, Repository: "o/app", DiffAgainst: "prod",
				TokenSecretRef: &convergev1.LocalObjectReference{Name: "forge"}, ServiceAccountName: "previews",
				Interval: &metav1.Duration{Duration: time.Hour},
			}}},
			Template: convergev1.SyncTargetTemplate{
				Metadata: convergev1.SyncTargetTemplateMeta{Name: "preview-{{ .number }}"},
				Spec: spec(g, map[string]any{
					"source":          map[string]any{"url": srv.RepoURL(repo), "ref": map[string]any{"name": "{{ .headRef }}"}},
					"path":            "app",
					"targetNamespace": "preview-{{ .number }}", "serviceAccountName": "previews",
					"postBuild": map[string]any{"substituteFrom": []any{map[string]any{"kind": "Secret", "name": "vars"}}},
				}),
			},
		}}
	createSet(t, set)

	var body string
	eventually(t, func(g Gomega) {
		c := gh.Comments(7)
		g.Expect(c).To(HaveLen(1))
		body = c[0].Body
		g.Expect(body).To(ContainSubstring("### Diff of `" + head[:7] + "` against `main@sha1:" + base[:7] + "`"))
	})
	t.Logf("the comment:\n%s", body)
	g.Expect(body).To(ContainSubstring("**1 to create, 2 to change, 0 to prune, 0 unchanged**"))
	g.Expect(body).To(ContainSubstring("-  colour: blue\n+  colour: green"))
	g.Expect(body).To(ContainSubstring("copied: token=[redacted]"))
	g.Expect(body).To(ContainSubstring("password: '" + "*** (changed)'"))
	for _, secret := range []string{"tok-6b1e0c9d", "old-password-1", "new-password-2"} {
		g.Expect(body).NotTo(ContainSubstring(secret))
	}
	g.Expect(gh.Statuses(head)).To(ContainElement(forgetest.Status{State: "pending",
		Context: "converge/preview/" + ns + "/previews", Description: "deploying preview-7"}))

	// Ready at the head: the status says so, and the comment keeps one diff.
	markReadyAt(t, ns, "preview-7", "refs/pull/7/head@sha1:"+head)
	forges.WakeSet(client.ObjectKey{Namespace: ns, Name: "previews"})
	eventually(t, func(g Gomega) {
		st := gh.Statuses(head)
		g.Expect(st).NotTo(BeEmpty())
		g.Expect(st[len(st)-1]).To(Equal(forgetest.Status{State: "success",
			Context: "converge/preview/" + ns + "/previews", Description: "preview-7 Ready at " + head[:7]}))
		c := gh.Comments(7)
		g.Expect(c).To(HaveLen(1))
		g.Expect(c[0].Body).To(ContainSubstring("✅ **Ready** at `" + head[:7] + "`"))
		g.Expect(strings.Count(c[0].Body, "### Diff of")).To(Equal(1))
	})
}

// markReadyAt records the SyncTarget as Ready, having applied revision.
func markReadyAt(t *testing.T, ns, name, revision string) {
	t.Helper()
	eventually(t, func(g Gomega) {
		st := &convergev1.SyncTarget{}
		g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, st)).To(Succeed())
		st.Status.ObservedGeneration = st.Generation
		st.Status.LastAppliedRevision = revision
		st.Status.Conditions = []metav1.Condition{{Type: convergev1.ReadyCondition, Status: metav1.ConditionTrue,
			Reason: "Succeeded", Message: "set by the test", ObservedGeneration: st.Generation, LastTransitionTime: metav1.Now()}}
		g.Expect(k8s.Status().Update(context.Background(), st)).To(Succeed())
	})
}
