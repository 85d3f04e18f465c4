package fleet

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
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
