package render

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// substituted renders one ConfigMap whose data.v is value (YAML-quoted as given) with
// the substitution and returns data.v.
func substituted(t *testing.T, value string, s Substitution) (string, error) {
	t.Helper()
	root, _ := newRepo(t)
	write(t, root, "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata:\n  v: "+value+"\n")
	res, err := render(Options{Root: root, Path: "cm.yaml", Substitute: &s})
	if err != nil {
		return "", err
	}
	v, _, _ := unstructured.NestedString(res.Objects[0].Object, "data", "v")
	return v, nil
}

func TestSubstituteSyntax(t *testing.T) {
	vars := map[string]string{"env": "prod", "empty": "", "region": "eu-1", "ref": "${env}"}
	tests := []struct {
		name, in, want string
		strict         bool
	}{
		{name: "plain reference", in: `"${env}"`, want: "prod"},
		{name: "inside text, twice", in: `"app-${env}.${region}.example.com"`, want: "app-prod.eu-1.example.com"},
		{name: ":= default when unset", in: `"${nope:=dflt}"`, want: "dflt", strict: true},
		{name: ":= default when empty", in: `"${empty:=dflt}"`, want: "dflt", strict: true},
		{name: ":- default when empty", in: `"${empty:-dflt}"`, want: "dflt", strict: true},
		{name: "= keeps an empty value", in: `"[${empty=dflt}]"`, want: "[]", strict: true},
		{name: "- default when unset", in: `"${nope-dflt}"`, want: "dflt", strict: true},
		{name: "set value wins over default", in: `"${env:=dflt}"`, want: "prod"},
		{name: "nested default", in: `"${nope:=${region}-x}"`, want: "eu-1-x", strict: true},
		{name: "unused default is not evaluated", in: `"${env:=${missing}}"`, want: "prod", strict: true},
		{name: "empty default", in: `"[${nope:=}]"`, want: "[]", strict: true},
		{name: "$${ escapes", in: `"$${env} and ${env}"`, want: "${env} and prod"},
		{name: "escape inside a default", in: `"${nope:=$${env}}"`, want: "${env}", strict: true},
		{name: "other $$ and bare $var are left alone", in: `"echo $$ $env $HOME"`, want: "echo $$ $env $HOME", strict: true},
		{name: "values are not expanded again", in: `"${ref}"`, want: "${env}"},
		{name: "non-strict: unset is empty", in: `"a${nope}b"`, want: "ab"},
		{name: "no reference, untouched", in: `"plain {braces} $"`, want: "plain {braces} $", strict: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := substituted(t, tt.in, Substitution{Vars: vars, Strict: tt.strict})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
		})
	}
}

func TestSubstituteInvalidReferences(t *testing.T) {
	for _, in := range []string{`"${1}"`, `"${}"`, `"${env^^}"`, `"${env"`, `"${env:=x"`, `"${ env}"`} {
		t.Run(in, func(t *testing.T) {
			g := NewWithT(t)
			_, err := substituted(t, in, Substitution{Vars: map[string]string{"env": "prod"}, Strict: true})
			g.Expect(err).To(MatchError(ErrSubstitution))
			g.Expect(err.Error()).To(ContainSubstring("ConfigMap c: data.v: "))
			g.Expect(err.Error()).To(ContainSubstring("$${"), "says how to escape")
		})
	}
}

// TestSubstituteStrictListsEveryMissingName: a strict render fails on unset variables,
// naming all of them, sorted, and the objects using them; nothing is returned.
func TestSubstituteStrictListsEveryMissingName(t *testing.T) {
	g := NewWithT(t)
	root, _ := newRepo(t)
	write(t, root, "a.yaml", cm("a", "${zeta}-${alpha}"))
	write(t, root, "b.yaml", cm("b", "${alpha} ${mid:=ok} ${beta}"))
	write(t, root, "c.yaml", cm("c", "${set}"))
	res, err := render(Options{Root: root, Substitute: &Substitution{Vars: map[string]string{"set": "1"}, Strict: true}})
	expectFailure(g, res, err, ErrSubstitution, "variables not set (strict): alpha, beta, zeta; used by ")
	g.Expect(err.Error()).To(ContainSubstring("ConfigMap a"))
	g.Expect(err.Error()).To(ContainSubstring("ConfigMap b"))
	g.Expect(err.Error()).NotTo(ContainSubstring("ConfigMap c"))
	g.Expect(err.Error()).NotTo(ContainSubstring("mid"))
}

// TestSubstituteDisabledAnnotation: an object annotated converge.dev/substitute: disabled
// keeps its ${...} as written, even unset or malformed ones in strict mode.
func TestSubstituteDisabledAnnotation(t *testing.T) {
	g := NewWithT(t)
	root, _ := newRepo(t)
	write(t, root, "script.yaml", `apiVersion: v1
kind: ConfigMap
metadata:
  name: script
  annotations: {converge.dev/substitute: disabled}
data:
  run.sh: 'echo "${1}" ${HOME} ${env}'
`)
	write(t, root, "cm.yaml", cm("app", "${env}"))
	res, err := render(Options{Root: root, Substitute: &Substitution{Vars: map[string]string{"env": "prod"}, Strict: true}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Objects[0].Object["data"]).To(HaveKeyWithValue("key", "prod"))
	g.Expect(res.Objects[1].Object["data"]).To(HaveKeyWithValue("run.sh", `echo "${1}" ${HOME} ${env}`))
}

// TestSubstituteCannotInjectStructure: a value is inserted into one string: YAML in it
// stays text, apiVersion and kind are not substituted, and the owner labels and target
// namespace win over substituted ones.
func TestSubstituteCannotInjectStructure(t *testing.T) {
	g := NewWithT(t)
	root, _ := newRepo(t)
	write(t, root, "cm.yaml", `apiVersion: v1
kind: ${kind}
metadata:
  name: app
  namespace: ${ns}
  labels: {converge.dev/name: "${owner}"}
data:
  replicas: ${n}
  inject: ${evil}
`)
	evil := "x\nkind: Secret\nmetadata:\n  name: stolen\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: pwned}"
	vars := map[string]string{"kind": "Secret", "ns": "other", "owner": "someone-else", "n": "3", "evil": evil}
	res, err := render(Options{Root: root, Path: "cm.yaml", TargetNamespace: "mine", OwnerName: "st", OwnerNamespace: "team",
		Substitute: &Substitution{Vars: vars, Strict: true}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ids(res.Objects)).To(Equal([]string{"${kind} mine/app"}), "one object, kind and namespace unchanged")
	o := res.Objects[0]
	g.Expect(o.GetLabels()).To(HaveKeyWithValue("converge.dev/name", "st"))
	g.Expect(o.Object["data"]).To(HaveKeyWithValue("inject", evil), "the value is one string")
	// A plain scalar that is one reference is typed as Flux types it (see
	// TestSubstituteTypesPlainScalars); the multi-line value stays text.
	g.Expect(o.Object["data"]).To(HaveKeyWithValue("replicas", int64(3)))
}

// TestSubstituteNamespaceWithoutTargetNamespace: without a target namespace a
// substituted namespace is validated like a written one.
func TestSubstituteNamespaceIsValidated(t *testing.T) {
	g := NewWithT(t)
	root, _ := newRepo(t)
	write(t, root, "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app, namespace: '${ns}'}\n")
	res, err := render(Options{Root: root, Path: "cm.yaml", Substitute: &Substitution{Vars: map[string]string{"ns": "a/../b"}}})
	expectFailure(g, res, err, ErrInvalidObject, "invalid metadata.namespace")
}

// TestSubstituteNeverEchoesValues: errors name variables, objects and fields, never a
// variable's value nor the text of the object.
func TestSubstituteNeverEchoesValues(t *testing.T) {
	const secret = "s3cr3t-t0ken-value"
	g := NewWithT(t)
	root, _ := newRepo(t)
	write(t, root, "a.yaml", cm("a", "token=${token} ${missing}"))
	write(t, root, "b.yaml", cm("b", "prefix-"+secret+"-${token"))
	for _, path := range []string{"a.yaml", "b.yaml"} {
		res, err := render(Options{Root: root, Path: path, Substitute: &Substitution{Vars: map[string]string{"token": secret}, Strict: true}})
		expectFailure(g, res, err, ErrSubstitution, "")
		g.Expect(err.Error()).NotTo(ContainSubstring(secret))
		g.Expect(err.Error()).NotTo(ContainSubstring("prefix"))
	}
}

// TestSubstituteBudget: many references to a large value cannot blow the daemon's memory
// up: substitution shares the render's byte budget.
func TestSubstituteBudget(t *testing.T) {
	g := NewWithT(t)
	root, _ := newRepo(t)
	write(t, root, "cm.yaml", cm("a", strings.Repeat("${big}", 1000)))
	big := strings.Repeat("x", 1<<20)
	res, err := render(Options{Root: root, Path: "cm.yaml", Limits: Limits{MaxTotalBytes: 64 << 20},
		Substitute: &Substitution{Vars: map[string]string{"big": big}}})
	expectFailure(g, res, err, ErrLimitExceeded, "byte budget")
}

// TestSubstituteKustomize: substitution runs on kustomize's output too, after it.
func TestSubstituteKustomize(t *testing.T) {
	g := NewWithT(t)
	root, _ := newRepo(t)
	write(t, root, "app/kustomization.yaml", "resources: [cm.yaml]\nnamePrefix: ${env}-\n")
	write(t, root, "app/cm.yaml", cm("app", "${env}"))
	res, err := render(Options{Root: root, Path: "app", Substitute: &Substitution{Vars: map[string]string{"env": "prod"}, Strict: true}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ids(res.Objects)).To(Equal([]string{"ConfigMap prod-app"}))
	g.Expect(res.Objects[0].Object["data"]).To(HaveKeyWithValue("key", "prod"))
}

// FuzzSubstitute: any string and value substitute without panic; a string without ${ is
// left as is; an error is ErrSubstitution and never holds the value; only names written
// in the string can be reported missing.
func FuzzSubstitute(f *testing.F) {
	for _, s := range []string{"${a}", "$${a}", "${a:=${b:-c}}", "${", "${a", "x${1}", "${a=}", "}}${{", "${b:=$${a}}${zz}"} {
		f.Add(s, "value-1234")
	}
	f.Fuzz(func(t *testing.T, in, value string) {
		x := &expander{vars: map[string]string{"a": value, "b": ""}, strict: true, missing: map[string]bool{}, budget: 1 << 20}
		out, err := x.expand(in)
		if err != nil {
			if !errors.Is(err, ErrSubstitution) && !errors.Is(err, ErrLimitExceeded) {
				t.Fatalf("error %v is neither ErrSubstitution nor ErrLimitExceeded", err)
			}
			if len(value) >= 8 && !strings.Contains(in, value) && !strings.Contains(badReference(""), value) &&
				strings.Contains(err.Error(), value) {
				t.Fatalf("error %q holds the value %q", err, value)
			}
			return
		}
		if !strings.Contains(in, "${") && out != in {
			t.Fatalf("%q without a reference became %q", in, out)
		}
		for n := range x.missing {
			if !strings.Contains(in, n) {
				t.Fatalf("missing %q is not in %q", n, in)
			}
		}
	})
}

// TestSubstituteHostileNesting: defaults nested a hundred thousand deep fail at once with
// a clear error instead of recursing through them; nesting within the bound works.
func TestSubstituteHostileNesting(t *testing.T) {
	g := NewWithT(t)
	deep := strings.Repeat("${a:=", 100_000) + "x" + strings.Repeat("}", 100_000)
	_, err := substituted(t, "'"+deep+"'", Substitution{Strict: true})
	g.Expect(err).To(MatchError(ErrSubstitution))
	g.Expect(err.Error()).To(ContainSubstring("defaults nest deeper than 8 references"))

	ok := strings.Repeat("${a:=", 8) + "x" + strings.Repeat("}", 8)
	got, err := substituted(t, "'"+ok+"'", Substitution{Strict: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal("x"))
}

// BenchmarkSubstitute substitutes 1 000 ConfigMaps of 10 values, each with two references
// (and the Deployments of benchRepo, with none), after a plain render.
//
//	go test ./sync/render -run '^$' -bench BenchmarkSubstitute -benchmem
func BenchmarkSubstitute(b *testing.B) {
	root := benchRepo(b, false)
	for i := 0; i < 1000; i++ {
		data := ""
		for k := 0; k < 10; k++ {
			data += fmt.Sprintf("  k%d: app-${env}.${region:=eu}.example.com/%d\n", k, k)
		}
		write(b, root, fmt.Sprintf("configmaps/cm-%04d.yaml", i),
			fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-%04d}\ndata:\n%s", i, data))
	}
	for _, sub := range []struct {
		name string
		s    *Substitution
	}{{"none", nil}, {"substituted", &Substitution{Vars: map[string]string{"env": "prod"}, Strict: true}}} {
		b.Run(sub.name, func(b *testing.B) {
			opts := Options{Root: root, TargetNamespace: "shop", Substitute: sub.s}
			if _, err := render(opts); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := render(opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestSubstituteRedactsSecretNames: an object whose name is substituted from a value read
// from a Secret is not named by it in the error of another variable.
func TestSubstituteRedactsSecretNames(t *testing.T) {
	const secret = "s3cr3t-t0ken-value"
	g := NewWithT(t)
	root, _ := newRepo(t)
	write(t, root, "a.yaml", cm("db-${token}", "${missing}"))
	res, err := render(Options{Root: root, Path: "a.yaml", Substitute: &Substitution{
		Vars: map[string]string{"token": secret}, Strict: true, Sensitive: []string{secret}}})
	expectFailure(g, res, err, ErrSubstitution, "variables not set (strict): missing")
	g.Expect(err.Error()).To(ContainSubstring("[redacted]"))
	g.Expect(err.Error()).NotTo(ContainSubstring(secret))
}
