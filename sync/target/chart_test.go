package target_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sources/charts"
)

func chartTarget(chart *convergev1.ChartSource) *convergev1.SyncTarget {
	return &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "app"},
		Spec: convergev1.SyncTargetSpec{Chart: chart}}
}

func armoredKey(t *testing.T, name string) string {
	t.Helper()
	e, err := openpgp.NewEntity(name, "", name+"@example.com", nil)
	if err != nil {
		t.Fatal(err)
	}
	buf := new(bytes.Buffer)
	w, err := armor.Encode(buf, openpgp.PublicKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Serialize(w); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	return buf.String()
}

func TestChartReadsItsSecretsFromItsOwnNamespace(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	st := chartTarget(&convergev1.ChartSource{Repository: "oci://registry.example/charts", Name: "podinfo", Version: ">=6",
		SecretRef: &convergev1.LocalObjectReference{Name: "creds"},
		Verify:    &convergev1.ChartVerify{SecretRef: convergev1.LocalObjectReference{Name: "keys"}}})
	key1, key2 := armoredKey(t, "one"), armoredKey(t, "two")
	in := inputs(st,
		secret("shop", "creds", map[string]string{"username": "u", "password": "p4ss", "ca.crt": "PEM",
			".dockerconfigjson": `{"auths":{}}`}),
		secret("shop", "keys", map[string]string{"a.asc": key1, "b.asc": key2}))
	src, err := in.Chart(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(src.Repository).To(Equal("oci://registry.example/charts"))
	g.Expect(src.Name).To(Equal("podinfo"))
	g.Expect(src.Version).To(Equal(">=6"))
	g.Expect(src.Credentials).To(Equal(charts.Credentials{Username: "u", Password: "p4ss", CA: []byte("PEM"),
		DockerConfigJSON: []byte(`{"auths":{}}`)}))
	g.Expect(string(src.Keyring)).To(Equal(key1 + "\n" + key2 + "\n"))

	// The same names in another namespace are not the SyncTarget's.
	in = inputs(st, secret("other", "creds", map[string]string{"username": "u", "password": "p4ss"}),
		secret("shop", "keys", map[string]string{"a.asc": key1}))
	_, err = in.Chart(ctx)
	g.Expect(err).To(MatchError(ContainSubstring("the chart credentials secret shop/creds does not exist")))
	in = inputs(st, secret("shop", "creds", map[string]string{"bearerToken": "tok3n"}), secret("other", "keys", map[string]string{"a.asc": key1}))
	_, err = in.Chart(ctx)
	g.Expect(err).To(MatchError(ContainSubstring("the trusted keys secret shop/keys does not exist")))
}

func TestChartWithoutSecrets(t *testing.T) {
	g := NewWithT(t)
	src, err := inputs(chartTarget(&convergev1.ChartSource{Repository: "https://charts.example", Name: "app"})).Chart(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(src).To(Equal(charts.Source{Repository: "https://charts.example", Name: "app"}))
	g.Expect(src.Keyring).To(BeNil(), "nil: no provenance required")

	_, err = inputs(syncTarget()).Chart(context.Background())
	g.Expect(err).To(MatchError(sources.ErrInvalidSource))
}

func TestChartRefusesBadSecrets(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	st := chartTarget(&convergev1.ChartSource{Repository: "https://charts.example", Name: "app",
		SecretRef: &convergev1.LocalObjectReference{Name: "creds"}})
	for data, message := range map[string]map[string]string{
		"bearerToken and username/password exclude each other": {"bearerToken": "tok3n-value", "username": "u", "password": "pa55word"},
		"password without username":                            {"password": "pa55word"},
	} {
		_, err := inputs(st, secret("shop", "creds", message)).Chart(ctx)
		g.Expect(err).To(MatchError(sources.ErrInvalidSource))
		g.Expect(err).To(MatchError(ContainSubstring(data)))
		g.Expect(err.Error()).NotTo(Or(ContainSubstring("pa55word"), ContainSubstring("tok3n-value")))
	}
	st.Spec.Chart.SecretRef = nil
	st.Spec.Chart.Verify = &convergev1.ChartVerify{SecretRef: convergev1.LocalObjectReference{Name: "keys"}}
	_, err := inputs(st, secret("shop", "keys", map[string]string{"a.asc": "not a key"})).Chart(ctx)
	g.Expect(err).To(MatchError(sources.ErrInvalidSource))
	g.Expect(err).To(MatchError(ContainSubstring("trusted keys secret shop/keys")))
}
