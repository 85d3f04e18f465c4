package convert

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// rule maps one field of an input object onto the output T.
type rule[T any] struct {
	key string
	fn  func(c *conv, v any, t T)
}

// mapFields runs the rule of every field of m, in the order of the field names. A field
// without a rule is lost: with the reason lostWhy gives, else "no equivalent".
func mapFields[T any](c *conv, m map[string]any, t T, rules []rule[T], lostWhy map[string]string) {
	byKey := make(map[string]func(*conv, any, T), len(rules))
	for _, r := range rules {
		byKey[r.key] = r.fn
	}
	for _, k := range sortedKeys(m) {
		if fn, ok := byKey[k]; ok {
			fn(c, m[k], t)
			continue
		}
		why, ok := lostWhy[k]
		if !ok {
			why = "no equivalent in converge"
		}
		c.lost(k, "", why)
	}
}

// noteOnly is a rule for a field that has no field of its own in converge but whose
// behaviour is covered: it comments the output at path.
func noteOnly[T any](key, path, text string) rule[T] {
	return rule[T]{key: key, fn: func(c *conv, _ any, _ T) { c.note(path, "%s (%s): %s", c.in+key, c.kindName(), text) }}
}

// ignored is a rule for a field that needs nothing in converge.
func ignored[T any](key string) rule[T] {
	return rule[T]{key: key, fn: func(*conv, any, T) {}}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// asString is v when it is a string, a number or a bool written as a string.
func asString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return ""
	case bool, int64, int, float64:
		return fmt.Sprint(x)
	}
	return ""
}

func asBool(v any) bool {
	b, _ := v.(bool)
	return b
}

// str reads the string at path under m.
func str(m map[string]any, path ...string) string {
	return asString(get(m, path...))
}

func get(m map[string]any, path ...string) any {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
	}
	return v
}

// duration reads a Go duration; a bad one is lost.
func (c *conv) duration(key string, v any) *metav1.Duration {
	s := asString(v)
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		c.lost(key, "", "not a positive duration")
		return nil
	}
	return &metav1.Duration{Duration: d}
}

// toJSON is v as an apiextensions JSON value, nil when empty.
func toJSON(v any) *apiextensionsv1.JSON {
	if m, ok := v.(map[string]any); ok && len(m) == 0 {
		return nil
	}
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return &apiextensionsv1.JSON{Raw: b}
}

// localRef is a reference to the object named by the "name" of v, nil without one.
func localRef(v any) *convergev1.LocalObjectReference {
	if n := str(asMap(v), "name"); n != "" {
		return &convergev1.LocalObjectReference{Name: n}
	}
	return nil
}

// relPath is a Flux or Argo CD path as converge wants it: relative, without a leading ./
// ("." or "./" is the root, the empty path).
func relPath(p string) string {
	p = strings.TrimPrefix(strings.TrimSpace(p), "./")
	for strings.HasPrefix(p, "/") {
		p = strings.TrimPrefix(p, "/")
	}
	p = strings.TrimSuffix(p, "/")
	if p == "." {
		return ""
	}
	return p
}

// dependencies reads Flux's dependsOn: a list of {name, namespace}.
func dependencies(v any) []convergev1.DependencyReference {
	var deps []convergev1.DependencyReference
	for _, d := range asSlice(v) {
		m := asMap(d)
		if n := str(m, "name"); n != "" {
			deps = append(deps, convergev1.DependencyReference{Name: n, Namespace: str(m, "namespace")})
		}
	}
	return deps
}

// kubeConfig reads Flux's spec.kubeConfig: a secretRef {name, key}.
func (c *conv) kubeConfig(v any) *convergev1.KubeConfigReference {
	m := asMap(v)
	for _, k := range sortedKeys(m) {
		if k != "secretRef" {
			c.lost("kubeConfig."+k, "kubeConfig", "converge reads a kubeconfig from a Secret only")
		}
	}
	name := str(m, "secretRef", "name")
	if name == "" {
		return nil
	}
	return &convergev1.KubeConfigReference{SecretRef: convergev1.KubeConfigSecretReference{Name: name, Key: str(m, "secretRef", "key")}}
}

// dnsLabel makes s a valid Kubernetes name: lower case, [a-z0-9-.], at most 253 characters.
func dnsLabel(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '.':
			b.WriteRune(r)
		default:
			b.WriteRune('-')
		}
	}
	out := strings.Trim(b.String(), "-.")
	if len(out) > 253 {
		out = strings.Trim(out[:253], "-.")
	}
	return out
}
