package render

import (
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// pluginDirPatch is a generators/transformers directory holding one harmless
// built-in config, and a kustomization whose inline patch rewrites that config.
func pluginDirPatch(dir, config, patch string) map[string]string {
	return map[string]string{
		dir + "/kustomization.yaml": "resources: [config.yaml]\npatches:\n- patch: |\n" + indent(patch, "    "),
		dir + "/config.yaml":        config,
	}
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n") + "\n"
}

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// Harmless configs of every built-in plugin that loads a file, and the patches that
// point them at the tripwire ({U}).
const (
	cmgConfig   = "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: gen}\nliterals: [a=b]\n"
	sgConfig    = "apiVersion: builtin\nkind: SecretGenerator\nmetadata: {name: gen}\nliterals: [a=b]\n"
	ptConfig    = "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: pt}\npatch: '{\"metadata\": {\"labels\": {\"x\": \"y\"}}}'\ntarget: {kind: ConfigMap}\n"
	pjConfig    = "apiVersion: builtin\nkind: PatchJson6902Transformer\nmetadata: {name: pj}\ntarget: {version: v1, kind: ConfigMap, name: c}\njsonOp: '[]'\n"
	psmConfig   = "apiVersion: builtin\nkind: PatchStrategicMergeTransformer\nmetadata: {name: psm}\npatches: '{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"c\"}}'\n"
	rtConfig    = "apiVersion: builtin\nkind: ReplacementTransformer\nmetadata: {name: rt}\nreplacements: []\n"
	vaConfig    = "apiVersion: builtin\nkind: ValueAddTransformer\nmetadata: {name: va}\nvalue: v\ntargets: [{fieldPath: metadata/annotations/x}]\n"
	labelConfig = "apiVersion: builtin\nkind: LabelTransformer\nmetadata: {name: lt}\nlabels: {x: y}\nfieldSpecs: [{path: metadata/labels, create: true}]\n"
)

// TestRenderNeverReachesTheNetwork: whatever a kustomization says, through every
// field that can name a URL — directly, in a plugin config file or inline, and
// through a generators/transformers/validators directory whose kustomization
// patches its configs — the render ends in a clear error, the loopback server gets
// no request, no git runs and no temporary directory is made.
func TestRenderNeverReachesTheNetwork(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // kustomize clones into os.TempDir()
	withCM := map[string]string{"cm.yaml": cm("c", "1")}
	tests := []struct {
		name  string
		files map[string]string
		class error
		want  string
	}{
		// Kustomization fields, directly.
		{name: "resources", files: map[string]string{"kustomization.yaml": "resources: [{U}/cm.yaml]\n"}},
		{name: "components", files: map[string]string{"kustomization.yaml": "components: [{U}/org/repo//c]\n"}},
		{name: "generators entry", files: map[string]string{"kustomization.yaml": "generators: [{U}/gen.yaml]\n"}},
		{name: "transformers entry", files: map[string]string{"kustomization.yaml": "transformers: [{U}/t.yaml]\n"}},
		{name: "validators entry", files: map[string]string{"kustomization.yaml": "validators: [{U}/v.yaml]\n"}},
		{name: "configMapGenerator files", files: map[string]string{"kustomization.yaml": "configMapGenerator: [{name: x, files: [k={U}/f]}]\n"}},
		{name: "configMapGenerator envs", files: map[string]string{"kustomization.yaml": "configMapGenerator: [{name: x, envs: [{U}/e]}]\n"}},
		{name: "secretGenerator files", files: map[string]string{"kustomization.yaml": "secretGenerator: [{name: x, files: [{U}/f]}]\n"}},
		{name: "patches path", files: merge(withCM, map[string]string{"kustomization.yaml": "resources: [cm.yaml]\npatches: [{path: {U}/p.yaml}]\n"})},
		{name: "patchesStrategicMerge", files: merge(withCM, map[string]string{"kustomization.yaml": "resources: [cm.yaml]\npatchesStrategicMerge: [{U}/p.yaml]\n"})},
		{name: "openapi path", class: ErrPluginDisabled, want: "openapi", files: map[string]string{"kustomization.yaml": "openapi: {path: {U}/schema.json}\n"}},
		{name: "crds", files: map[string]string{"kustomization.yaml": "crds: [{U}/crd.yaml]\n"}},
		{name: "replacements path", files: map[string]string{"kustomization.yaml": "replacements: [{path: {U}/r.yaml}]\n"}},
		{name: "configurations", files: map[string]string{"kustomization.yaml": "configurations: [{U}/c.yaml]\n"}},
		{name: "patchesJson6902 path", files: merge(withCM, map[string]string{"kustomization.yaml": "resources: [cm.yaml]\npatchesJson6902: [{target: {version: v1, kind: ConfigMap, name: c}, path: {U}/p.json}]\n"})},

		// Built-in plugin configs, as files and inline.
		{name: "ConfigMapGenerator file", want: "ConfigMapGenerator files", files: map[string]string{
			"kustomization.yaml": "generators: [g.yaml]\n", "g.yaml": "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: g}\nfiles: [loot={U}/x]\n"}},
		{name: "SecretGenerator envs, inline", want: "SecretGenerator envs", files: map[string]string{
			"kustomization.yaml": "generators:\n- |\n  apiVersion: builtin\n  kind: SecretGenerator\n  metadata: {name: g}\n  envs: [{U}/x]\n"}},
		{name: "PatchTransformer file", want: "PatchTransformer path", files: merge(withCM, map[string]string{
			"kustomization.yaml": "resources: [cm.yaml]\ntransformers: [t.yaml]\n", "t.yaml": "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: p}\npath: {U}/p.yaml\n"})},
		{name: "validators file", want: "validators: v.yaml PatchTransformer path", files: merge(withCM, map[string]string{
			"kustomization.yaml": "resources: [cm.yaml]\nvalidators: [v.yaml]\n", "v.yaml": "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: p}\npath: {U}/p.yaml\n"})},
		{name: "upper-case key (encoding/json matches keys case-insensitively)", want: "PatchTransformer PATH", files: merge(withCM, map[string]string{
			"kustomization.yaml": "resources: [cm.yaml]\ntransformers: [t.yaml]\n", "t.yaml": "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: p}\nPATH: {U}/p.yaml\n"})},
		{name: "key with a long s (folds to files)", want: "ConfigMapGenerator fileſ", files: map[string]string{
			"kustomization.yaml": "generators: [g.yaml]\n", "g.yaml": "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: g}\nfileſ: [loot={U}/x]\n"}},
		{name: "ValueAddTransformer targetFilePath", want: "ValueAddTransformer targetFilePath", files: merge(withCM, map[string]string{
			"kustomization.yaml": "resources: [cm.yaml]\ntransformers: [t.yaml]\n",
			"t.yaml":             "apiVersion: builtin\nkind: ValueAddTransformer\nmetadata: {name: v}\nvalue: v\ntargetFilePath: {U}/x\n"})},

		// Through the inline patch of a generators/transformers/validators directory.
		{name: "generators dir: ConfigMapGenerator files", want: "generators: gen (as built) ConfigMapGenerator files",
			files: merge(map[string]string{"kustomization.yaml": "generators: [gen]\n"},
				pluginDirPatch("gen", cmgConfig, "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: gen}\nfiles: [loot={U}/x]\n"))},
		{name: "generators dir: ConfigMapGenerator envs", want: "ConfigMapGenerator envs",
			files: merge(map[string]string{"kustomization.yaml": "generators: [gen]\n"},
				pluginDirPatch("gen", cmgConfig, "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: gen}\nenvs: [{U}/x]\n"))},
		{name: "generators dir: SecretGenerator env", want: "SecretGenerator env",
			files: merge(map[string]string{"kustomization.yaml": "generators: [gen]\n"},
				pluginDirPatch("gen", sgConfig, "apiVersion: builtin\nkind: SecretGenerator\nmetadata: {name: gen}\nenv: {U}/x\n"))},
		{name: "transformers dir: PatchTransformer path", want: "transformers: t (as built) PatchTransformer path",
			files: merge(withCM, map[string]string{"kustomization.yaml": "resources: [cm.yaml]\ntransformers: [t]\n"},
				pluginDirPatch("t", ptConfig, "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: pt}\npatch: null\npath: {U}/p.yaml\n"))},
		{name: "transformers dir: PatchJson6902Transformer path", want: "PatchJson6902Transformer path",
			files: merge(withCM, map[string]string{"kustomization.yaml": "resources: [cm.yaml]\ntransformers: [t]\n"},
				pluginDirPatch("t", pjConfig, "apiVersion: builtin\nkind: PatchJson6902Transformer\nmetadata: {name: pj}\njsonOp: null\npath: {U}/p.json\n"))},
		{name: "transformers dir: PatchStrategicMergeTransformer paths", want: "PatchStrategicMergeTransformer paths",
			files: merge(withCM, map[string]string{"kustomization.yaml": "resources: [cm.yaml]\ntransformers: [t]\n"},
				pluginDirPatch("t", psmConfig, "apiVersion: builtin\nkind: PatchStrategicMergeTransformer\nmetadata: {name: psm}\npatches: null\npaths: [{U}/p.yaml]\n"))},
		{name: "transformers dir: ReplacementTransformer path", want: "ReplacementTransformer path",
			files: merge(withCM, map[string]string{"kustomization.yaml": "resources: [cm.yaml]\ntransformers: [t]\n"},
				pluginDirPatch("t", rtConfig, "apiVersion: builtin\nkind: ReplacementTransformer\nmetadata: {name: rt}\nreplacements: [{path: {U}/r.yaml}]\n"))},
		{name: "transformers dir: ValueAddTransformer targetFilePath", want: "ValueAddTransformer targetFilePath",
			files: merge(withCM, map[string]string{"kustomization.yaml": "resources: [cm.yaml]\ntransformers: [t]\n"},
				pluginDirPatch("t", vaConfig, "apiVersion: builtin\nkind: ValueAddTransformer\nmetadata: {name: va}\ntargetFilePath: {U}/x\n"))},
		{name: "validators dir: PatchTransformer path", want: "validators: v (as built) PatchTransformer path",
			files: merge(withCM, map[string]string{"kustomization.yaml": "resources: [cm.yaml]\nvalidators: [v]\n"},
				pluginDirPatch("v", ptConfig, "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: pt}\npatch: null\npath: {U}/p.yaml\n"))},
		{name: "transformers dir: a JSON patch turning a config into helm", class: ErrPluginDisabled, want: "helm",
			files: merge(withCM, map[string]string{
				"kustomization.yaml":   "resources: [cm.yaml]\ntransformers: [t]\n",
				"t/kustomization.yaml": "resources: [config.yaml]\npatches:\n- target: {kind: LabelTransformer}\n  patch: '[{\"op\": \"replace\", \"path\": \"/kind\", \"value\": \"HelmChartInflationGenerator\"}, {\"op\": \"add\", \"path\": \"/repo\", \"value\": \"{U}\"}]'\n",
				"t/config.yaml":        labelConfig})},
		{name: "transformers dir: a replacement copying a URL into a path", want: "PatchTransformer path",
			files: merge(withCM, map[string]string{
				"kustomization.yaml":   "resources: [cm.yaml]\ntransformers: [t]\n",
				"t/kustomization.yaml": "resources: [config.yaml, src.yaml]\nreplacements:\n- source: {kind: AnnotationsTransformer, fieldPath: annotations.u}\n  targets: [{select: {kind: PatchTransformer}, fieldPaths: [path]}]\npatches:\n- target: {kind: PatchTransformer}\n  patch: '[{\"op\": \"remove\", \"path\": \"/patch\"}, {\"op\": \"add\", \"path\": \"/path\", \"value\": \"local.yaml\"}]'\n",
				"t/config.yaml":        ptConfig,
				"t/src.yaml":           "apiVersion: builtin\nkind: AnnotationsTransformer\nmetadata: {name: src}\nannotations: {u: '{U}/p.yaml'}\nfieldSpecs: [{path: metadata/annotations, create: true}]\n"})},
		{name: "transformers dir inside a transformers dir", want: "transformers: t (as built) LabelTransformer path",
			files: merge(withCM, map[string]string{
				"kustomization.yaml":         "resources: [cm.yaml]\ntransformers: [t]\n",
				"t/kustomization.yaml":       "resources: [config.yaml]\ntransformers: [inner]\n",
				"t/config.yaml":              labelConfig,
				"t/inner/kustomization.yaml": "resources: [patch.yaml]\n",
				"t/inner/patch.yaml":         "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: rewrite}\npatch: '{\"apiVersion\": \"builtin\", \"kind\": \"LabelTransformer\", \"metadata\": {\"name\": \"lt\"}, \"path\": \"{U}/p.yaml\"}'\n"})},
		{name: "generators dir in a base", want: "ConfigMapGenerator files",
			files: merge(map[string]string{
				"kustomization.yaml":      "resources: [base]\n",
				"base/kustomization.yaml": "generators: [gen]\n"},
				pluginDirPatch("base/gen", cmgConfig, "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: gen}\nfiles: [loot={U}/x]\n"))},
		{name: "generators dir in a component", want: "ConfigMapGenerator files",
			files: merge(map[string]string{
				"kustomization.yaml":      "components: [comp]\n",
				"comp/kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\ngenerators: [gen]\n"},
				pluginDirPatch("comp/gen", cmgConfig, "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: gen}\nfiles: [loot={U}/x]\n"))},
		{name: "a git base inside a generators dir", files: map[string]string{
			"kustomization.yaml":     "generators: [gen]\n",
			"gen/kustomization.yaml": "resources: [{U}/org/repo.git]\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			tw := newTripwires(t)
			root, _ := newRepo(t)
			for p, c := range tt.files {
				write(t, root, p, strings.ReplaceAll(c, "{U}", tw.url))
			}
			before := tempEntries(t, tmp)
			res, err := render(Options{Root: root})
			class := tt.class
			if class == nil {
				class = ErrRemoteDisabled
			}
			expectFailure(g, res, err, class, tt.want)
			tw.expectUntouched(g)
			g.Expect(tempEntries(t, tmp)).To(Equal(before), "no temporary directory was made")
			t.Logf("error: %v", err)
		})
	}
}

// tempEntries lists dir.
func tempEntries(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// TestPluginDirectoriesStillBuild: a generators or transformers directory, which
// the preflight now builds and hands to kustomize, renders exactly as kustomize
// builds it straight from the disk — patched configs, nested directories, files
// loaded relative to the kustomization that lists the directory.
func TestPluginDirectoriesStillBuild(t *testing.T) {
	g := NewWithT(t)
	root, _ := newRepo(t)
	files := merge(map[string]string{
		"app/kustomization.yaml": "resources: [cm.yaml]\ngenerators: [gen]\ntransformers: [t, t2.yaml]\n",
		"app/cm.yaml":            cm("c", "1"),
		"app/data.txt":           "loaded from the overlay\n",
		// A generator directory whose patch loads a file relative to app/.
		"app/t/kustomization.yaml":       "resources: [config.yaml]\ntransformers: [inner]\n",
		"app/t/config.yaml":              labelConfig,
		"app/t/inner/kustomization.yaml": "resources: [rename.yaml]\n",
		"app/t/inner/rename.yaml":        "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: rename}\npatch: '[{\"op\": \"replace\", \"path\": \"/labels/x\", \"value\": \"from-inner\"}]'\ntarget: {kind: LabelTransformer}\n",
		"app/t2.yaml":                    "apiVersion: builtin\nkind: AnnotationsTransformer\nmetadata: {name: at}\nannotations: {a: b}\nfieldSpecs: [{path: metadata/annotations, create: true}]\n",
	}, pluginDirPatch("app/gen", cmgConfig, "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: gen}\nfiles: [data.txt]\n"))
	for p, c := range files {
		write(t, root, p, c)
	}
	res, err := render(Options{Root: root, Path: "app"})
	g.Expect(err).NotTo(HaveOccurred())

	opts := krusty.MakeDefaultOptions()
	opts.LoadRestrictions = types.LoadRestrictionsNone
	want, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), root+"/app")
	g.Expect(err).NotTo(HaveOccurred(), "kustomize itself builds the control")
	var wantIDs []string
	for _, r := range want.Resources() {
		wantIDs = append(wantIDs, r.GetKind()+" "+r.GetName())
		g.Expect(r.GetLabels()).To(HaveKeyWithValue("x", "from-inner"))
		g.Expect(r.GetAnnotations()).To(HaveKeyWithValue("a", "b"))
	}
	sort.Strings(wantIDs)
	g.Expect(ids(res.Objects)).To(ConsistOf(wantIDs))
	for _, o := range res.Objects {
		g.Expect(o.GetLabels()).To(HaveKeyWithValue("x", "from-inner"))
		g.Expect(o.GetAnnotations()).To(HaveKeyWithValue("a", "b"))
		if o.GetKind() == "ConfigMap" && strings.HasPrefix(o.GetName(), "gen-") {
			g.Expect(o.Object["data"]).To(HaveKeyWithValue("data.txt", "loaded from the overlay\n"))
		}
	}
}

// TestPluginDirectoryIsNotABase: a directory listed as generators or transformers
// may not also be a resources base: kustomize would read its built configs.
func TestPluginDirectoryIsNotABase(t *testing.T) {
	for _, tt := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{name: "base first", want: `generators: "gen" is also a base (resources or components) of kustomization.yaml`,
			files: map[string]string{"kustomization.yaml": "resources: [gen]\ngenerators: [gen]\n"}},
		{name: "generators first", want: `resources: "../gen" is also listed as a generators, transformers or validators directory by a/kustomization.yaml`,
			files: map[string]string{
				"kustomization.yaml":   "resources: [a, b]\n",
				"a/kustomization.yaml": "generators: [../gen]\n",
				"b/kustomization.yaml": "resources: [../gen]\n"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			root, _ := newRepo(t)
			for p, c := range merge(tt.files, pluginDirPatch("gen", cmgConfig, "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: gen}\nliterals: [c=d]\n")) {
				write(t, root, p, c)
			}
			res, err := render(Options{Root: root})
			expectFailure(g, res, err, ErrKustomize, tt.want)
		})
	}
}

// TestSealedPluginDirectory: once the preflight built a plugin directory, kustomize
// reads the directory as its configs and cannot read its kustomization.
func TestSealedPluginDirectory(t *testing.T) {
	g := NewWithT(t)
	root, _ := newRepo(t)
	write(t, root, "gen/kustomization.yaml", "resources: [config.yaml]\n")
	write(t, root, "gen/config.yaml", cmgConfig)
	cfs, done := openConfined(t, root)
	defer done()
	cfs.plugins["gen"] = []byte(cmgConfig)
	b, err := cfs.ReadFile(mountPoint + "/gen")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).To(Equal(cmgConfig))
	_, err = cfs.ReadFile(mountPoint + "/gen/kustomization.yaml")
	g.Expect(err).To(MatchError(ErrPluginDisabled))
	b, err = cfs.ReadFile(mountPoint + "/gen/config.yaml")
	g.Expect(err).NotTo(HaveOccurred(), "other files of the directory stay readable")
	g.Expect(string(b)).To(Equal(cmgConfig))
}

// TestKustomizationFieldsAreClassified: the preflight knows every field of a
// kustomization. A kustomize upgrade that adds one fails here until someone decides
// whether kustomize loads anything from it (and the preflight checks it).
func TestKustomizationFieldsAreClassified(t *testing.T) {
	loads := []string{ // checked by preflight.kustomization / checkFields
		"Resources", "Components", "Crds", "Configurations", "Generators", "Transformers", "Validators",
		"PatchesStrategicMerge", "PatchesJson6902", "Patches", "Replacements",
		"ConfigMapGenerator", "SecretGenerator", "OpenAPI", "Bases",
		"HelmCharts", "HelmGlobals", "HelmChartInflationGenerator", // refused
	}
	inert := []string{ // no file or URL is ever loaded from these
		"TypeMeta", "MetaData", "NamePrefix", "NameSuffix", "Namespace", "CommonLabels", "Labels",
		"CommonAnnotations", "Images", "Replicas", "Vars", "SortOptions", "GeneratorOptions",
		"BuildMetadata", "ImageTags",
	}
	typ := reflect.TypeOf(types.Kustomization{})
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		if !slices.Contains(loads, name) && !slices.Contains(inert, name) {
			t.Errorf("kustomize has a new Kustomization field %s: decide whether it loads a file or URL, and check it in the preflight", name)
		}
	}
}

// TestBuiltinPluginsAreClassified: every built-in plugin is known, with the config
// fields it loads files from covered by builtinPathKeys (or the plugin refused).
func TestBuiltinPluginsAreClassified(t *testing.T) {
	loads := map[string][]string{
		"ConfigMapGenerator":             {"files", "envs", "env"},
		"SecretGenerator":                {"files", "envs", "env"},
		"PatchTransformer":               {"path"},
		"PatchJson6902Transformer":       {"path"},
		"PatchStrategicMergeTransformer": {"paths"},
		"ReplacementTransformer":         {"path"},
		"ValueAddTransformer":            {"targetFilePath"},
		"HelmChartInflationGenerator":    nil, // refused
		"AnnotationsTransformer":         nil, "HashTransformer": nil, "IAMPolicyGenerator": nil,
		"ImageTagTransformer": nil, "LabelTransformer": nil, "NamespaceTransformer": nil,
		"PrefixSuffixTransformer": nil, "PrefixTransformer": nil, "SuffixTransformer": nil,
		"ReplicaCountTransformer": nil, "SortOrderTransformer": nil,
	}
	for _, name := range krusty.GetBuiltinPluginNames() {
		keys, ok := loads[name]
		if !ok {
			t.Errorf("kustomize has a new built-in plugin %s: find what it loads, and extend builtinPathKeys", name)
		}
		for _, k := range keys {
			if !isPathKey(k) {
				t.Errorf("%s loads from %s, which builtinPathKeys misses", name, k)
			}
		}
	}
}
