package fleet

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// Object is the SyncTarget r describes in namespace ns, owned by set, as the set applies
// it: only the fields the template sets, the set label, the hash annotation and the
// owner reference.
func (r Rendered) Object(ns string, owner *convergev1.SyncTargetSet) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": convergev1.GroupVersion.String(),
		"kind":       convergev1.SyncTargetKind,
		"metadata": map[string]any{
			"name":        r.Name,
			"namespace":   ns,
			"labels":      toAny(r.Labels),
			"annotations": toAny(withHash(r.Annotations, r.Hash)),
		},
		"spec": r.Spec,
	}}
	if owner != nil {
		u.SetOwnerReferences(ownerRefs(owner))
	}
	return u
}

func withHash(m map[string]string, hash string) map[string]string {
	out := make(map[string]string, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	out[TemplateHashAnnotation] = hash
	return out
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Validate checks what can be checked without the API server: the name is a DNS-1123
// subdomain no longer than 253, the SyncTarget lands in ns, and the whole object decodes
// into a SyncTarget with no unknown field. Schema checks the rest (the CRD's schema and CEL
// rules).
func (r Rendered) Validate(ns string) error {
	if errs := validation.IsDNS1123Subdomain(r.Name); len(errs) > 0 {
		return fmt.Errorf("name %q is not a valid SyncTarget name: %s", r.Name, strings.Join(errs, "; "))
	}
	return decodeStrict(r.Object(ns, nil), ns)
}

// decodeStrict decodes u into a SyncTarget, refusing unknown fields and a namespace other
// than ns.
func decodeStrict(u *unstructured.Unstructured, ns string) error {
	b, err := json.Marshal(u.Object)
	if err != nil {
		return err
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	st := &convergev1.SyncTarget{}
	if err := d.Decode(st); err != nil {
		return fmt.Errorf("not a SyncTarget: %w", err)
	}
	if st.Namespace != ns {
		return fmt.Errorf("namespace %q: a set generates SyncTargets in its own namespace %q only", st.Namespace, ns)
	}
	return nil
}
