// Package config embeds the manifests converge installs — the generated CRDs under
// crd/bases (from `make generate`), the kustomize bases crd, rbac and manager, and the
// overlays default and multi-tenant built from them — and the demo repository of `make
// run`, so that the binary carries exactly what the repository holds.
package config

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// The overlays `converge install` builds.
const (
	// Default is the default install: the daemon may apply anything.
	Default = "default"
	// MultiTenant is the locked-down install: the daemon acts only as the service
	// accounts SyncTargets name.
	MultiTenant = "multi-tenant"
)

// Image is the daemon's image, without tag; config/default sets the tag.
const Image = "ghcr.io/converge-gitops/converge"

//go:embed crd rbac manager default multi-tenant
var manifests embed.FS

// Demo holds the demo repository `make run` serves: samples/demo/deploy/*.yaml.
//
//go:embed samples/demo
var Demo embed.FS

// CRDs returns the CustomResourceDefinitions of the converge API.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	paths, err := fs.Glob(manifests, "crd/bases/*.yaml")
	if err != nil {
		return nil, err
	}
	crds := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(paths))
	for _, p := range paths {
		b, err := manifests.ReadFile(p)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(b, crd); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		crds = append(crds, crd)
	}
	return crds, nil
}

// KustomizeOptions are those of `kustomize build` run with no flags (its default legacy
// ordering: namespaces and CRDs first), so that Build gives exactly what it gives.
func KustomizeOptions() *krusty.Options {
	o := krusty.MakeDefaultOptions()
	o.Reorder = krusty.ReorderOptionUnspecified
	return o
}

// Build returns `kustomize build config/<overlay>` of the embedded manifests as
// multi-document YAML. image, when not empty, replaces the daemon's image (and tag) the
// way `kustomize edit set image` would.
func Build(overlay, image string) ([]byte, error) {
	switch overlay {
	case Default, MultiTenant:
	default:
		return nil, fmt.Errorf("unknown overlay %q", overlay)
	}
	mem := filesys.MakeFsInMemory()
	err := fs.WalkDir(manifests, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := manifests.ReadFile(p)
		if err != nil {
			return err
		}
		return mem.WriteFile(path.Join("/config", p), b)
	})
	if err != nil {
		return nil, fmt.Errorf("reading the embedded manifests: %w", err)
	}
	dir := path.Join("/config", overlay)
	if image != "" {
		// One more overlay on top, as a user would write it.
		k, err := imageOverlay(overlay, image)
		if err != nil {
			return nil, err
		}
		dir = "/config/install"
		if err := mem.WriteFile(path.Join(dir, "kustomization.yaml"), k); err != nil {
			return nil, err
		}
	}
	rm, err := krusty.MakeKustomizer(KustomizeOptions()).Run(mem, dir)
	if err != nil {
		return nil, fmt.Errorf("building config/%s: %w", overlay, err)
	}
	return rm.AsYaml()
}

// imageOverlay is a kustomization over overlay setting the daemon's image to ref
// ("name", "name:tag", "name@digest" or "name:tag@digest").
func imageOverlay(overlay, ref string) ([]byte, error) {
	img := types.Image{Name: Image}
	name := ref
	if i := strings.Index(name, "@"); i >= 0 {
		name, img.Digest = name[:i], name[i+1:]
	}
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name, img.NewTag = name[:i], name[i+1:]
	}
	if name == "" || strings.ContainsAny(name, " \t\n") || (img.Digest == "" && strings.Contains(ref, "@")) {
		return nil, fmt.Errorf("invalid image %q", ref)
	}
	img.NewName = name
	if img.NewTag == "" && img.Digest == "" {
		// A bare name keeps no tag of the base: it means latest, as it does for docker.
		img.NewTag = "latest"
	}
	k := types.Kustomization{
		TypeMeta:  types.TypeMeta{APIVersion: types.KustomizationVersion, Kind: types.KustomizationKind},
		Resources: []string{"../" + overlay},
		Images:    []types.Image{img},
	}
	return yaml.Marshal(k)
}
