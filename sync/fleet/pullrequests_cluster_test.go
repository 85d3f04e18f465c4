package fleet

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/forgetest"
)

// A set of previews follows the open pull requests: a maintainer's pull request yields a
// preview at once, a fork's only once labelled, a closed one's preview is deleted; the
// set's status says which pull request waits and why.
func TestPullRequestsYieldPreviewsUntilClosed(t *testing.T) {
	ns := cluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	gh := forgetest.NewGitHub(t, "o/app", "s3cret")
	gh.Writer("maintainer")
	gh.Open(1, "feature/login", strings.Repeat("1", 40), "maintainer", false)
	gh.Open(2, "typo", strings.Repeat("2", 40), "visitor", true)
	g.Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "forge"},
		StringData: map[string]string{"token": "s3cret"}})).To(Succeed())

	set := &convergev1.SyncTargetSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "previews"},
		Spec: convergev1.SyncTargetSetSpec{
			Generators: []convergev1.Generator{{PullRequests: &convergev1.PullRequestsGenerator{
				Provider: convergev1.GitHubForge, Address: gh.URL, Repository: "o/app",
				TokenSecretRef: &convergev1.LocalObjectReference{Name: "forge"}, ServiceAccountName: "previews",
				Interval: &metav1.Duration{Duration: time.Hour},
			}}},
			Template: convergev1.SyncTargetTemplate{
				Metadata: convergev1.SyncTargetTemplateMeta{Name: "preview-{{ .number }}",
					Annotations: map[string]string{"converge.dev/pull-request": "{{ .url }}"}},
				Spec: spec(g, map[string]any{
					"source":          map[string]any{"url": "https://github.example/o/app.git", "ref": map[string]any{"name": "{{ .headRef }}"}},
					"targetNamespace": "preview-{{ .number }}-{{ .slug }}", "prune": true, "serviceAccountName": "previews",
				}),
			},
		}}
	createSet(t, set)
	eventually(t, func(g Gomega) {
		got := generated(g, ns, "previews")
		g.Expect(got).To(HaveLen(1))
		st := got["preview-1"]
		g.Expect(st).NotTo(BeNil())
		g.Expect(st.Spec.Source.Ref.Name).To(Equal("refs/pull/1/head"))
		g.Expect(st.Spec.TargetNamespace).To(Equal("preview-1-feature-login"))
		g.Expect(st.Spec.ServiceAccountName).To(Equal("previews"))
		s := getSet(g, ns, "previews")
		g.Expect(s.Status.PullRequests).To(HaveLen(2))
		g.Expect(s.Status.PullRequests[0].SyncTargets).To(Equal([]string{"preview-1"}))
		g.Expect(s.Status.PullRequests[1].Waiting).To(ContainSubstring(`from a fork: waits for a maintainer to add the label "preview-approved"`))
		g.Expect(s.Status.PullRequests[1].URL).To(Equal("https://github.example/o/app/pull/2"))
	})

	// Each pull request carries one comment of the set: the fork's says why it waits.
	eventually(t, func(g Gomega) {
		c := gh.Comments(2)
		g.Expect(c).To(HaveLen(1))
		g.Expect(c[0].Body).To(HavePrefix("<!-- converge-preview " + ns + "/previews -->"))
		g.Expect(c[0].Body).To(ContainSubstring(`**Not deployed**: from a fork: waits for a maintainer to add the label &#34;preview-approved&#34;.`))
		g.Expect(gh.Comments(1)).To(HaveLen(1))
		g.Expect(gh.Comments(1)[0].Body).To(ContainSubstring("- `preview-1`: 🔄 **Deploying** `1111111`…"))
	})
	// A marker comment by somebody else is never the set's.
	gh.AddComment(2, "visitor", "<!-- converge-preview "+ns+"/previews --> mine")

	key := client.ObjectKey{Namespace: ns, Name: "previews"}
	gh.Label(2, "preview-approved")
	forges.WakeSet(key)
	eventually(t, func(g Gomega) {
		g.Expect(generated(g, ns, "previews")).To(HaveKey("preview-2"))
		c := gh.Comments(2)
		g.Expect(c).To(HaveLen(2), "the set's comment is edited in place")
		g.Expect(c[0].Body).To(ContainSubstring("- `preview-2`: 🔄 **Deploying** `2222222`…"))
		g.Expect(c[1].Body).To(HaveSuffix(" mine"), "a marker comment by somebody else is left alone")
	})

	gh.Close(1)
	forges.WakeSet(key)
	eventually(t, func(g Gomega) {
		got := generated(g, ns, "previews")
		g.Expect(got).NotTo(HaveKey("preview-1"), "a closed pull request's preview is deleted")
		g.Expect(got).To(HaveKey("preview-2"))
		g.Expect(getSet(g, ns, "previews").Status.PullRequests).To(HaveLen(1))
	})

	// Without a webhook, the listing holds for the interval: the status changes of the
	// SyncTargets do not ask the forge again.
	before := gh.Lists()
	markTarget(t, ns, "preview-2", metav1.ConditionTrue, "Succeeded")
	eventually(t, func(g Gomega) {
		s := getSet(g, ns, "previews")
		g.Expect(s.Status.Targets).To(HaveLen(1))
		g.Expect(s.Status.Targets[0].Ready).To(Equal(metav1.ConditionTrue))
	})
	g.Expect(gh.Lists()).To(Equal(before))
}

// A set whose template lets previews run as another service account than its pullRequests
// generator names is refused before the forge is asked.
func TestPreviewsAsAnotherServiceAccountAreRefused(t *testing.T) {
	ns := cluster(t)
	g := NewWithT(t)
	gh := forgetest.NewGitHub(t, "o/app", "s3cret")
	set := &convergev1.SyncTargetSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lifted"},
		Spec: convergev1.SyncTargetSetSpec{
			Generators: []convergev1.Generator{{PullRequests: &convergev1.PullRequestsGenerator{
				Provider: convergev1.GitHubForge, Address: gh.URL, Repository: "o/app", ServiceAccountName: "previews"}}},
			Template: convergev1.SyncTargetTemplate{
				Metadata: convergev1.SyncTargetTemplateMeta{Name: "preview-{{ .number }}"},
				Spec: spec(g, map[string]any{
					"source":             map[string]any{"url": "https://github.example/o/app.git", "ref": map[string]any{"name": "{{ .headRef }}"}},
					"serviceAccountName": "{{ .author }}",
				}),
			},
		}}
	createSet(t, set)
	eventually(t, func(g Gomega) {
		c := setReady(getSet(g, ns, "lifted"))
		g.Expect(c.Reason).To(Equal(convergev1.TemplateInvalidReason))
		g.Expect(c.Message).To(ContainSubstring("must be the same, as written"))
	})
	g.Expect(gh.Lists()).To(BeZero())
}

// A set with createNamespace creates each preview's namespace, labelled as its own, and
// deletes it when the preview goes and when the set is deleted; a namespace that exists
// and is not the set's is refused.
func TestPreviewNamespacesComeAndGoWithTheirPreviews(t *testing.T) {
	ns := cluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	gh := forgetest.NewGitHub(t, "o/app", "")
	gh.Writer("maintainer")
	gh.Open(1, "one", strings.Repeat("1", 40), "maintainer", false)
	gh.Open(2, "two", strings.Repeat("2", 40), "maintainer", false)
	nsOf := func(n int) string { return fmt.Sprintf("%s-pr-%d", ns, n) }

	set := &convergev1.SyncTargetSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "previews"},
		Spec: convergev1.SyncTargetSetSpec{
			Generators: []convergev1.Generator{{PullRequests: &convergev1.PullRequestsGenerator{
				Provider: convergev1.GitHubForge, Address: gh.URL, Repository: "o/app", ServiceAccountName: "previews",
				CreateNamespace: true, DisableComments: true, Interval: &metav1.Duration{Duration: time.Hour},
			}}},
			Template: convergev1.SyncTargetTemplate{
				Metadata: convergev1.SyncTargetTemplateMeta{Name: "preview-{{ .number }}"},
				Spec: spec(g, map[string]any{
					"source":          map[string]any{"url": "https://github.example/o/app.git", "ref": map[string]any{"name": "{{ .headRef }}"}},
					"targetNamespace": ns + "-pr-{{ .number }}", "prune": true, "serviceAccountName": "previews",
				}),
			},
		}}
	createSet(t, set)
	// Until its service account may create namespaces, the set creates none and says why.
	eventually(t, func(g Gomega) {
		c := setReady(getSet(g, ns, "previews"))
		g.Expect(c.Reason).To(Equal(convergev1.GenerationFailedReason))
		g.Expect(c.Message).To(ContainSubstring(`cannot create resource "namespaces"`))
		g.Expect(generated(g, ns, "previews")).To(BeEmpty())
	})
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ns + "-previews"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "create", "delete"}}}}
	g.Expect(k8s.Create(ctx, role)).To(Succeed())
	g.Expect(k8s.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ns + "-previews"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "previews", Namespace: ns}}})).To(Succeed())
	forges.WakeSet(client.ObjectKey{Namespace: ns, Name: "previews"})

	namespaceOf := func(g Gomega, name string) *corev1.Namespace {
		got := &corev1.Namespace{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, got)).To(Succeed())
		return got
	}
	eventually(t, func(g Gomega) {
		g.Expect(generated(g, ns, "previews")).To(HaveLen(2), "%+v", getSet(g, ns, "previews").Status.Conditions)
		for _, n := range []int{1, 2} {
			g.Expect(namespaceOf(g, nsOf(n)).Labels).To(HaveKeyWithValue(PreviewOfLabel, ns+".previews"))
		}
	})

	// Closed: its preview goes, and its namespace is deleted (no namespace controller runs
	// here to finish the deletion: it is marked).
	gh.Close(2)
	forges.WakeSet(client.ObjectKey{Namespace: ns, Name: "previews"})
	eventually(t, func(g Gomega) {
		g.Expect(generated(g, ns, "previews")).NotTo(HaveKey("preview-2"))
		n := &corev1.Namespace{}
		err := k8s.Get(ctx, client.ObjectKey{Name: nsOf(2)}, n)
		g.Expect(err == nil && n.DeletionTimestamp == nil).To(BeFalse(), "the namespace of a closed pull request is deleted")
		g.Expect(namespaceOf(g, nsOf(1)).DeletionTimestamp).To(BeNil())
	})

	// A namespace that is not the set's is never taken for a preview.
	g.Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsOf(3)}})).To(Succeed())
	gh.Open(3, "three", strings.Repeat("3", 40), "maintainer", false)
	forges.WakeSet(client.ObjectKey{Namespace: ns, Name: "previews"})
	eventually(t, func(g Gomega) {
		c := setReady(getSet(g, ns, "previews"))
		g.Expect(c.Reason).To(Equal(convergev1.TemplateInvalidReason))
		g.Expect(c.Message).To(ContainSubstring(fmt.Sprintf("namespace %q exists and is not this set's", nsOf(3))))
		g.Expect(generated(g, ns, "previews")).NotTo(HaveKey("preview-3"))
	})
	gh.Close(3)
	forges.WakeSet(client.ObjectKey{Namespace: ns, Name: "previews"})
	eventually(t, func(g Gomega) {
		g.Expect(setReady(getSet(g, ns, "previews")).Reason).NotTo(Equal(convergev1.TemplateInvalidReason))
	})

	// Deleted, the set deletes the namespaces it made, and only those.
	g.Expect(k8s.Delete(ctx, getSetNow(t, ns, "previews"))).To(Succeed())
	eventually(t, func(g Gomega) {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "previews"}, &convergev1.SyncTargetSet{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the set is gone once its namespaces are")
		n := &corev1.Namespace{}
		err = k8s.Get(ctx, client.ObjectKey{Name: nsOf(1)}, n)
		g.Expect(err == nil && n.DeletionTimestamp == nil).To(BeFalse())
		g.Expect(namespaceOf(g, nsOf(3)).DeletionTimestamp).To(BeNil(), "a namespace the set did not make stays")
	})
}

func getSetNow(t *testing.T, ns, name string) *convergev1.SyncTargetSet {
	t.Helper()
	set := &convergev1.SyncTargetSet{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, set); err != nil {
		t.Fatal(err)
	}
	return set
}
