package fleet

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/gittest"
	"github.com/converge-gitops/converge/sources"
)

// paths are the path parameters of a generation.
func paths(got Generated) []string {
	out := make([]string, 0, len(got.Params))
	for _, p := range got.Params {
		out = append(out, p["path"])
	}
	return out
}

// A gitDirectories source with verify lists only revisions signed by a trusted key, as a
// SyncTarget's are checked: an unsigned push, or one signed by another key, neither adds
// nor removes a directory (the last verified listing stays, and says why); with no
// verified listing, nothing is generated.
func TestGitDirectoriesVerify(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "fleet")
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	alice, alicePub := gittest.OpenPGPKey(t, "Alice", "alice@example.com")
	bob, _, bobPub := gittest.SSHSigningKey(t)
	signed := repo.SignedCommit(t, "main", alice, map[string]string{"apps/web/k.yaml": "a", "apps/api/k.yaml": "b"})

	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	keys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "trusted-keys"},
		Data: map[string][]byte{"alice.asc": []byte(alicePub)}}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(keys).Build()
	cache, err := sources.NewCache(sources.CacheOptions{Dir: t.TempDir()})
	g.Expect(err).NotTo(HaveOccurred())
	clock := clocktesting.NewFakePassiveClock(time.Now())
	env := Env{Namespace: "team", Dirs: &GitLister{Reader: reader, Cache: cache, Clock: clock}}
	source := convergev1.GitSource{URL: srv.RepoURL(repo), Ref: convergev1.GitRef{Branch: "main"},
		Interval: &metav1.Duration{Duration: time.Minute},
		Verify:   &convergev1.VerifySpec{SecretRef: convergev1.LocalObjectReference{Name: "trusted-keys"}}}
	gens := []convergev1.Generator{{GitDirectories: &convergev1.GitDirectoriesGenerator{Source: source, Include: []string{"apps/*"}}}}
	poll := func() (Generated, error) {
		clock.SetTime(clock.Now().Add(time.Minute))
		return Generate(ctx, env, gens)
	}

	got, err := Generate(ctx, env, gens)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(paths(got)).To(Equal([]string{"apps/api", "apps/web"}))
	g.Expect(got.Refused).To(BeEmpty())
	g.Expect(got.Verified).To(ConsistOf(MatchRegexp(
		`^generators\[0\]: verified commit %s signed by OpenPGP key [0-9A-F]{40} \(Alice <alice@example.com>\)$`, signed[:12])))

	// An unsigned push removing apps/api and adding apps/evil changes nothing.
	unsigned := strings.TrimSpace(repo.CommitChanges(t, "main", gittest.Change{Path: "apps/evil/k.yaml", Content: "x"},
		gittest.Change{Path: "apps/api/k.yaml", Delete: true}))
	got, err = poll()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(paths(got)).To(Equal([]string{"apps/api", "apps/web"}))
	g.Expect(got.Refused).To(ConsistOf("generators[0]: revision main@sha1:" + unsigned + ": commit " + unsigned[:12] +
		" is not signed: the directories of commit " + signed[:12] + ", the last that verified, are listed"))
	g.Expect(got.Verified).To(HaveLen(1), "the listing is still the verified one")

	// Nor does a push signed by a key that is not trusted.
	repo.SignedCommit(t, "main", bob, map[string]string{"apps/bob/k.yaml": "x"})
	got, err = poll()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(paths(got)).To(Equal([]string{"apps/api", "apps/web"}))
	g.Expect(got.Refused).To(ConsistOf(ContainSubstring("is signed by SSH key " + ssh.FingerprintSHA256(bobPub) + ", which is not trusted")))

	// A daemon that has listed no verified revision of the source generates nothing.
	fresh := Env{Namespace: "team", Dirs: &GitLister{Reader: reader, Cache: cache, Clock: clock}}
	_, err = Generate(ctx, fresh, gens)
	g.Expect(err).To(MatchError(sources.ErrVerificationFailed))
	g.Expect(err).To(MatchError(ContainSubstring("no revision of " + source.URL + " verified yet, nothing is generated from it")))

	// Without verify, the same source lists what was pushed: the verified listing is
	// another.
	plain := gens[0].GitDirectories.DeepCopy()
	plain.Source.Verify = nil
	got, err = Generate(ctx, env, []convergev1.Generator{{GitDirectories: plain}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(paths(got)).To(Equal([]string{"apps/bob", "apps/evil", "apps/web"}))
	g.Expect(got.Verified).To(BeEmpty())

	// Alice signs the next commit: its directories are listed.
	next := signedPush(t, repo, alice, map[string]string{"apps/db/k.yaml": "x"})
	got, err = poll()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(paths(got)).To(Equal([]string{"apps/bob", "apps/db", "apps/evil", "apps/web"}))
	g.Expect(got.Refused).To(BeEmpty())
	g.Expect(got.Verified).To(ConsistOf(ContainSubstring("verified commit " + next[:12])))

	// Keys that are missing fail the generation, as they fail a SyncTarget.
	g.Expect(reader.Delete(ctx, keys)).To(Succeed())
	_, err = poll()
	g.Expect(err).To(MatchError(ContainSubstring("the trusted keys secret team/trusted-keys does not exist")))
}

// signedPush moves main to a new commit signed with sign in one step, as a push does
// (SignedCommit has the branch point at the unsigned commit for a moment).
func signedPush(t *testing.T, repo *gittest.Repo, sign gittest.SignFunc, files map[string]string) string {
	t.Helper()
	gittest.Git(t, repo.Dir, "update-ref", "refs/heads/next", repo.Head(t, "main"))
	sha := repo.SignedCommit(t, "next", sign, files)
	gittest.Git(t, repo.Dir, "update-ref", "refs/heads/main", sha)
	return sha
}

// setVerified is the set's SourceVerified condition.
func setVerified(set *convergev1.SyncTargetSet) metav1.Condition {
	if c := apimeta.FindStatusCondition(set.Status.Conditions, convergev1.SourceVerifiedCondition); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// A set whose gitDirectories source has verify: an unsigned push that removes a directory
// deletes no SyncTarget and adds none; the set says why, and a signed push goes through.
func TestSetListsOnlyVerifiedRevisions(t *testing.T) {
	ns := cluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "fleet")
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	alice, alicePub := gittest.OpenPGPKey(t, "Alice", "alice@example.com")
	signed := repo.SignedCommit(t, "main", alice, map[string]string{"apps/web/k.yaml": "a", "apps/api/k.yaml": "b"})
	g.Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "trusted-keys"},
		StringData: map[string]string{"alice.asc": alicePub}})).To(Succeed())
	source := convergev1.GitSource{URL: srv.RepoURL(repo), Ref: convergev1.GitRef{Branch: "main"},
		Interval: &metav1.Duration{Duration: time.Second},
		Verify:   &convergev1.VerifySpec{SecretRef: convergev1.LocalObjectReference{Name: "trusted-keys"}}}
	createSet(t, &convergev1.SyncTargetSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "signed"},
		Spec: convergev1.SyncTargetSetSpec{
			Generators: []convergev1.Generator{{GitDirectories: &convergev1.GitDirectoriesGenerator{Source: source, Include: []string{"apps/*"}}}},
			Template: convergev1.SyncTargetTemplate{Metadata: convergev1.SyncTargetTemplateMeta{Name: "{{ .path.basename }}"},
				Spec: spec(g, gitSpec(srv.RepoURL(repo), "{{ .path }}"))},
		}})
	eventually(t, func(g Gomega) {
		g.Expect(generated(g, ns, "signed")).To(And(HaveLen(2), HaveKey("web"), HaveKey("api")))
		c := setVerified(getSet(g, ns, "signed"))
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.Message).To(ContainSubstring("verified commit " + signed[:12] + " signed by OpenPGP key"))
	})

	unsigned := strings.TrimSpace(repo.CommitChanges(t, "main", gittest.Change{Path: "apps/evil/k.yaml", Content: "x"},
		gittest.Change{Path: "apps/api/k.yaml", Delete: true}))
	eventually(t, func(g Gomega) {
		set := getSet(g, ns, "signed")
		g.Expect(setReady(set).Reason).To(Equal(convergev1.VerificationFailedReason))
		g.Expect(setVerified(set).Status).To(Equal(metav1.ConditionFalse))
		g.Expect(setVerified(set).Message).To(ContainSubstring("commit " + unsigned[:12] + " is not signed: the directories of commit " +
			signed[:12] + ", the last that verified, are listed"))
	})
	g.Consistently(func(g Gomega) {
		g.Expect(generated(g, ns, "signed")).To(And(HaveLen(2), HaveKey("web"), HaveKey("api")))
	}).WithTimeout(3 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())

	next := signedPush(t, repo, alice, map[string]string{"apps/db/k.yaml": "x"})
	eventually(t, func(g Gomega) {
		set := getSet(g, ns, "signed")
		g.Expect(generated(g, ns, "signed")).To(And(HaveLen(3), HaveKey("web"), HaveKey("evil"), HaveKey("db")), "%v", set.Status.Conditions)
		g.Expect(setVerified(set).Message).To(ContainSubstring("verified commit " + next[:12]))
		g.Expect(setReady(set).Reason).NotTo(Equal(convergev1.VerificationFailedReason))
	})
}
