package main

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// kustomizeBuild is `kustomize build dir` with the CLI's defaults (no --reorder flag: the
// legacy order), read from disk.
func kustomizeBuild(t *testing.T, dir string) []byte {
	t.Helper()
	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionUnspecified
	rm, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatal(err)
	}
	out, err := rm.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// runCommand runs the converge CLI in-process and returns its stdout.
func runCommand(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := newRootCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("converge %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.Bytes()
}

// TestInstallExportIsKustomizeBuild: `converge install --export` prints exactly
// `kustomize build config/default` of the repository, and --multi-tenant exactly
// config/multi-tenant: the binary carries the manifests the repository holds.
func TestInstallExportIsKustomizeBuild(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		overlay string
	}{
		{name: "default", args: []string{"install", "--export"}, overlay: "default"},
		{name: "multi-tenant", args: []string{"install", "--export", "--multi-tenant"}, overlay: "multi-tenant"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			want := kustomizeBuild(t, filepath.Join("..", "..", "config", tc.overlay))
			got := runCommand(t, tc.args...)
			g.Expect(string(got)).To(Equal(string(want)))
		})
	}
}

// installObjects splits an export into its objects, keyed "Kind/name".
func installObjects(t *testing.T, manifests []byte) map[string][]byte {
	t.Helper()
	objects := map[string][]byte{}
	for doc := range strings.SplitSeq(string(manifests), "\n---\n") {
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		objects[meta.Kind+"/"+meta.Metadata.Name] = []byte(doc)
	}
	return objects
}

func daemonDeployment(t *testing.T, objects map[string][]byte) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := yaml.UnmarshalStrict(objects["Deployment/converge"], d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestInstallManifests: what each install grants the daemon and how it runs it.
func TestInstallManifests(t *testing.T) {
	g := NewWithT(t)
	def := installObjects(t, runCommand(t, "install", "--export"))
	mt := installObjects(t, runCommand(t, "install", "--export", "--multi-tenant"))

	for _, key := range []string{"Namespace/converge-system", "CustomResourceDefinition/synctargets.converge.dev",
		"CustomResourceDefinition/notifiers.converge.dev", "ServiceAccount/converge", "Deployment/converge", "Service/converge-webhook"} {
		g.Expect(def).To(HaveKey(key))
		g.Expect(mt).To(HaveKey(key))
	}

	// The default install may apply anything; the multi-tenant one has no such binding.
	g.Expect(def).To(HaveKey("ClusterRoleBinding/converge-cluster-admin"))
	g.Expect(string(def["ClusterRoleBinding/converge-cluster-admin"])).To(ContainSubstring("name: cluster-admin"))
	g.Expect(mt).NotTo(HaveKey("ClusterRoleBinding/converge-cluster-admin"))
	for key, doc := range mt {
		g.Expect(string(doc)).NotTo(ContainSubstring("cluster-admin"), key)
	}

	// The locked-down role: no wildcard, no write access beyond SyncTargets, SyncTargetSets,
	// Notifiers' status and events.
	role := &rbacv1.ClusterRole{}
	g.Expect(yaml.UnmarshalStrict(mt["ClusterRole/converge-multi-tenant"], role)).To(Succeed())
	writes := map[string]bool{}
	for _, r := range role.Rules {
		g.Expect(r.APIGroups).NotTo(ContainElement("*"))
		g.Expect(r.Resources).NotTo(ContainElement("*"))
		g.Expect(r.Verbs).NotTo(ContainElement("*"))
		if slices.Contains(r.Resources, "secrets") {
			// Read by name; the one list is the SyncTargetSet clusters generator's, of metadata.
			g.Expect(r.Verbs).To(Or(Equal([]string{"get"}), Equal([]string{"list"})), "Secrets are read by name or listed, never watched")
		}
		for _, v := range r.Verbs {
			if v != "get" && v != "list" && v != "watch" {
				for _, res := range r.Resources {
					writes[res+":"+v] = true
				}
			}
		}
	}
	g.Expect(writes).To(Equal(map[string]bool{
		"synctargets:update": true, "synctargets:patch": true,
		"synctargets:create": true, "synctargets:delete": true, // SyncTargetSets generate and remove them
		"synctargetsets:update": true, "synctargetsets:patch": true, "synctargetsets/finalizers:update": true,
		"synctargetsets/status:update": true, "synctargetsets/status:patch": true,
		"synctargets/status:update": true, "synctargets/status:patch": true, "synctargets/finalizers:update": true,
		"notifiers/status:update": true, "notifiers/status:patch": true,
		"events:create": true, "events:patch": true, "serviceaccounts:impersonate": true,
	}))
	g.Expect(string(mt["ClusterRoleBinding/converge-multi-tenant"])).To(ContainSubstring("name: converge-multi-tenant"))
	g.Expect(string(mt["Role/converge-leader-election"])).To(ContainSubstring("leases"))

	// The daemon's flags are flags `converge serve` knows; multi-tenant adds its own.
	for name, objects := range map[string]map[string][]byte{"default": def, "multi-tenant": mt} {
		d := daemonDeployment(t, objects)
		c := d.Spec.Template.Spec.Containers[0]
		g.Expect(c.Image).To(HavePrefix("ghcr.io/converge-gitops/converge:"), name)
		g.Expect(c.Args[0]).To(Equal("serve"), name)
		serve := newServeCommand()
		g.Expect(serve.ParseFlags(c.Args[1:])).To(Succeed(), name)
		g.Expect(serve.Flags().Lookup("leader-elect").Value.String()).To(Equal("true"), name)
		g.Expect(c.SecurityContext.Capabilities.Drop).To(ConsistOf(BeEquivalentTo("ALL")), name)
		g.Expect(*c.SecurityContext.ReadOnlyRootFilesystem).To(BeTrue(), name)
		g.Expect(*d.Spec.Template.Spec.SecurityContext.RunAsNonRoot).To(BeTrue(), name)
		g.Expect(c.LivenessProbe.HTTPGet.Path).To(Equal("/healthz"), name)
		g.Expect(c.ReadinessProbe.HTTPGet.Path).To(Equal("/readyz"), name)
		g.Expect(d.Spec.Template.Spec.ServiceAccountName).To(Equal("converge"), name)
		if name == "multi-tenant" {
			g.Expect(serve.Flags().Lookup("default-service-account").Value.String()).To(Equal("converge-tenant-default"))
			g.Expect(serve.Flags().Lookup("drift-watch").Value.String()).To(Equal("false"))
			g.Expect(serve.Flags().Lookup("full-sync-interval").Value.String()).To(Equal("5m0s"))
			g.Expect(serve.Flags().Lookup("allow-cross-namespace-dependencies").Value.String()).To(Equal("false"))
			g.Expect(serve.Flags().Lookup("max-concurrent-per-namespace").Value.String()).To(Equal("10"))
		} else {
			g.Expect(serve.Flags().Lookup("default-service-account").Value.String()).To(BeEmpty())
			g.Expect(serve.Flags().Lookup("drift-watch").Value.String()).To(Equal("true"))
			g.Expect(serve.Flags().Lookup("allow-cross-namespace-dependencies").Value.String()).To(Equal("true"))
		}
	}
}

// TestInstallImage: --image replaces the daemon's image, and only it.
func TestInstallImage(t *testing.T) {
	for _, tc := range []struct{ image, want string }{
		{"registry.example.com/converge:v1.2.3", "registry.example.com/converge:v1.2.3"},
		{"localhost:5000/converge", "localhost:5000/converge:latest"},
		{"localhost:5000/converge:dev", "localhost:5000/converge:dev"},
		{"ghcr.io/converge-gitops/converge@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
			"ghcr.io/converge-gitops/converge@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
	} {
		t.Run(tc.image, func(t *testing.T) {
			g := NewWithT(t)
			plain := runCommand(t, "install", "--export", "--multi-tenant")
			got := runCommand(t, "install", "--export", "--multi-tenant", "--image", tc.image)
			d := daemonDeployment(t, installObjects(t, got))
			g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal(tc.want))
			// Nothing else changed.
			old := daemonDeployment(t, installObjects(t, plain)).Spec.Template.Spec.Containers[0].Image
			g.Expect(string(got)).To(Equal(strings.Replace(string(plain), "image: "+old+"\n", "image: "+tc.want+"\n", 1)))
		})
	}
}

// TestInstallDefaultImage: without --image, a stamped binary installs the image of its
// own version (its digest when stamped with one) instead of latest; --image still wins.
func TestInstallDefaultImage(t *testing.T) {
	for _, tc := range []struct {
		name, version, image string
		args                 []string
		want                 string
	}{
		{name: "dev build", version: "", want: "ghcr.io/converge-gitops/converge:latest"},
		{name: "release", version: "v1.2.3", want: "ghcr.io/converge-gitops/converge:v1.2.3"},
		{name: "describe", version: "v1.2.3-4-gabcdef0-dirty", want: "ghcr.io/converge-gitops/converge:v1.2.3-4-gabcdef0-dirty"},
		{name: "build metadata", version: "v1.2.3+meta", want: "ghcr.io/converge-gitops/converge:v1.2.3-meta"},
		{name: "stamped digest", version: "v1.2.3",
			image: "registry.example.com/converge:v1.2.3@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
			want:  "registry.example.com/converge:v1.2.3@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
		{name: "--image wins", version: "v1.2.3", args: []string{"--image", "localhost:5000/converge:dev"},
			want: "localhost:5000/converge:dev"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			stamp(t, tc.version, "", "", tc.image)
			for _, mt := range []bool{false, true} {
				args := append([]string{"install", "--export"}, tc.args...)
				if mt {
					args = append(args, "--multi-tenant")
				}
				d := daemonDeployment(t, installObjects(t, runCommand(t, args...)))
				g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal(tc.want))
			}
		})
	}
}
