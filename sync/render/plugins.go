package render

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"
	gosync "sync"

	"sigs.k8s.io/kustomize/api/provider"
	"sigs.k8s.io/kustomize/api/resmap"
	sigsyaml "sigs.k8s.io/yaml"
)

// pluginEntry checks one entry of generators, transformers or validators: an
// inline config, a file of configs, or a directory whose kustomization builds the
// configs. A directory is built here, its output checked and kept for kustomize,
// which then never builds the directory itself (see confinedFS.ReadFile).
func (p *preflight) pluginEntry(dir, file, field, entry string) error {
	if inline, err := p.inlinePluginConfig(field, entry); inline || err != nil {
		return err
	}
	_, r, err := p.reference(dir, field, entry, true, false)
	if err != nil || !r.info.IsDir() {
		return err
	}
	if by, ok := p.bases[r.rel]; ok {
		return classErr(ErrKustomize, "%s: %q is also a base (resources or components) of %s", field, entry, by)
	}
	p.pluginDirs[r.rel] = file
	return p.buildPluginDir(field, r.rel)
}

// buildPluginDir builds the kustomization in directory rel, whose output are plugin
// configs, checks those configs, and keeps them for kustomize to read in place of
// the directory. Directories it refers to were walked, and plugin directories among
// them built, before (bottom up), so this build gets their checked output too.
func (p *preflight) buildPluginDir(field, rel string) error {
	p.cfs.mu.Lock()
	_, built := p.cfs.plugins[rel]
	p.cfs.mu.Unlock()
	if built {
		return nil
	}
	rm, err := p.build(rel)
	if err != nil {
		return fileErr(rel, err)
	}
	data, err := rm.AsYaml()
	if err != nil {
		return fileErr(rel, classErr(ErrKustomize, "%s", p.scrub(err.Error())))
	}
	if err := p.pluginConfigs(field, rel+" (as built)", data); err != nil {
		return err
	}
	p.cfs.mu.Lock()
	p.cfs.plugins[rel] = data
	p.cfs.mu.Unlock()
	return nil
}

// reference checks one entry of resources, components, generators, transformers or
// validators: a file, or a directory holding a kustomization. It returns how many
// resource files the entry expands to, and what it resolves to.
func (p *preflight) reference(dir, field, entry string, plugins, mustBeDir bool) (int, resolved, error) {
	if looksRemote(entry) {
		return 0, resolved{}, classErr(ErrRemoteDisabled, "%s: %q", field, entry)
	}
	if filepath.IsAbs(entry) {
		return 0, resolved{}, classErr(ErrOutsideRoot, "%s: %q is an absolute path", field, entry)
	}
	target := path.Join(dir, filepath.ToSlash(entry))
	if target == ".." || strings.HasPrefix(target, "../") {
		return 0, resolved{}, classErr(ErrOutsideRoot, "%s: %q leaves the repository", field, entry)
	}
	r, err := p.cfs.resolve(target)
	if err != nil {
		return 0, resolved{}, fmt.Errorf("%s: %q: %w", field, entry, err)
	}
	if r.info.IsDir() {
		n, err := p.kustomization(r.rel, plugins)
		return n, r, err
	}
	if mustBeDir {
		return 0, resolved{}, classErr(ErrKustomize, "%s: %q is not a directory", field, entry)
	}
	if plugins {
		data, err := p.cfs.readFile(r, r.rel)
		if err != nil {
			return 0, resolved{}, fmt.Errorf("%s: %q: %w", field, entry, err)
		}
		if err := p.pluginConfigs(field, r.rel, data); err != nil {
			return 0, resolved{}, err
		}
	}
	return 1, r, nil
}

// inlinePluginConfig reports whether entry is an inline plugin config (YAML
// rather than a path), as kustomize decides — by whether its resource factory
// parses the entry — and checks it when it is.
func (p *preflight) inlinePluginConfig(field, entry string) (bool, error) {
	if err := guardYAML([]byte(entry), p.cfs.limits); err != nil {
		return true, fmt.Errorf("%s: inline: %w", field, err)
	}
	rm, err := pluginConfigFactory().NewResMapFromBytes([]byte(entry))
	if err != nil {
		return false, nil // kustomize will take it as a path
	}
	return true, p.checkPluginConfigs(field, "inline", rm)
}

// builtinPathKeys are the fields of built-in plugin configs that kustomize loads
// files from (PatchTransformer, PatchJson6902Transformer,
// PatchStrategicMergeTransformer, ReplacementTransformer, ConfigMapGenerator,
// SecretGenerator, ValueAddTransformer; HelmChartInflationGenerator is refused
// whole). They are matched at any depth and case-insensitively, as encoding/json
// matches them (TestBuiltinPluginsAreClassified lists which plugin loads what).
var builtinPathKeys = []string{
	"path", "paths", "files", "envs", "env", "targetFilePath", "valuesFile", "additionalValuesFiles",
}

// pluginConfigFactory parses plugin configs as kustomize does: kustomize's own
// resource factory, in its default configuration (as krusty makes it).
var pluginConfigFactory = gosync.OnceValue(func() *resmap.Factory {
	return resmap.NewFactory(provider.NewDepProvider().GetResourceFactory())
})

// pluginConfigs checks the plugin configs in data, a file or a directory's build
// output: only built-in plugins, none of them helm, none loading from a URL.
func (p *preflight) pluginConfigs(field, file string, data []byte) error {
	if err := guardYAML(data, p.cfs.limits); err != nil {
		return fmt.Errorf("%s: %s: %w", field, file, err)
	}
	rm, err := pluginConfigFactory().NewResMapFromBytes(data)
	if err != nil {
		return classErr(ErrKustomize, "%s: %s: %s", field, file, p.scrub(err.Error()))
	}
	return p.checkPluginConfigs(field, file, rm)
}

// checkPluginConfigs checks each config of rm as kustomize's plugin loader will
// take it: a built-in plugin when its apiVersion is "builtin", configured from the
// config's YAML, which the plugin decodes with sigs.k8s.io/yaml into its struct.
func (p *preflight) checkPluginConfigs(field, file string, rm resmap.ResMap) error {
	if n := rm.Size(); n > p.cfs.limits.MaxDocuments {
		return classErr(ErrLimitExceeded, "%s: %s: more than %d plugin configs", field, file, p.cfs.limits.MaxDocuments)
	}
	for _, res := range rm.Resources() {
		gvk := res.GetGvk()
		if gvk.Group != "" || gvk.Version != "builtin" {
			what := "plugin"
			ann := res.GetAnnotations()
			for _, key := range []string{"config.kubernetes.io/function", "config.k8s.io/function"} {
				if _, fn := ann[key]; fn {
					what = "KRM function (exec or container)"
				}
			}
			return classErr(ErrPluginDisabled, "%s: %s %s/%s is an external %s; only built-in generators and transformers are allowed",
				field, file, gvk.ApiVersion(), gvk.Kind, what)
		}
		if strings.HasPrefix(strings.ToLower(gvk.Kind), "helmchart") {
			return classErr(ErrPluginDisabled, "%s: %s %s: helm is not supported", field, file, gvk.Kind)
		}
		y, err := res.AsYAML()
		if err != nil {
			return classErr(ErrKustomize, "%s: %s %s: %s", field, file, gvk.Kind, p.scrub(err.Error()))
		}
		var config any
		if err := sigsyaml.Unmarshal(y, &config); err != nil {
			return classErr(ErrKustomize, "%s: %s %s: %s", field, file, gvk.Kind, p.scrub(err.Error()))
		}
		if err := checkPathKeys(field+": "+file+" "+gvk.Kind, config); err != nil {
			return err
		}
	}
	return nil
}

// isPathKey reports whether k names a file-loading field of a built-in plugin
// config, compared as encoding/json compares keys with field names.
func isPathKey(k string) bool {
	for _, key := range builtinPathKeys {
		if strings.EqualFold(k, key) {
			return true
		}
	}
	return false
}

// checkPathKeys refuses URLs in the file-loading fields of a plugin config.
func checkPathKeys(where string, v any) error {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if isPathKey(k) {
				if err := checkPathValue(where, k, val); err != nil {
					return err
				}
			}
			if err := checkPathKeys(where, val); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range x {
			if err := checkPathKeys(where, e); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkPathValue(where, key string, v any) error {
	switch x := v.(type) {
	case string:
		if looksRemote(x) {
			return classErr(ErrRemoteDisabled, "%s %s: %q", where, key, x)
		}
	case []any:
		for _, e := range x {
			if err := checkPathValue(where, key, e); err != nil {
				return err
			}
		}
	}
	return nil
}
