package reconciler

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/clearsign"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sources/charts"
)

// chartRepo is a loopback HTTP chart repository serving the chart "demo", counting the
// requests it answers.
type chartRepo struct {
	srv      *httptest.Server
	mu       sync.Mutex
	versions map[string][]byte // version → archive
	provs    map[string][]byte
	requests atomic.Int64
}

func newChartRepo(t *testing.T) *chartRepo {
	r := &chartRepo{versions: map[string][]byte{}, provs: map[string][]byte{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *chartRepo) serve(w http.ResponseWriter, req *http.Request) {
	r.requests.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if req.URL.Path == "/index.yaml" {
		var b strings.Builder
		b.WriteString("apiVersion: v1\nentries:\n  demo:\n")
		for v, archive := range r.versions {
			sum := sha256.Sum256(archive)
			fmt.Fprintf(&b, "  - version: %s\n    urls: [demo-%s.tgz]\n    digest: %s\n", v, v, hex.EncodeToString(sum[:]))
		}
		_, _ = w.Write([]byte(b.String()))
		return
	}
	for v, archive := range r.versions {
		switch req.URL.Path {
		case "/demo-" + v + ".tgz":
			_, _ = w.Write(archive)
			return
		case "/demo-" + v + ".tgz.prov":
			if p, ok := r.provs[v]; ok {
				_, _ = w.Write(p)
				return
			}
		}
	}
	http.NotFound(w, req)
}

// publish adds a version of the chart, signed by key when not nil.
func (r *chartRepo) publish(t *testing.T, version string, key *openpgp.Entity) {
	chartYAML := "apiVersion: v2\nname: demo\nversion: " + version + "\n"
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, body := range map[string]string{"demo/Chart.yaml": chartYAML, "demo/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo\n"} {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write([]byte(body))
	}
	_ = tw.Close()
	_ = gz.Close()
	archive := buf.Bytes()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.versions[version] = archive
	if key == nil {
		return
	}
	sum := sha256.Sum256(archive)
	var prov bytes.Buffer
	w, err := clearsign.Encode(&prov, key.PrivateKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fmt.Fprintf(w, "%s\n...\nfiles:\n  demo-%s.tgz: sha256:%s\n", chartYAML, version, hex.EncodeToString(sum[:]))
	_ = w.Close()
	r.provs[version] = prov.Bytes()
}

func publicKey(t *testing.T, e *openpgp.Entity) []byte {
	var buf bytes.Buffer
	w, err := armor.Encode(&buf, openpgp.PublicKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Serialize(w); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	return buf.Bytes()
}

type chartFixture struct {
	f    *ChartFetcher
	repo *chartRepo
	key  *openpgp.Entity
}

// newChartFixture is a ChartFetcher following the loopback repository; its Secrets
// (the trusted keys) are read through a fake client.
func newChartFixture(t *testing.T) *chartFixture {
	key, err := openpgp.NewEntity("Chart Signer", "", "signer@example.com", nil)
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	keys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "chart-keys"},
		Data: map[string][]byte{"signer.asc": publicKey(t, key)}}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(keys).Build()
	f := &ChartFetcher{Reader: reader, Client: &charts.Client{CacheDir: filepath.Join(t.TempDir(), "charts"), AllowLoopback: true},
		Wakes: Wakes{Wake: make(chan event.GenericEvent, 8)}}
	t.Cleanup(f.Stop)
	return &chartFixture{f: f, repo: newChartRepo(t), key: key}
}

func (x *chartFixture) syncTarget(name, version string, interval time.Duration) *convergev1.SyncTarget {
	st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name}}
	st.Spec.Chart = &convergev1.ChartSource{Repository: x.repo.srv.URL, Name: "demo", Version: version,
		Interval: &metav1.Duration{Duration: interval}}
	return st
}

// TestChartFetcherResolvesChecksOutAndVerifies: the revision of a chart, its tree, and
// its provenance; an unsigned version is refused as an unsigned commit is.
func TestChartFetcherResolvesChecksOutAndVerifies(t *testing.T) {
	g := NewWithT(t)
	x := newChartFixture(t)
	x.repo.publish(t, "1.0.0", x.key)
	x.repo.publish(t, "1.1.0", nil)
	st := x.syncTarget("app", "1.0.0", time.Hour)
	st.Spec.Chart.Verify = &convergev1.ChartVerify{SecretRef: convergev1.LocalObjectReference{Name: "chart-keys"}}

	rev, err := x.f.Resolve(t.Context(), st)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rev).To(MatchRegexp(`^1\.0\.0@sha256:[0-9a-f]{64}$`))
	dir, err := x.f.Checkout(t.Context(), st, rev)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(filepath.Join(dir, "Chart.yaml")).To(BeARegularFile())
	g.Expect(filepath.Join(dir, "templates", "cm.yaml")).To(BeARegularFile())
	v, err := x.f.Verify(t.Context(), st, rev)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(v.Signers).To(HaveLen(1))
	g.Expect(v.String()).To(HavePrefix("chart demo 1.0.0 signed by OpenPGP key "))
	g.Expect(v.String()).To(ContainSubstring("Chart Signer"))
	_, ok := x.f.CommitTime(st, rev)
	g.Expect(ok).To(BeFalse())

	st.Spec.Chart.Version = "1.1.0"
	rev, err = x.f.Resolve(t.Context(), st)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = x.f.Verify(t.Context(), st, rev)
	g.Expect(err).To(MatchError(sources.ErrVerificationFailed))
	g.Expect(err).To(MatchError(ContainSubstring("chart demo 1.1.0 has no provenance file")))

	// Without spec.chart.verify there is nothing to verify.
	st.Spec.Chart.Verify = nil
	v, err = x.f.Verify(t.Context(), st, rev)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(v.Signers).To(BeEmpty())
}

// TestChartFetcherIdleResolveCostsNoRequest: once polled, a Resolve (and a Checkout of a
// chart in the cache) costs no request; two SyncTargets of the same chart share a poller.
func TestChartFetcherIdleResolveCostsNoRequest(t *testing.T) {
	g := NewWithT(t)
	x := newChartFixture(t)
	x.repo.publish(t, "1.0.0", nil)
	a, b := x.syncTarget("a", "^1", time.Hour), x.syncTarget("b", "^1", time.Hour)
	rev, err := x.f.Resolve(t.Context(), a)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = x.f.Checkout(t.Context(), a, rev)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(x.repo.requests.Load()).To(Equal(int64(2)), "one poll (index.yaml) and one download")

	for range 5 {
		for _, st := range []*convergev1.SyncTarget{a, b} {
			got, err := x.f.Resolve(t.Context(), st)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(rev))
			_, err = x.f.Checkout(t.Context(), st, got)
			g.Expect(err).NotTo(HaveOccurred())
		}
	}
	g.Expect(x.repo.requests.Load()).To(Equal(int64(2)), "idle reconciles cost no request")
}

// TestChartFetcherWakesOnANewVersion: the poller finds a version published after the
// first poll and wakes every SyncTarget following the chart; their next Resolve is it.
func TestChartFetcherWakesOnANewVersion(t *testing.T) {
	g := NewWithT(t)
	x := newChartFixture(t)
	x.repo.publish(t, "1.0.0", nil)
	a, b := x.syncTarget("a", ">=1.0.0", 50*time.Millisecond), x.syncTarget("b", ">=1.0.0", time.Hour)
	for _, st := range []*convergev1.SyncTarget{a, b} {
		rev, err := x.f.Resolve(t.Context(), st)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(rev).To(HavePrefix("1.0.0@"))
	}
	g.Expect(x.f.Wake).NotTo(Receive(), "the first poll is no news")

	x.repo.publish(t, "1.2.0", nil)
	woken := map[string]bool{}
	g.Eventually(func() map[string]bool {
		select {
		case ev := <-x.f.Wake:
			woken[client.ObjectKeyFromObject(ev.Object).String()] = true
		default:
		}
		return woken
	}).WithTimeout(10 * time.Second).Should(Equal(map[string]bool{"team/a": true, "team/b": true}))
	for _, st := range []*convergev1.SyncTarget{a, b} {
		rev, err := x.f.Resolve(t.Context(), st)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(rev).To(HavePrefix("1.2.0@"))
	}

	x.f.Forget(client.ObjectKeyFromObject(a))
	x.f.Forget(client.ObjectKeyFromObject(b))
	_, ok := x.f.scheduler().Latest("team/a")
	g.Expect(ok).To(BeFalse())
}

// TestChartFetcherResolveFresh: a reconcile asked for at since waits for a poll that
// started after it, which is triggered at once and wakes the SyncTarget.
func TestChartFetcherResolveFresh(t *testing.T) {
	g := NewWithT(t)
	x := newChartFixture(t)
	x.repo.publish(t, "1.0.0", nil)
	st := x.syncTarget("app", "*", time.Hour)
	rev, err := x.f.Resolve(t.Context(), st)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rev).To(HavePrefix("1.0.0@"))

	x.repo.publish(t, "2.0.0", nil)
	since := time.Now()
	rev, ready, err := x.f.ResolveFresh(t.Context(), st, since)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ready).To(BeFalse())
	g.Expect(rev).To(HavePrefix("1.0.0@"))
	g.Eventually(x.f.Wake).WithTimeout(10 * time.Second).Should(Receive())
	rev, ready, err = x.f.ResolveFresh(t.Context(), st, since)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ready).To(BeTrue())
	g.Expect(rev).To(HavePrefix("2.0.0@"))
}

// TestChartFetcherErrors: a version that does not exist is the Resolve's error; a bad
// revision is refused by Checkout.
func TestChartFetcherErrors(t *testing.T) {
	g := NewWithT(t)
	x := newChartFixture(t)
	x.repo.publish(t, "1.0.0", nil)
	st := x.syncTarget("app", ">=3", time.Hour)
	_, err := x.f.Resolve(t.Context(), st)
	g.Expect(err).To(MatchError(sources.ErrRefNotFound))
	_, err = x.f.Checkout(t.Context(), st, "main@sha1:0123")
	g.Expect(err).To(MatchError(sources.ErrInvalidSource))
	st.Spec.Chart.Schedule = "not a schedule"
	_, err = x.f.Resolve(t.Context(), st)
	g.Expect(err).To(MatchError(sources.ErrInvalidSource))
}
