package diff

import (
	"encoding/base64"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// What a Secret value shows as.
const (
	// Masked stands for a Secret value, unchanged or new.
	Masked = "***"
	// MaskedChanged stands for a Secret value that the apply changes.
	MaskedChanged = "*** (changed)"
)

// lastAppliedAnnotation is where `kubectl apply` keeps a full copy of the object, values included.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// isSecret is true for a core v1 Secret.
func isSecret(u *unstructured.Unstructured) bool {
	return u != nil && u.GetKind() == "Secret" && u.GetAPIVersion() == "v1"
}

// maskSecrets returns copies of live and after (either may be nil) in which every value
// of a Secret's data and stringData, and its last-applied-configuration annotation, is
// replaced by Masked, or by MaskedChanged on the after side when live holds the same key
// with another value. Objects that are not Secrets are returned as they are.
//
// Values are compared decoded, stringData taking precedence over data as the API server
// merges them, so that a value moved from data to stringData is not reported as changed.
func maskSecrets(live, after *unstructured.Unstructured) (*unstructured.Unstructured, *unstructured.Unstructured) {
	if !isSecret(live) && !isSecret(after) {
		return live, after
	}
	var before map[string]string
	var beforeApplied string
	hadApplied := false
	if live != nil {
		before = secretValues(live)
		beforeApplied, hadApplied = live.GetAnnotations()[lastAppliedAnnotation]
		live = live.DeepCopy()
		maskValues(live, func(string) string { return Masked })
		maskAnnotation(live, Masked)
	}
	if after != nil {
		now := secretValues(after)
		applied, hasApplied := after.GetAnnotations()[lastAppliedAnnotation]
		after = after.DeepCopy()
		maskValues(after, func(key string) string {
			if old, had := before[key]; had && old != now[key] {
				return MaskedChanged
			}
			return Masked
		})
		if hasApplied {
			if hadApplied && applied != beforeApplied {
				maskAnnotation(after, MaskedChanged)
			} else {
				maskAnnotation(after, Masked)
			}
		}
	}
	return live, after
}

// secretValues returns the decoded values a Secret holds: data, overridden by stringData.
// A data value that is not valid base64 is kept as written, so it still compares.
func secretValues(u *unstructured.Unstructured) map[string]string {
	values := map[string]string{}
	if data, ok := u.Object["data"].(map[string]any); ok {
		for k, v := range data {
			s, _ := v.(string)
			if b, err := base64.StdEncoding.DecodeString(s); err == nil {
				s = string(b)
			}
			values[k] = s
		}
	}
	if data, ok := u.Object["stringData"].(map[string]any); ok {
		for k, v := range data {
			s, _ := v.(string)
			values[k] = s
		}
	}
	return values
}

// maskValues replaces the value of every key of data and stringData by mask(key); a
// data or stringData that is not a mapping is masked whole.
func maskValues(u *unstructured.Unstructured, mask func(key string) string) {
	for _, field := range []string{"data", "stringData"} {
		v, present := u.Object[field]
		if !present || v == nil {
			continue
		}
		m, ok := v.(map[string]any)
		if !ok {
			u.Object[field] = Masked
			continue
		}
		for k := range m {
			m[k] = mask(k)
		}
	}
}

func maskAnnotation(u *unstructured.Unstructured, mask string) {
	a := u.GetAnnotations()
	if _, ok := a[lastAppliedAnnotation]; !ok {
		return
	}
	a[lastAppliedAnnotation] = mask
	u.SetAnnotations(a)
}

// MaskSecrets returns objs with the data and stringData values (and the last-applied
// annotation) of every Secret replaced by Masked, as converge diff shows them; the Secrets
// are copies, and the other objects are returned as they are.
func MaskSecrets(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, len(objs))
	for i, o := range objs {
		_, out[i] = maskSecrets(nil, o)
	}
	return out
}
