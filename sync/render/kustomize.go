package render

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/types"
)

// Building kustomizations safely.
//
// krusty is run on confinedFS, mounted at mountPoint, with load restrictions off
// (a base or file anywhere in the repository is fine, as in Flux) because the file
// system itself refuses everything outside the root. Plugins are disabled
// (types.DisabledPluginConfig: built-in generators and transformers only, no exec or
// container functions, no helm).
//
// No network, no git. Kustomize's file loader fetches any http(s) URL it is asked
// to Load with its own http.Client, and clones any git-like URL it is asked to make
// a New root from by exec'ing git — both before the file system is consulted, and
// krusty (v0.21) offers no option to give the loader another client or cloner. So
// the loader must never be asked. Everything it is asked comes from two places:
//
//   - the fields of kustomization files (resources, components, generators,
//     transformers, validators, patches, replacements, generator files and env
//     files, crds, configurations, openapi, helm). The preflight parses each
//     kustomization with kustomize's own types, exactly as kustomize will, and
//     refuses every entry that kustomize could take for a URL, and every entry of
//     resources, components, generators, transformers and validators that is not
//     a local file or directory. TestKustomizationFieldsAreClassified fails when a
//     kustomize upgrade adds a field nobody has classified.
//   - the configs of built-in plugins (generators, transformers, validators), whose
//     path fields the plugins Load. A config is inline, a file, or the output of a
//     directory's kustomization — which can patch or rewrite a config into anything.
//     The preflight parses inline configs and files with kustomize's own resource
//     factory and checks each config as its plugin will decode it (JSON keys match
//     case-insensitively, so "PATH" is "path"). A directory it builds itself, bottom
//     up, checks the configs that come out, and hands them to kustomize in place of
//     the directory: kustomize loads a generators/transformers/validators entry as a
//     file first, and confinedFS answers that read of the directory with the checked
//     configs, so kustomize never builds such a directory itself. Its kustomization
//     file is then sealed (unreadable to kustomize) so that it could not either.
//
// Anything naming a non-built-in plugin, a function, helm, or a custom OpenAPI
// schema (which kustomize keeps in a process-wide variable, and panics on when
// invalid) is refused too. The preflight also gives the clear errors: an escaping
// base, a kustomization that includes itself, a diamond of bases that expands
// exponentially.
//
// Time. krusty takes no context. Every call it makes into confinedFS fails once
// the render's deadline has passed, so it stops at its next file read; with the
// network and exec ruled out, what it does between two reads is bounded CPU work
// on inputs already bounded by Limits. Render never starts a goroutine, so nothing
// outlives it, and no temporary directory is ever made (only a git clone would).
//
// The OpenAPI schema: kustomize parses its built-in Kubernetes schema into a
// process-wide cache on first use. krusty resets it only when a kustomization
// sets `openapi:`, which the preflight refuses, so it is parsed at most once per
// process (TestSchemaLoadedOnce).

// kustomizeOptions are the krusty options of every build.
func kustomizeOptions() *krusty.Options {
	return &krusty.Options{
		Reorder:           krusty.ReorderOptionNone, // Render sorts
		AddManagedbyLabel: false,
		LoadRestrictions:  types.LoadRestrictionsNone, // confinedFS confines to the repository root
		PluginConfig:      types.DisabledPluginConfig(),
	}
}

// renderKustomize builds the kustomization in directory rel.
func renderKustomize(ctx context.Context, cfs *confinedFS, rel, display string) (items []item, err error) {
	cfs.guardYAML = true
	pf := newPreflight(cfs)
	if _, err := pf.kustomization(rel, false); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	rm, err := pf.build(rel)
	if err != nil {
		return nil, fileErr(display, err)
	}
	scrub := pf.scrub
	resources := rm.Resources()
	if len(resources) > cfs.limits.MaxDocuments {
		return nil, fileErr(display, classErr(ErrLimitExceeded, "more than %d objects", cfs.limits.MaxDocuments))
	}
	items = make([]item, 0, len(resources))
	for i, res := range resources {
		b, err := res.MarshalJSON()
		if err != nil {
			return nil, fileErr(display, classErr(ErrKustomize, "object %d of the output: %s", i+1, scrub(err.Error())))
		}
		var m map[string]any
		if err := utiljson.Unmarshal(b, &m); err != nil {
			return nil, fileErr(display, classErr(ErrKustomize, "object %d of the output is not a JSON object", i+1))
		}
		items = append(items, item{
			obj: &unstructured.Unstructured{Object: m}, file: display,
			what: fmt.Sprintf("object %d of the kustomize output", i+1), node: res.YNode(),
		})
	}
	return items, nil
}

// runKrusty runs the build, turning a panic inside kustomize into an error.
func runKrusty(k *krusty.Kustomizer, cfs *confinedFS, dir string) (rm resmap.ResMap, err error) {
	defer func() {
		if r := recover(); r != nil {
			rm, err = nil, fmt.Errorf("kustomize panicked: %v", r)
		}
	}()
	return k.Run(cfs, dir)
}

// build runs kustomize on the kustomization in directory rel, and classifies its
// failure. Kustomize quotes inputs in some of its errors (all the literals of a
// generator, a bad env-file line, parts of objects): every Secret value the build
// could hold is redacted before any of its messages leave this package.
func (p *preflight) build(rel string) (resmap.ResMap, error) {
	rm, err := runKrusty(krusty.MakeKustomizer(kustomizeOptions()), p.cfs, toVirtual(rel))
	if err == nil {
		return rm, nil
	}
	if perr := p.cfs.policyErr(); perr != nil {
		return nil, perr
	}
	if cerr := p.cfs.alive(); cerr != nil {
		return nil, cerr
	}
	if types.IsErrOnlyBuiltinPluginsAllowed(err) {
		return nil, classErr(ErrPluginDisabled, "%s", p.scrub(err.Error()))
	}
	return nil, classErr(ErrKustomize, "%s", p.scrub(err.Error()))
}

// scrub makes a kustomize message fit to leave the package: paths relative to
// the repository, Secret values redacted.
func (p *preflight) scrub(msg string) string {
	return redact(unmount(msg), append(p.sensitive, p.cfs.secretValues()...))
}

// unmount removes the mount point from kustomize's messages, leaving paths
// relative to the repository root.
func unmount(s string) string {
	s = strings.ReplaceAll(s, mountPoint+"/", "")
	return strings.ReplaceAll(s, mountPoint, ".")
}

// pfKey is a kustomization directory and whether it is read for plugin configs
// (under generators, transformers or validators) rather than resources.
type pfKey struct {
	dir     string
	plugins bool
}

// preflight walks a kustomization graph before kustomize does.
type preflight struct {
	cfs   *confinedFS
	stack []string      // directories being walked, for cycle messages
	done  map[pfKey]int // resource references each kustomization expands to
	seen  int           // kustomizations walked
	// bases and pluginDirs are the directories referenced as resources or
	// components, and as generators, transformers or validators: a directory may
	// not be both (kustomize would get its built plugin configs as resources).
	bases, pluginDirs map[string]string // directory -> the kustomization naming it
	// sensitive holds the values secretGenerators put into Secrets, for redaction.
	sensitive []string
}

func newPreflight(cfs *confinedFS) *preflight {
	return &preflight{cfs: cfs, done: map[pfKey]int{}, bases: map[string]string{}, pluginDirs: map[string]string{}}
}

// kustomization checks the kustomization in directory dir and everything it refers
// to, and returns how many resource files it expands to counting repeats.
func (p *preflight) kustomization(dir string, plugins bool) (int, error) {
	key := pfKey{dir: dir, plugins: plugins}
	if n, ok := p.done[key]; ok {
		return n, nil
	}
	for i, d := range p.stack {
		if d == dir {
			cycle := append(append([]string{}, p.stack[i:]...), dir)
			return 0, fileErr(dir, classErr(ErrKustomize, "kustomization includes itself: %s", strings.Join(cycle, " -> ")))
		}
	}
	p.seen++
	if p.seen > p.cfs.limits.MaxFiles {
		return 0, fileErr(dir, classErr(ErrLimitExceeded, "more than %d kustomizations", p.cfs.limits.MaxFiles))
	}
	p.stack = append(p.stack, dir)
	defer func() { p.stack = p.stack[:len(p.stack)-1] }()

	file, k, err := p.load(dir)
	if err != nil {
		return 0, err
	}

	total, err := p.resourcesAndComponents(dir, file, k, plugins)
	if err != nil {
		return 0, err
	}
	for _, f := range []namedList{
		{"generators", k.Generators}, {"transformers", k.Transformers}, {"validators", k.Validators},
	} {
		for _, entry := range f.entries {
			if err := p.pluginEntry(dir, file, f.field, entry); err != nil {
				return 0, fileErr(file, err)
			}
		}
	}
	p.done[key] = total
	return total, nil
}

// resourcesAndComponents checks the resources and components of the kustomization file of
// dir, and returns how many resource files they expand to counting repeats.
func (p *preflight) resourcesAndComponents(dir, file string, k *types.Kustomization, plugins bool) (int, error) {
	total := 0
	for _, f := range []struct {
		field     string
		entries   []string
		mustBeDir bool
	}{{"resources", k.Resources, false}, {"components", k.Components, true}} {
		for _, entry := range f.entries {
			n, err := p.base(dir, file, f.field, entry, plugins, f.mustBeDir)
			if err != nil {
				return 0, fileErr(file, err)
			}
			total += n
			if total > p.cfs.limits.MaxFiles {
				return 0, fileErr(file, classErr(ErrLimitExceeded, "the kustomization expands to more than %d resources", p.cfs.limits.MaxFiles))
			}
		}
	}
	return total, nil
}

// load reads and parses the kustomization of dir as kustomize does
// (target.KustTarget.Load), so both see one thing, and checks its fields.
func (p *preflight) load(dir string) (string, *types.Kustomization, error) {
	name, err := findKustomization(p.cfs, dir)
	if err != nil {
		return "", nil, fileErr(dir, err)
	}
	if name == "" {
		return "", nil, fileErr(dir, classErr(ErrKustomize, "directory is referenced as a base but holds no kustomization"))
	}
	file := path.Join(dir, name)
	r, err := p.cfs.resolve(file)
	if err != nil {
		return "", nil, fileErr(file, err)
	}
	data, err := p.cfs.readFile(r, file)
	if err != nil {
		return "", nil, fileErr(file, err)
	}
	k := &types.Kustomization{}
	if err := k.Unmarshal(data); err != nil {
		return "", nil, fileErr(file, classErr(ErrKustomize, "%s", err.Error()))
	}
	k.FixKustomization()
	if err := p.checkFields(dir, k); err != nil {
		return "", nil, fileErr(file, err)
	}
	if err := p.secretGenerators(dir, k); err != nil {
		return "", nil, fileErr(file, err)
	}
	return file, k, nil
}

// base checks one entry of resources or components.
func (p *preflight) base(dir, file, field, entry string, plugins, mustBeDir bool) (int, error) {
	n, r, err := p.reference(dir, field, entry, plugins, mustBeDir)
	if err != nil {
		return 0, err
	}
	if r.info.IsDir() {
		if by, ok := p.pluginDirs[r.rel]; ok {
			return 0, classErr(ErrKustomize, "%s: %q is also listed as a generators, transformers or validators directory by %s", field, entry, by)
		}
		p.bases[r.rel] = file
	}
	return n, nil
}

// checkFields refuses the kustomization fields that would load from a URL, run
// code, or change process-wide state.
func (p *preflight) checkFields(dir string, k *types.Kustomization) error {
	if len(k.OpenAPI) > 0 {
		return classErr(ErrPluginDisabled, "openapi: custom OpenAPI schemas are not supported (kustomize keeps them process-wide)")
	}
	if len(k.HelmCharts) > 0 || k.HelmGlobals != nil || len(k.HelmChartInflationGenerator) > 0 {
		return classErr(ErrPluginDisabled, "helmCharts: helm is not supported")
	}
	var psm, patches, replacements, cmg, sg []string
	for _, e := range k.PatchesStrategicMerge { //nolint:staticcheck // deprecated, still honoured by kustomize
		// An entry is tried as an inline patch first and loaded as a path only
		// when it does not parse; only a one-line, non-flow entry can be a URL.
		if t := strings.TrimSpace(string(e)); !strings.Contains(t, "\n") && !strings.HasPrefix(t, "{") {
			psm = append(psm, t)
		}
	}
	for _, pt := range append(append([]types.Patch{}, k.Patches...), k.PatchesJson6902...) { //nolint:staticcheck // deprecated, still honoured
		patches = append(patches, pt.Path)
	}
	for _, r := range k.Replacements {
		replacements = append(replacements, r.Path)
	}
	for _, g := range k.ConfigMapGenerator {
		cmg = append(cmg, kvSources(g.KvPairSources)...)
	}
	for _, g := range k.SecretGenerator {
		sg = append(sg, kvSources(g.KvPairSources)...)
	}
	for _, l := range []namedList{
		{"crds", k.Crds}, {"configurations", k.Configurations}, {"patchesStrategicMerge", psm},
		{"patches", patches}, {"replacements", replacements},
		{"configMapGenerator", cmg}, {"secretGenerator", sg},
	} {
		for _, entry := range l.entries {
			if entry == "" {
				continue
			}
			if looksRemote(entry) {
				return classErr(ErrRemoteDisabled, "%s: %q", l.field, entry)
			}
			if err := p.checkLocal(dir, l.field, entry); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkLocal gives a clear error for a file reference that leaves the repository
// (kustomize would hit the confined file system anyway, with a vaguer message).
// A missing file is left for kustomize to report.
func (p *preflight) checkLocal(dir, field, entry string) error {
	if filepath.IsAbs(entry) {
		return classErr(ErrOutsideRoot, "%s: %q is an absolute path", field, entry)
	}
	target := path.Join(dir, filepath.ToSlash(entry))
	if target == ".." || strings.HasPrefix(target, "../") {
		return classErr(ErrOutsideRoot, "%s: %q leaves the repository", field, entry)
	}
	if _, err := p.cfs.resolve(target); err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("%s: %q: %w", field, entry, err)
	}
	return nil
}

// namedList is a kustomization field and its entries, in a fixed order.
type namedList struct {
	field   string
	entries []string
}

// kvSources lists the paths of a generator's files and env files ("key=path" too).
func kvSources(s types.KvPairSources) []string {
	out := append([]string{}, s.EnvSources...)
	if s.EnvSource != "" {
		out = append(out, s.EnvSource)
	}
	for _, f := range s.FileSources {
		if _, p, ok := strings.Cut(f, "="); ok {
			f = p
		}
		out = append(out, f)
	}
	return out
}

// scpLike matches the "user@host:" start of an scp-style git URL.
var scpLike = regexp.MustCompile(`^[a-z][a-z0-9-]*@`)

// looksRemote reports whether kustomize could take s for a URL: anything it would
// fetch over HTTP (http:// or https://) or clone with git (any scheme, an
// scp-style user@host:, github.com/…, with or without a git:: prefix). It errs on
// the side of "remote": a local path that looks like this is refused too.
func looksRemote(s string) bool {
	l := strings.ToLower(strings.TrimSpace(s))
	l = strings.TrimPrefix(l, "git::")
	if strings.Contains(s, ":") { // no scheme without one; spares a parse per local path
		if u, err := url.Parse(s); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
			return true // what kustomize's loader fetches (loader.IsRemoteFile)
		}
	}
	return strings.Contains(l, "://") ||
		strings.HasPrefix(l, "github.com/") || strings.HasPrefix(l, "github.com:") ||
		scpLike.MatchString(l)
}

// secretGenerators validates the inputs of secretGenerator entries the way
// kustomize's kv loader will, but with errors that name the line instead of quoting
// it, and records every value for redaction.
func (p *preflight) secretGenerators(dir string, k *types.Kustomization) error {
	for _, g := range k.SecretGenerator {
		for _, lit := range g.LiteralSources {
			key, val, ok := strings.Cut(lit, "=")
			p.sensitive = append(p.sensitive, lit, val)
			if !ok {
				return classErr(ErrInvalidDocument, "secretGenerator %q: a literal is not key=value", g.Name)
			}
			if errs := validation.IsConfigMapKey(key); len(errs) > 0 {
				return classErr(ErrInvalidDocument, "secretGenerator %q: literal key %q is invalid", g.Name, key)
			}
		}
		envs := append([]string{}, g.EnvSources...)
		if g.EnvSource != "" {
			envs = append(envs, g.EnvSource)
		}
		for _, env := range envs {
			data, display, err := p.readLocal(dir, env)
			if err != nil {
				return fmt.Errorf("secretGenerator %q: %w", g.Name, err)
			}
			for i, raw := range strings.Split(string(data), "\n") {
				line := strings.TrimLeftFunc(strings.TrimPrefix(raw, "\ufeff"), unicode.IsSpace)
				// Kustomize prints a bad line as a byte slice too ("[80 65 …]").
				p.sensitive = append(p.sensitive, raw, line, fmt.Sprint([]byte(raw)), fmt.Sprint([]byte(line))) //nolint:staticcheck // the %v form of []byte is wanted
				if line == "" || line[0] == '#' {
					continue
				}
				key, val, _ := strings.Cut(line, "=")
				p.sensitive = append(p.sensitive, val, strings.TrimSpace(val))
				if !utf8.ValidString(raw) {
					return classErr(ErrInvalidDocument, "secretGenerator %q: %s line %d is not valid UTF-8", g.Name, display, i+1)
				}
				if errs := validation.IsEnvVarName(key); len(errs) > 0 {
					return classErr(ErrInvalidDocument, "secretGenerator %q: %s line %d: invalid variable name", g.Name, display, i+1)
				}
			}
		}
		for _, f := range g.FileSources {
			src := f
			if _, after, ok := strings.Cut(f, "="); ok {
				src = after
			}
			data, _, err := p.readLocal(dir, src)
			if err != nil {
				return fmt.Errorf("secretGenerator %q: %w", g.Name, err)
			}
			p.sensitive = append(p.sensitive, string(data), strings.TrimSpace(string(data)))
			p.sensitive = append(p.sensitive, strings.Split(string(data), "\n")...)
		}
	}
	return nil
}

// readLocal reads a file named relative to kustomization directory dir.
func (p *preflight) readLocal(dir, name string) ([]byte, string, error) {
	if filepath.IsAbs(name) {
		return nil, "", classErr(ErrOutsideRoot, "%q is an absolute path", name)
	}
	target := path.Join(dir, filepath.ToSlash(name))
	if target == ".." || strings.HasPrefix(target, "../") {
		return nil, "", classErr(ErrOutsideRoot, "%q leaves the repository", name)
	}
	r, err := p.cfs.resolve(target)
	if err != nil {
		return nil, "", err
	}
	data, err := p.cfs.readFile(r, r.rel)
	return data, r.rel, err
}

// redact replaces every sensitive value of four characters or more in msg.
func redact(msg string, sensitive []string) string {
	vals := make([]string, 0, len(sensitive))
	for _, v := range sensitive {
		if len(v) >= 4 {
			vals = append(vals, v)
		}
	}
	// Longest first, so a value is not half-replaced through a shorter one inside it.
	sort.Slice(vals, func(i, j int) bool { return len(vals[i]) > len(vals[j]) })
	for _, v := range vals {
		msg = strings.ReplaceAll(msg, v, "[redacted]")
	}
	return msg
}
