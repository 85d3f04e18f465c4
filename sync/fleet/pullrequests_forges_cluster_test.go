package fleet

import (
	"context"
	"fmt"
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

// previewForge is what a test of previews does with a fake forge.
type previewForge interface {
	Writer(user string)
	Open(n int, branch, sha, author string, fork bool, labels ...string)
	Label(n int, labels ...string)
	Close(n int)
	Comments(n int) []forgetest.Comment
	Statuses(sha string) []forgetest.Status
}

// On GitLab and Gitea as on GitHub, a maintainer's merge (pull) request yields a preview
// at its head ref, a fork's waits until labelled, each carries one comment of the set,
// edited in place, and a closed one's preview is deleted.
func TestPreviewsOnGitLabAndGitea(t *testing.T) {
	for _, tc := range []struct {
		provider convergev1.ForgeType
		repo     string
		start    func(t *testing.T, repo string) (string, previewForge)
		headRef  string // with %d for the number
		webURL   string // with %d for the number
	}{{
		provider: convergev1.GitLabForge, repo: "group/sub/app",
		start: func(t *testing.T, repo string) (string, previewForge) {
			f := forgetest.NewGitLab(t, repo, "s3cret")
			return f.URL, f
		},
		headRef: "refs/merge-requests/%d/head",
		webURL:  "https://gitlab.example/group/sub/app/-/merge_requests/%d",
	}, {
		provider: convergev1.GiteaForge, repo: "o/app",
		start: func(t *testing.T, repo string) (string, previewForge) {
			f := forgetest.NewGitea(t, repo, "s3cret")
			return f.URL, f
		},
		headRef: "refs/pull/%d/head",
		webURL:  "https://gitea.example/o/app/pulls/%d",
	}} {
		t.Run(string(tc.provider), func(t *testing.T) {
			t.Parallel() // each in a namespace of its own, with a forge of its own
			ns := cluster(t)
			g := NewWithT(t)
			ctx := context.Background()
			url, f := tc.start(t, tc.repo)
			f.Writer("maintainer")
			f.Open(1, "feature/login", strings.Repeat("1", 40), "maintainer", false)
			f.Open(2, "typo", strings.Repeat("2", 40), "visitor", true)
			g.Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "forge"},
				StringData: map[string]string{"token": "s3cret"}})).To(Succeed())

			set := &convergev1.SyncTargetSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "previews"},
				Spec: convergev1.SyncTargetSetSpec{
					Generators: []convergev1.Generator{{PullRequests: &convergev1.PullRequestsGenerator{
						Provider: tc.provider, Address: url, Repository: tc.repo,
						TokenSecretRef: &convergev1.LocalObjectReference{Name: "forge"}, ServiceAccountName: "previews",
						Interval: &metav1.Duration{Duration: time.Hour},
					}}},
					Template: convergev1.SyncTargetTemplate{
						Metadata: convergev1.SyncTargetTemplateMeta{Name: "preview-{{ .number }}"},
						Spec: spec(g, map[string]any{
							"source":          map[string]any{"url": "https://forge.example/" + tc.repo + ".git", "ref": map[string]any{"name": "{{ .headRef }}"}},
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
				g.Expect(st.Spec.Source.Ref.Name).To(Equal(fmt.Sprintf(tc.headRef, 1)))
				g.Expect(st.Spec.TargetNamespace).To(Equal("preview-1-feature-login"))
				s := getSet(g, ns, "previews")
				g.Expect(s.Status.PullRequests).To(HaveLen(2))
				g.Expect(s.Status.PullRequests[0].SyncTargets).To(Equal([]string{"preview-1"}))
				g.Expect(s.Status.PullRequests[1].Waiting).To(ContainSubstring(`from a fork: waits for a maintainer to add the label "preview-approved"`))
				g.Expect(s.Status.PullRequests[1].URL).To(Equal(fmt.Sprintf(tc.webURL, 2)))
			})
			marker := "<!-- converge-preview " + ns + "/previews -->"
			eventually(t, func(g Gomega) {
				c := f.Comments(2)
				g.Expect(c).To(HaveLen(1))
				g.Expect(c[0].User).To(Equal(forgetest.BotLogin))
				g.Expect(c[0].Body).To(HavePrefix(marker))
				g.Expect(c[0].Body).To(ContainSubstring("**Not deployed**: from a fork"))
				g.Expect(f.Comments(1)).To(HaveLen(1))
				g.Expect(f.Comments(1)[0].Body).To(ContainSubstring("- `preview-1`: 🔄 **Deploying** `1111111`…"))
			})

			// The head's commit status: pending while the preview deploys, success once it
			// is Ready there; the fork's waiting head gets none.
			head1 := strings.Repeat("1", 40)
			statusName := "converge/preview/" + ns + "/previews"
			eventually(t, func(g Gomega) {
				g.Expect(f.Statuses(head1)).To(Equal([]forgetest.Status{{State: "pending", Context: statusName, Description: "deploying preview-1"}}))
			})
			markReadyAt(t, ns, "preview-1", fmt.Sprintf(tc.headRef, 1)+"@sha1:"+head1)
			eventually(t, func(g Gomega) {
				st := f.Statuses(head1)
				g.Expect(st).To(HaveLen(2))
				g.Expect(st[1]).To(Equal(forgetest.Status{State: "success", Context: statusName, Description: "preview-1 Ready at 1111111"}))
			})
			g.Expect(f.Statuses(strings.Repeat("2", 40))).To(BeEmpty())

			key := client.ObjectKey{Namespace: ns, Name: "previews"}
			f.Label(2, "preview-approved")
			forges.WakeSet(key)
			eventually(t, func(g Gomega) {
				got := generated(g, ns, "previews")
				g.Expect(got).To(HaveKey("preview-2"))
				g.Expect(got["preview-2"].Spec.Source.Ref.Name).To(Equal(fmt.Sprintf(tc.headRef, 2)))
				c := f.Comments(2)
				g.Expect(c).To(HaveLen(1), "the set's comment is edited in place")
				g.Expect(c[0].Body).To(ContainSubstring("- `preview-2`: 🔄 **Deploying** `2222222`…"))
			})

			f.Close(1)
			forges.WakeSet(key)
			eventually(t, func(g Gomega) {
				got := generated(g, ns, "previews")
				g.Expect(got).NotTo(HaveKey("preview-1"), "a closed merge request's preview is deleted")
				g.Expect(got).To(HaveKey("preview-2"))
				g.Expect(getSet(g, ns, "previews").Status.PullRequests).To(HaveLen(1))
			})
			g.Expect(f.Comments(1)).To(HaveLen(1), "never a second comment")
			g.Expect(f.Comments(2)).To(HaveLen(1), "never a second comment")
		})
	}
}
