package render

import (
	"context"
	"errors"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

func TestRenderPlain(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, root string)
		opts  Options // Root is filled in
		want  []string
		check func(g Gomega, res *Result)
	}{
		{
			name: "flat directory, lexical file order does not matter",
			setup: func(t *testing.T, root string) {
				write(t, root, "apps/b.yaml", cm("b", "1"))
				write(t, root, "apps/a.yml", cm("a", "1"))
				write(t, root, "apps/README.md", "# not a manifest: ignored\n")
			},
			opts: Options{Path: "apps"},
			want: []string{"ConfigMap a", "ConfigMap b"},
		},
		{
			name: "nested directories are walked recursively; dot directories and dot files skipped",
			setup: func(t *testing.T, root string) {
				write(t, root, "deploy/web/deploy.yaml", deploy("web"))
				write(t, root, "deploy/web/config/cm.yaml", cm("web-config", "x"))
				write(t, root, "deploy/.git/config.yaml", "not: [valid")
				write(t, root, "deploy/.github/workflows/ci.yml", "on: push\n")
				write(t, root, "deploy/.gitlab-ci.yml", "stages: [build]\n")
			},
			opts: Options{Path: "deploy"},
			want: []string{"ConfigMap web-config", "Deployment web"},
		},
		{
			name: "JSON files, and a JSON List expanded into its items",
			setup: func(t *testing.T, root string) {
				write(t, root, "svc.json", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"web"},"spec":{"ports":[{"port":80}]}}`)
				write(t, root, "list.json", `{"apiVersion":"v1","kind":"List","items":[`+
					`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"l1"}},`+
					`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"l2"}}]}`)
			},
			want: []string{"ConfigMap l1", "ConfigMap l2", "Service web"},
			check: func(g Gomega, res *Result) {
				port, _, _ := unstructured.NestedSlice(res.Objects[2].Object, "spec", "ports")
				g.Expect(port[0].(map[string]any)["port"]).To(Equal(int64(80)), "numbers are int64 as in unstructured")
			},
		},
		{
			name: "multi-document YAML with empty and comment-only documents",
			setup: func(t *testing.T, root string) {
				write(t, root, "all.yaml", "---\n# just a comment\n---\n"+cm("one", "1")+"---\n---\n"+cm("two", "2")+"...\n")
			},
			want: []string{"ConfigMap one", "ConfigMap two"},
		},
		{
			name: "YAML 1.2 scalars as kustomize reads them; anchors and merge keys expand",
			setup: func(t *testing.T, root string) {
				write(t, root, "cm.yaml", `apiVersion: v1
kind: ConfigMap
metadata:
  name: scalars
  labels: &l {app: web}
  annotations:
    <<: *l
    note: "merged"
data:
  yes: yes
  octal: "0777"
  on: "on"
`)
			},
			want: []string{"ConfigMap scalars"},
			check: func(g Gomega, res *Result) {
				o := res.Objects[0]
				g.Expect(o.GetAnnotations()).To(Equal(map[string]string{"app": "web", "note": "merged"}))
				data, _, _ := unstructured.NestedStringMap(o.Object, "data")
				g.Expect(data).To(HaveKeyWithValue("yes", "yes"), "yes stays a string (YAML 1.2)")
			},
		},
		{
			name: "a symlink to a file and a symlinked directory inside the root are followed",
			setup: func(t *testing.T, root string) {
				write(t, root, "shared/cm.yaml", cm("shared", "1"))
				write(t, root, "common/base.yaml", cm("common", "1"))
				symlink(t, root, "app/link.yaml", "../shared/cm.yaml")
				symlink(t, root, "app/common", "../common")
			},
			opts: Options{Path: "app"},
			want: []string{"ConfigMap common", "ConfigMap shared"},
		},
		{
			name:  "path naming a single file",
			setup: func(t *testing.T, root string) { write(t, root, "one/cm.yaml", cm("single", "1")) },
			opts:  Options{Path: "one/cm.yaml"},
			want:  []string{"ConfigMap single"},
		},
		{
			name: "targetNamespace goes on namespaced objects only; a cluster-scoped object loses a stray namespace",
			setup: func(t *testing.T, root string) {
				write(t, root, "a.yaml", deploy("web")+"---\n"+cm("cfg", "1")+"---\n"+
					"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: elsewhere, namespace: other}\n---\n"+
					"apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n---\n"+
					"apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: reader, namespace: bogus}\n---\n"+
					"apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: fast}\nprovisioner: x\n---\n"+
					"apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {name: hook}\n")
			},
			opts: Options{TargetNamespace: "shop"},
			want: []string{"Namespace shop", "ConfigMap shop/cfg", "ConfigMap shop/elsewhere", "ValidatingWebhookConfiguration hook",
				"Deployment shop/web", "ClusterRole reader", "StorageClass fast"},
		},
		{
			name: "without targetNamespace, namespaces in the files are kept",
			setup: func(t *testing.T, root string) {
				write(t, root, "a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: team}\n---\n"+cm("b", "1"))
			},
			want: []string{"ConfigMap b", "ConfigMap team/a"},
		},
		{
			name: "custom kinds: scope from a CRD in the same render, from IsNamespaced, else namespaced",
			setup: func(t *testing.T, root string) {
				write(t, root, "crd.yaml", `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Cluster
  names: {kind: Widget, plural: widgets}
  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object}}}]
`)
				write(t, root, "crs.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n---\n"+
					"apiVersion: other.io/v1\nkind: Gadget\nmetadata: {name: g}\n---\n"+
					"apiVersion: unknown.io/v1\nkind: Thing\nmetadata: {name: t}\n")
			},
			opts: Options{TargetNamespace: "ns", IsNamespaced: func(gvk schema.GroupVersionKind) (bool, error) {
				return gvk.Kind != "Gadget", nil
			}},
			want: []string{"CustomResourceDefinition widgets.example.com", "Widget w", "Gadget g", "Thing ns/t"},
		},
		{
			name: "owner labels are added and win over labels in the files",
			setup: func(t *testing.T, root string) {
				write(t, root, "a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels: {app: x, converge.dev/name: hijack}\n")
			},
			opts: Options{OwnerName: "shop", OwnerNamespace: "team-a"},
			want: []string{"ConfigMap a"},
			check: func(g Gomega, res *Result) {
				g.Expect(res.Objects[0].GetLabels()).To(Equal(map[string]string{
					"app": "x", convergev1.NameLabel: "shop", convergev1.NamespaceLabel: "team-a",
				}))
			},
		},
		{
			name:  "an empty directory renders nothing, successfully",
			setup: func(t *testing.T, root string) { write(t, root, "empty/README.md", "nothing\n") },
			opts:  Options{Path: "empty"},
			want:  []string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			root, _ := newRepo(t)
			tt.setup(t, root)
			opts := tt.opts
			opts.Root = root
			res, err := render(opts)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.Kustomized).To(BeFalse())
			g.Expect(ids(res.Objects)).To(Equal(tt.want))
			g.Expect(res.Digest).To(MatchRegexp(`^sha256:[0-9a-f]{64}$`))
			if tt.check != nil {
				tt.check(g, res)
			}
		})
	}
}

func TestRenderKustomize(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, root string)
		opts  Options
		want  []string
		check func(g Gomega, res *Result)
	}{
		{
			name: "overlay with a base elsewhere in the repository, namePrefix and a strategic merge patch",
			setup: func(t *testing.T, root string) {
				write(t, root, "bases/web/kustomization.yaml", "resources: [deploy.yaml]\n")
				write(t, root, "bases/web/deploy.yaml", deploy("web"))
				write(t, root, "clusters/prod/apps/kustomization.yaml", `resources: [../../../bases/web]
namePrefix: prod-
patches:
- patch: |
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: web}
    spec: {replicas: 3}
`)
			},
			opts: Options{Path: "clusters/prod/apps"},
			want: []string{"Deployment prod-web"},
			check: func(g Gomega, res *Result) {
				r, _, _ := unstructured.NestedInt64(res.Objects[0].Object, "spec", "replicas")
				g.Expect(r).To(Equal(int64(3)))
			},
		},
		{
			name: "configMapGenerator from literals and a file, name hash and reference fixed up",
			setup: func(t *testing.T, root string) {
				write(t, root, "app/kustomization.yaml", `resources: [deploy.yaml]
configMapGenerator:
- name: settings
  literals: [MODE=prod]
  files: [app.properties]
`)
				write(t, root, "app/app.properties", "threads=4\n")
				write(t, root, "app/deploy.yaml", deploy("web")+`      volumes:
      - name: cfg
        configMap: {name: settings}
`)
			},
			opts: Options{Path: "app"},
			check: func(g Gomega, res *Result) {
				g.Expect(res.Objects).To(HaveLen(2))
				name := res.Objects[0].GetName()
				g.Expect(res.Objects[0].GetKind()).To(Equal("ConfigMap"))
				g.Expect(name).To(MatchRegexp(`^settings-[a-z0-9]{10}$`))
				data, _, _ := unstructured.NestedStringMap(res.Objects[0].Object, "data")
				g.Expect(data).To(Equal(map[string]string{"MODE": "prod", "app.properties": "threads=4\n"}))
				vols, _, _ := unstructured.NestedSlice(res.Objects[1].Object, "spec", "template", "spec", "volumes")
				g.Expect(vols[0]).To(HaveKeyWithValue("configMap", map[string]any{"name": name}))
			},
		},
		{
			name: "targetNamespace overrides kustomize's namespace on namespaced objects only; owner labels",
			setup: func(t *testing.T, root string) {
				write(t, root, "kustomization.yaml", "namespace: from-kustomize\nresources: [all.yaml]\n")
				write(t, root, "all.yaml", cm("cfg", "1")+"---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: reader}\n")
			},
			opts: Options{TargetNamespace: "target", OwnerName: "st", OwnerNamespace: "team"},
			want: []string{"ConfigMap target/cfg", "ClusterRole reader"},
			check: func(g Gomega, res *Result) {
				for _, o := range res.Objects {
					g.Expect(o.GetLabels()).To(HaveKeyWithValue(convergev1.NameLabel, "st"))
					g.Expect(o.GetLabels()).To(HaveKeyWithValue(convergev1.NamespaceLabel, "team"))
				}
			},
		},
		{
			name: "a Kustomization file name and a symlinked base inside the repository",
			setup: func(t *testing.T, root string) {
				write(t, root, "real-base/kustomization.yml", "resources: [cm.yaml]\n")
				write(t, root, "real-base/cm.yaml", cm("from-base", "1"))
				symlink(t, root, "app/base", "../real-base")
				write(t, root, "app/Kustomization", "resources: [base]\nnameSuffix: -x\n")
			},
			opts: Options{Path: "app"},
			want: []string{"ConfigMap from-base-x"},
		},
		{
			name: "built-in generator and transformer configs, in files and inline",
			setup: func(t *testing.T, root string) {
				write(t, root, "kustomization.yaml", `resources: [cm.yaml]
generators: [gen.yaml]
transformers:
- |
  apiVersion: builtin
  kind: PrefixSuffixTransformer
  metadata: {name: pfx}
  prefix: t-
  fieldSpecs: [{path: metadata/name}]
`)
				write(t, root, "cm.yaml", cm("plain", "1"))
				write(t, root, "gen.yaml", "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: generated}\nliterals: [k=v]\noptions: {disableNameSuffixHash: true}\n")
			},
			want: []string{"ConfigMap t-generated", "ConfigMap t-plain"},
		},
		{
			name: "a diamond of bases (the same base twice under different prefixes) is fine",
			setup: func(t *testing.T, root string) {
				write(t, root, "base/kustomization.yaml", "resources: [cm.yaml]\n")
				write(t, root, "base/cm.yaml", cm("c", "1"))
				write(t, root, "a/kustomization.yaml", "resources: [../base]\nnamePrefix: a-\n")
				write(t, root, "b/kustomization.yaml", "resources: [../base]\nnamePrefix: b-\n")
				write(t, root, "top/kustomization.yaml", "resources: [../a, ../b]\n")
			},
			opts: Options{Path: "top"},
			want: []string{"ConfigMap a-c", "ConfigMap b-c"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			root, _ := newRepo(t)
			tt.setup(t, root)
			opts := tt.opts
			opts.Root = root
			res, err := render(opts)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.Kustomized).To(BeTrue())
			if tt.want != nil {
				g.Expect(ids(res.Objects)).To(Equal(tt.want))
			}
			if tt.check != nil {
				tt.check(g, res)
			}
		})
	}
}

func TestDigest(t *testing.T) {
	layoutA := func(t *testing.T, root string) {
		write(t, root, "x/all.yaml", cm("a", "1")+"---\n"+cm("b", "2"))
	}
	layoutB := func(t *testing.T, root string) { // same objects, other files, other order, other formatting
		write(t, root, "x/z/b.json", `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"b"},"data":{"key":"2"}}`)
		write(t, root, "x/a.yaml", "# a comment\n"+cm("a", "1"))
	}
	changed := func(t *testing.T, root string) {
		write(t, root, "x/all.yaml", cm("a", "1")+"---\n"+cm("b", "3"))
	}
	digest := func(t *testing.T, setup func(*testing.T, string), opts Options) string {
		root, _ := newRepo(t)
		setup(t, root)
		opts.Root, opts.Path = root, "x"
		res, err := render(opts)
		if err != nil {
			t.Fatal(err)
		}
		return res.Digest
	}
	base := Options{OwnerName: "o", OwnerNamespace: "n"}
	tests := []struct {
		name  string
		other func(*testing.T, string)
		opts  Options
		same  bool
	}{
		{name: "same content rendered twice", other: layoutA, opts: base, same: true},
		{name: "same objects from a different file layout", other: layoutB, opts: base, same: true},
		{name: "a changed value", other: changed, opts: base, same: false},
		{name: "another owner", other: layoutA, opts: Options{OwnerName: "p", OwnerNamespace: "n"}, same: false},
		{name: "another target namespace", other: layoutA, opts: Options{OwnerName: "o", OwnerNamespace: "n", TargetNamespace: "t"}, same: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			a := digest(t, layoutA, base)
			b := digest(t, tt.other, tt.opts)
			if tt.same {
				g.Expect(b).To(Equal(a))
			} else {
				g.Expect(b).NotTo(Equal(a))
			}
		})
	}
}

func TestOptionsValidation(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{name: "no root", opts: Options{}, want: "no checkout root"},
		{name: "owner name without namespace", opts: Options{Root: "/", OwnerName: "x"}, want: "set together"},
		{name: "owner too long for a label", opts: Options{Root: "/", OwnerName: strings.Repeat("a", 64), OwnerNamespace: "n"}, want: "not a valid label value"},
		{name: "bad target namespace", opts: Options{Root: "/", TargetNamespace: "Not_Valid"}, want: "target namespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			res, err := render(tt.opts)
			expectFailure(g, res, err, ErrInvalidOptions, tt.want)
		})
	}
}

func TestCancelled(t *testing.T) {
	g := NewWithT(t)
	root, _ := newRepo(t)
	write(t, root, "a.yaml", cm("a", "1"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := Render(ctx, Options{Root: root})
	g.Expect(res).To(BeNil())
	g.Expect(err).To(MatchError(context.Canceled))
}

func TestMissingPath(t *testing.T) {
	g := NewWithT(t)
	root, _ := newRepo(t)
	res, err := render(Options{Root: root, Path: "does/not/exist"})
	expectFailure(g, res, err, ErrNotFound, "does")
	var re *Error
	g.Expect(errors.As(err, &re)).To(BeTrue())
	g.Expect(re.File).To(Equal("does/not/exist"))
}
