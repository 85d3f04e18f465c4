package helm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	release "helm.sh/helm/v4/pkg/release/v1"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
)

// Hook is one Helm hook of a release.
type Hook struct {
	Object *unstructured.Unstructured
	// Events: pre-install, post-install, pre-upgrade, post-upgrade, pre-delete, post-delete,
	// pre-rollback, post-rollback, test.
	Events []string
	// Weight is helm.sh/hook-weight (0 when unset or not a number, as Helm).
	Weight int
	// DeletePolicies is helm.sh/hook-delete-policy; before-hook-creation when unset, as Helm.
	DeletePolicies []string
}

// Release is what a chart renders to.
type Release struct {
	// CRDs from crds/ of the chart and its subcharts, not templated (as Helm).
	CRDs []*unstructured.Unstructured
	// Objects are the manifests without hooks, tests or NOTES, in Helm's install order.
	Objects []*unstructured.Unstructured
	// Hooks in Helm's order: by kind (install order), then stably by weight and name; test
	// hooks included (their Events hold "test").
	Hooks []Hook
	// Notes is the top chart's rendered NOTES.txt.
	Notes string
}

const notesFile = "NOTES.txt"

func collect(ch *chartv2.Chart, files map[string]string, opts Options) (*Release, error) {
	rel := &Release{}
	for name, content := range files {
		if strings.HasSuffix(name, notesFile) {
			if name == path.Join(ch.Name(), "templates", notesFile) {
				rel.Notes = content
			}
			delete(files, name)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", ch.Name(), err)
	}
	for _, m := range manifests {
		obj, err := decodeObject(m.Name, m.Content)
		if err != nil {
			return nil, err
		}
		if obj != nil {
			rel.Objects = append(rel.Objects, obj)
		}
	}
	if !opts.DisableHooks {
		if rel.Hooks, err = convertHooks(hooks); err != nil {
			return nil, err
		}
	}
	if !opts.SkipCRDs {
		if rel.CRDs, err = crds(ch); err != nil {
			return nil, err
		}
	}
	return rel, nil
}

func convertHooks(hooks []*release.Hook) ([]Hook, error) {
	sort.SliceStable(hooks, func(i, j int) bool {
		if hooks[i].Weight == hooks[j].Weight {
			return hooks[i].Name < hooks[j].Name
		}
		return hooks[i].Weight < hooks[j].Weight
	})
	out := make([]Hook, 0, len(hooks))
	for _, h := range hooks {
		obj, err := decodeObject(h.Path, h.Manifest)
		if err != nil {
			return nil, err
		}
		if obj == nil {
			continue
		}
		hk := Hook{Object: obj, Weight: h.Weight}
		for _, e := range h.Events {
			hk.Events = append(hk.Events, e.String())
		}
		for _, p := range h.DeletePolicies {
			hk.DeletePolicies = append(hk.DeletePolicies, p.String())
		}
		if len(hk.DeletePolicies) == 0 {
			hk.DeletePolicies = []string{release.HookBeforeHookCreation.String()}
		}
		out = append(out, hk)
	}
	return out, nil
}

// decodeObject decodes one YAML document; an empty one (comments only) is nil.
func decodeObject(source, doc string) (*unstructured.Unstructured, error) {
	var m map[string]any
	if err := utilyaml.Unmarshal([]byte(doc), &m); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if len(m) == 0 {
		return nil, nil
	}
	obj := &unstructured.Unstructured{Object: m}
	if obj.GetAPIVersion() == "" || obj.GetKind() == "" {
		return nil, fmt.Errorf("%s: an object without apiVersion or kind", source)
	}
	return obj, nil
}

func crds(ch *chartv2.Chart) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, crd := range ch.CRDObjects() {
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(crd.File.Data)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", crd.Filename, err)
			}
			obj, err := decodeObject(crd.Filename, string(doc))
			if err != nil {
				return nil, err
			}
			if obj != nil {
				out = append(out, obj)
			}
		}
	}
	return out, nil
}
