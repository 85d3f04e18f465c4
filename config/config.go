// Package config embeds the manifests converge installs — the generated CRDs under
// crd/bases (from `make generate`) — and the demo repository of `make run`, so that the
// binary carries exactly what the repository holds.
package config

import (
	"embed"
	"fmt"
	"io/fs"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

//go:embed crd/bases/*.yaml
var crdFiles embed.FS

// Demo holds the demo repository `make run` serves: samples/demo/deploy/*.yaml.
//
//go:embed samples/demo
var Demo embed.FS

// CRDs returns the CustomResourceDefinitions of the converge API.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	paths, err := fs.Glob(crdFiles, "crd/bases/*.yaml")
	if err != nil {
		return nil, err
	}
	crds := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(paths))
	for _, p := range paths {
		b, err := crdFiles.ReadFile(p)
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
