package reconciler_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/charttest"
	"github.com/converge-gitops/converge/sources/charts"
)

// pushArtifact packs files as a configuration artifact, as converge push artifact does,
// and pushes it to repo (oci://…) under tag; it returns the revision converge reports
// for it, "<tag>@sha256:<hex>".
func pushArtifact(t *testing.T, repo, tag string, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a, err := charts.PackArtifact(dir, charts.ArtifactMeta{Source: "https://git.example.com/app.git", Revision: "main@sha1:" + tag})
	if err != nil {
		t.Fatal(err)
	}
	c := &charts.Client{CacheDir: t.TempDir(), AllowLoopback: true}
	r, err := c.PushArtifact(context.Background(), charts.Source{Kind: charts.KindArtifact, Repository: repo, Tag: tag}, a)
	if err != nil {
		t.Fatal(err)
	}
	return r.String()
}

// ociTarget creates a SyncTarget following the artifact of repo at ref, rendering path.
func (f *fixture) ociTarget(name, repo string, ref convergev1.OCIRef, path string, mutate func(*convergev1.SyncTarget)) *convergev1.SyncTarget {
	f.t.Helper()
	st := &convergev1.SyncTarget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: convergev1.SyncTargetSpec{
			OCI:             &convergev1.OCISource{URL: repo, Ref: ref, Interval: &metav1.Duration{Duration: time.Second}},
			Path:            path,
			TargetNamespace: f.app, Prune: true,
			Timeout: &metav1.Duration{Duration: 40 * time.Second}},
	}
	if mutate != nil {
		mutate(st)
	}
	if err := k8s.Create(context.Background(), st); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = k8s.Delete(context.Background(), st) })
	return st
}

// TestOCIArtifactFollowsItsTag: a SyncTarget of an OCI artifact deploys the path inside
// it; the tag pushed again is a new digest, found by polling and deployed as a new
// revision; an object that left the artifact is pruned; the history names both digests.
func TestOCIArtifactFollowsItsTag(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	reg := charttest.NewOCIRegistry()
	t.Cleanup(reg.Close)
	repo := reg.Repository() + "/app-config"
	first := pushArtifact(t, repo, "latest", map[string]string{
		"deploy/settings.yaml": configMap("settings", "blue"),
		"deploy/extra.yaml":    configMap("extra", "x"),
		"other/ignored.yaml":   configMap("ignored", "not in the path"),
	})
	st := f.ociTarget("oci-tag", repo, convergev1.OCIRef{Tag: "latest"}, "deploy", nil)
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Status).To(BeEquivalentTo("True"), ready(st).Message)
		g.Expect(st.Status.LastHealthyRevision).To(Equal(first))
	})
	g := NewWithT(t)
	g.Expect(f.liveData(g, &corev1.ConfigMap{}, "settings")).To(HaveKeyWithValue("value", "blue"))
	g.Expect(f.liveData(g, &corev1.ConfigMap{}, "extra")).To(HaveKeyWithValue("value", "x"))

	second := pushArtifact(t, repo, "latest", map[string]string{"deploy/settings.yaml": configMap("settings", "green")})
	g.Expect(second).NotTo(Equal(first))
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(second), ready(st).Message)
	})
	g.Expect(f.liveData(g, &corev1.ConfigMap{}, "settings")).To(HaveKeyWithValue("value", "green"))
	g.Eventually(func() error {
		return k8s.Get(context.Background(), client.ObjectKey{Namespace: f.app, Name: "extra"}, &corev1.ConfigMap{})
	}).WithTimeout(10*time.Second).Should(MatchError(ContainSubstring("not found")), "pruned: it left the artifact")
	hist := get(g, st).Status.History
	g.Expect(hist[0].Revision).To(Equal(second))
	g.Expect(hist[0].Origin).To(Equal(&convergev1.ArtifactOrigin{Source: "https://git.example.com/app.git", Revision: "main@sha1:latest"}),
		"the source and revision the artifact's manifest names")
	g.Expect(hist).To(ContainElement(HaveField("Revision", first)))
}

// TestOCIArtifactRollsBackToTheLastHealthyDigest: a digest whose Deployment never
// becomes ready is rolled back to the last healthy digest, automatically; a semver range
// follows the newest matching tag.
func TestOCIArtifactRollsBackToTheLastHealthyDigest(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	reg := charttest.NewOCIRegistry()
	t.Cleanup(reg.Close)
	repo := reg.Repository() + "/web"
	good := pushArtifact(t, repo, "1.0.0", map[string]string{"web.yaml": deployment("web", 1, "")})
	pushArtifact(t, repo, "2.0.0", map[string]string{"web.yaml": deployment("web", 3, "")})
	st := f.ociTarget("oci-semver", repo, convergev1.OCIRef{SemVer: ">=1.0 <2"}, "", nil)
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Status).To(BeEquivalentTo("True"), ready(st).Message)
		g.Expect(st.Status.LastHealthyRevision).To(Equal(good), "the newest tag in range, not 2.0.0")
	})

	bad := pushArtifact(t, repo, "v1.1.0", map[string]string{"web.yaml": deployment("web", 1, "no-such-node: anywhere")})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Reason).To(Equal(convergev1.RolledBackReason), ready(st).Message)
		g.Expect(st.Status.LastAttemptedRevision).To(Equal(bad))
		g.Expect(st.Status.LastAppliedRevision).To(Equal(good))
		g.Expect(st.Status.LastHealthyRevision).To(Equal(good))
	})
	g := NewWithT(t)
	dep := &appsv1.Deployment{}
	g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: f.app, Name: "web"}, dep)).To(Succeed())
	g.Expect(dep.Spec.Template.Spec.NodeSelector).To(BeEmpty(), "the healthy digest's Deployment is back")
	g.Expect(get(g, st).Status.History[0]).To(And(HaveField("Revision", bad), HaveField("Result", convergev1.SyncRolledBack)))
}

// TestOCIArtifactSignedOnly: a SyncTarget asking for cosign signatures deploys an
// artifact signed by its trusted key, refuses one pushed unsigned and one signed by
// another key — nothing of either applied, the signed digest still in place — and
// deploys the next signed one.
func TestOCIArtifactSignedOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	g := NewWithT(t)
	reg := charttest.NewOCIRegistry()
	t.Cleanup(reg.Close)
	repo := reg.Repository() + "/signed"
	trusted, err := charttest.NewCosignKey()
	g.Expect(err).NotTo(HaveOccurred())
	stranger, err := charttest.NewCosignKey()
	g.Expect(err).NotTo(HaveOccurred())
	pub, err := trusted.PublicPEM()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(k8s.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "cosign"},
		Data: map[string][]byte{"cosign.pub": pub}})).To(Succeed())
	digestOf := func(rev string) string { return rev[strings.LastIndex(rev, "@")+1:] }

	signed := pushArtifact(t, repo, "latest", map[string]string{"settings.yaml": configMap("settings", "signed-1")})
	g.Expect(trusted.Sign(repo, digestOf(signed))).To(Succeed())
	st := f.ociTarget("oci-signed", repo, convergev1.OCIRef{Tag: "latest"}, "", func(st *convergev1.SyncTarget) {
		st.Spec.OCI.Verify = &convergev1.OCIVerify{SecretRef: convergev1.LocalObjectReference{Name: "cosign"}}
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Status).To(BeEquivalentTo("True"), ready(st).Message)
		g.Expect(st.Status.LastHealthyRevision).To(Equal(signed))
		g.Expect(sourceVerified(st).Status).To(Equal(metav1.ConditionTrue), sourceVerified(st).Message)
		g.Expect(sourceVerified(st).Message).To(ContainSubstring("ECDSA P-256 key SHA256:"))
	})

	for _, tc := range []struct {
		name, value string
		sign        *charttest.CosignKey
		want        string
	}{
		{name: "unsigned", value: "unsigned", want: "not signed"},
		{name: "signed by another key", value: "stranger", sign: stranger, want: "none of the trusted keys"},
	} {
		rev := pushArtifact(t, repo, "latest", map[string]string{"settings.yaml": configMap("settings", tc.value)})
		if tc.sign != nil {
			g.Expect(tc.sign.Sign(repo, digestOf(rev))).To(Succeed())
		}
		eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(sourceVerified(st).Status).To(Equal(metav1.ConditionFalse), tc.name)
			g.Expect(sourceVerified(st).Reason).To(Equal(convergev1.VerificationFailedReason))
			g.Expect(sourceVerified(st).Message).To(And(ContainSubstring(tc.want), ContainSubstring(digestOf(rev))))
			g.Expect(ready(st).Reason).To(Equal(convergev1.VerificationFailedReason))
			g.Expect(st.Status.LastAppliedRevision).To(Equal(signed), tc.name)
		})
		g.Expect(f.liveData(g, &corev1.ConfigMap{}, "settings")).To(HaveKeyWithValue("value", "signed-1"), tc.name)
	}

	next := pushArtifact(t, repo, "latest", map[string]string{"settings.yaml": configMap("settings", "signed-2")})
	g.Expect(trusted.Sign(repo, digestOf(next))).To(Succeed())
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(next), ready(st).Message)
		g.Expect(sourceVerified(st).Status).To(Equal(metav1.ConditionTrue))
	})
	g.Expect(f.liveData(g, &corev1.ConfigMap{}, "settings")).To(HaveKeyWithValue("value", "signed-2"))
}
