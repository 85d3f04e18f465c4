package diff

import (
	"encoding/base64"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func secret(fields map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "db", "namespace": "shop"},
	}}
	for k, v := range fields {
		u.Object[k] = v
	}
	return u
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestMaskSecrets(t *testing.T) {
	tests := []struct {
		name              string
		live, after       *unstructured.Unstructured
		wantLive, wantAft map[string]any // data after masking; nil: object absent
		wantAftString     map[string]any // stringData after masking
	}{
		{
			name:     "unchanged, changed and added keys",
			live:     secret(map[string]any{"data": map[string]any{"user": b64("admin"), "password": b64("old-pass")}}),
			after:    secret(map[string]any{"data": map[string]any{"user": b64("admin"), "password": b64("new-pass"), "host": b64("db.local")}}),
			wantLive: map[string]any{"user": Masked, "password": Masked},
			wantAft:  map[string]any{"user": Masked, "password": MaskedChanged, "host": Masked},
		},
		{
			name:          "stringData compares with the decoded data",
			live:          secret(map[string]any{"data": map[string]any{"user": b64("admin"), "password": b64("old-pass")}}),
			after:         secret(map[string]any{"stringData": map[string]any{"user": "admin", "password": "new-pass"}}),
			wantLive:      map[string]any{"user": Masked, "password": Masked},
			wantAftString: map[string]any{"user": Masked, "password": MaskedChanged},
		},
		{
			name:    "created: nothing to compare with",
			after:   secret(map[string]any{"data": map[string]any{"token": b64("t0ken")}}),
			wantAft: map[string]any{"token": Masked},
		},
		{
			name:     "pruned",
			live:     secret(map[string]any{"data": map[string]any{"token": b64("t0ken")}}),
			wantLive: map[string]any{"token": Masked},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			live, after := maskSecrets(tt.live, tt.after)
			if tt.live == nil {
				g.Expect(live).To(BeNil())
			} else {
				g.Expect(live.Object["data"]).To(Equal(tt.wantLive))
			}
			if tt.after == nil {
				g.Expect(after).To(BeNil())
				return
			}
			if tt.wantAft != nil {
				g.Expect(after.Object["data"]).To(Equal(tt.wantAft))
			}
			if tt.wantAftString != nil {
				g.Expect(after.Object["stringData"]).To(Equal(tt.wantAftString))
			}
			// The inputs are left alone.
			if tt.live != nil {
				g.Expect(tt.live.Object["data"]).NotTo(ContainElement(Masked))
			}
		})
	}
}

func TestMaskSecretsLastAppliedAnnotation(t *testing.T) {
	g := NewWithT(t)
	live := secret(map[string]any{"data": map[string]any{"token": b64("old")}})
	live.SetAnnotations(map[string]string{lastAppliedAnnotation: `{"data":{"token":"b2xk"}}`, "team": "db"})
	after := live.DeepCopy()
	after.SetAnnotations(map[string]string{lastAppliedAnnotation: `{"data":{"token":"bmV3"}}`, "team": "db"})

	ml, ma := maskSecrets(live, after)
	g.Expect(ml.GetAnnotations()).To(Equal(map[string]string{lastAppliedAnnotation: Masked, "team": "db"}))
	g.Expect(ma.GetAnnotations()).To(Equal(map[string]string{lastAppliedAnnotation: MaskedChanged, "team": "db"}))

	d, err := unifiedDiff(live, after)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d).NotTo(Or(ContainSubstring("b2xk"), ContainSubstring("bmV3")))
}

func TestMaskSecretsLeavesOtherKinds(t *testing.T) {
	g := NewWithT(t)
	cm := secret(map[string]any{"data": map[string]any{"color": "blue"}})
	cm.SetKind("ConfigMap")
	live, after := maskSecrets(cm, cm)
	g.Expect(live.Object["data"]).To(Equal(map[string]any{"color": "blue"}))
	g.Expect(after.Object["data"]).To(Equal(map[string]any{"color": "blue"}))
}

func TestMaskSecretsMalformedData(t *testing.T) {
	g := NewWithT(t)
	d, err := unifiedDiff(nil, secret(map[string]any{"data": "not-a-mapping-s3cret"}))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d).NotTo(ContainSubstring("s3cret"))
	g.Expect(strings.Count(d, Masked)).To(Equal(1))
}
