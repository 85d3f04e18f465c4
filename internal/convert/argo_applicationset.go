package convert

import (
	"encoding/json"
	"strconv"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// setTarget is what the rules of an ApplicationSet fill.
type setTarget struct {
	spec       *convergev1.SyncTargetSetSpec
	goTemplate bool
	clusters   bool // a clusters generator yields the parameters
	previews   bool // a pullRequests generator yields the parameters
}

// applicationSet converts an Argo CD ApplicationSet into a SyncTargetSet named after it.
func (c *converter) applicationSet(u *unstructured.Unstructured) {
	cv := newConv(c, u)
	set := &convergev1.SyncTargetSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: convergev1.GroupVersion.String(), Kind: convergev1.SyncTargetSetKind},
		ObjectMeta: metav1.ObjectMeta{Namespace: u.GetNamespace(), Name: u.GetName()},
	}
	spec := asMap(u.Object["spec"])
	t := &setTarget{spec: &set.Spec, goTemplate: asBool(spec["goTemplate"])}
	mapFields(cv, spec, t, appSetRules, appSetLost)
	if len(set.Spec.Generators) == 0 || set.Spec.Template.Metadata.Name == "" {
		return
	}
	cv.object(set, cv.from)
}

var appSetRules = []rule[*setTarget]{
	ignored[*setTarget]("goTemplate"),
	noteOnly[*setTarget]("goTemplateOptions", "template", "converge's templates fail on a missing parameter"),
	{"generators", func(c *conv, v any, t *setTarget) {
		for i, g := range asSlice(v) {
			gc := c.at("", c.in+"generators["+strconv.Itoa(i)+"].", c.out+"generators["+strconv.Itoa(i)+"].")
			if gen, ok := gc.generator(asMap(g), t); ok {
				t.spec.Generators = append(t.spec.Generators, gen)
			}
		}
	}},
	{"template", func(c *conv, v any, t *setTarget) {
		c.at("", c.in+"template.", c.out+"template.").template(asMap(v), t)
	}},
	{"strategy", func(c *conv, v any, t *setTarget) { t.spec.Strategy = c.strategy(asMap(v)) }},
	{"syncPolicy", func(c *conv, v any, t *setTarget) {
		mapFields(c.at("", c.in+"syncPolicy.", c.out), asMap(v), t, appSetSyncPolicyRules, nil)
	}},
}

var appSetLost = map[string]string{
	"templatePatch":                "no equivalent: write the variants in the template's parameters",
	"ignoreApplicationDifferences": "converge owns the generated SyncTargets: change the SyncTargetSet instead",
}

var appSetSyncPolicyRules = []rule[*setTarget]{
	{"preserveResourcesOnDeletion", func(_ *conv, v any, t *setTarget) { t.spec.PreserveOnDeletion = asBool(v) }},
	noteOnly[*setTarget]("applicationsSync", "", "converge creates, updates and deletes the generated SyncTargets"),
}

// generator maps one generator; a matrix holds two base generators.
func (c *conv) generator(g map[string]any, t *setTarget) (convergev1.Generator, bool) {
	if m := asMap(g["matrix"]); m != nil {
		if len(g) > 1 {
			c.lost("matrix", "", "a matrix generator with a selector or template has no equivalent")
		}
		mc := c.at("", c.in+"matrix.", c.out+"matrix.")
		var mg convergev1.MatrixGenerator
		kids := asSlice(m["generators"])
		for i, k := range kids {
			kc := mc.at("", mc.in+"generators["+strconv.Itoa(i)+"].", mc.out+"generators["+strconv.Itoa(i)+"].")
			b, ok := kc.baseGenerator(asMap(k), t)
			if !ok {
				return convergev1.Generator{}, false
			}
			mg.Generators = append(mg.Generators, b)
		}
		if len(mg.Generators) != 2 {
			c.lost("matrix.generators", "", "converge's matrix combines exactly two generators")
			return convergev1.Generator{}, false
		}
		return convergev1.Generator{Matrix: &mg}, true
	}
	b, ok := c.baseGenerator(g, t)
	return convergev1.Generator{List: b.List, Clusters: b.Clusters, GitDirectories: b.GitDirectories,
		PullRequests: b.PullRequests}, ok
}

func (c *conv) baseGenerator(g map[string]any, t *setTarget) (convergev1.BaseGenerator, bool) {
	var b convergev1.BaseGenerator
	mapFields(c, g, &baseTarget{b: &b, set: t}, generatorRules, generatorLost)
	return b, b.List != nil || b.Clusters != nil || b.GitDirectories != nil || b.PullRequests != nil
}

type baseTarget struct {
	b   *convergev1.BaseGenerator
	set *setTarget
}

var generatorLost = map[string]string{
	"matrix":                  "converge's matrix combines two list, clusters, gitDirectories or pullRequests generators, not another matrix",
	"merge":                   "converge has no merge generator: write the merged parameters in a list",
	"scmProvider":             "converge has no SCM provider generator: list the repositories",
	"clusterDecisionResource": "converge has no cluster decision resource generator: use the clusters generator",
	"plugin":                  "converge has no generator plugins",
	"selector":                "converge has no post-selector of parameters",
}

var generatorRules = []rule[*baseTarget]{
	{"list", func(c *conv, v any, t *baseTarget) { t.b.List = c.listGenerator(asMap(v)) }},
	{"clusters", func(c *conv, v any, t *baseTarget) {
		t.b.Clusters, t.set.clusters = c.clustersGenerator(asMap(v)), true
	}},
	{"git", func(c *conv, v any, t *baseTarget) { t.b.GitDirectories = c.gitGenerator(asMap(v)) }},
	{"pullRequest", func(c *conv, v any, t *baseTarget) { t.b.PullRequests = c.pullRequestGenerator(asMap(v), t.set) }},
}

func (c *conv) listGenerator(m map[string]any) *convergev1.ListGenerator {
	lg := &convergev1.ListGenerator{}
	for i, e := range asSlice(m["elements"]) {
		el := map[string]string{}
		for k, v := range asMap(e) {
			switch v.(type) {
			case map[string]any, []any:
				c.lost("list.elements["+strconv.Itoa(i)+"]."+k, "list", "converge's list parameters are strings; flatten it into keys of their own")
			default:
				el[k] = asString(v)
			}
		}
		lg.Elements = append(lg.Elements, el)
	}
	for _, k := range sortedKeys(m) {
		if k != "elements" {
			c.lost("list."+k, "list", "no equivalent in converge: write the elements inline")
		}
	}
	return lg
}

func (c *conv) clustersGenerator(m map[string]any) *convergev1.ClustersGenerator {
	cg := &convergev1.ClustersGenerator{}
	if sel := asMap(m["selector"]); len(sel) > 0 {
		b, _ := json.Marshal(sel)
		var ls metav1.LabelSelector
		if json.Unmarshal(b, &ls) == nil {
			cg.Selector = &ls
		}
	}
	for _, k := range sortedKeys(m) {
		if k != "selector" {
			c.lost("clusters."+k, "clusters", "no equivalent in converge")
		}
	}
	c.note("clusters", "converge's clusters are kubeconfig Secrets labelled converge.dev/cluster (Argo CD's cluster Secrets hold no kubeconfig, and its in-cluster cluster has no Secret): create them")
	return cg
}

func (c *conv) gitGenerator(m map[string]any) *convergev1.GitDirectoriesGenerator {
	gc := c.at("", c.in+"git.", c.out+"gitDirectories.")
	g := &convergev1.GitDirectoriesGenerator{}
	g.Source.URL = str(m, "repoURL")
	g.Source.Ref = gc.revision(str(m, "revision"))
	for _, d := range asSlice(m["directories"]) {
		p := relPath(str(asMap(d), "path"))
		if asBool(asMap(d)["exclude"]) {
			g.Exclude = append(g.Exclude, p)
		} else {
			g.Include = append(g.Include, p)
		}
	}
	for _, k := range sortedKeys(m) {
		switch k {
		case "repoURL", "revision", "directories":
		case "requeueAfterSeconds":
			gc.note("source.interval", "%srequeueAfterSeconds (%s): converge polls the repository at spec.source.interval", gc.in, gc.kindName())
		default:
			gc.lost(k, "", "converge's Git generator yields directories only")
		}
	}
	if len(g.Include) == 0 {
		return nil
	}
	return g
}

// strategy maps a RollingSync whose steps select with In on one value per key.
func (c *conv) strategy(m map[string]any) *convergev1.RolloutStrategy {
	if str(m, "type") != "RollingSync" {
		return nil
	}
	var rs convergev1.RolloutStrategy
	for i, s := range asSlice(get(m, "rollingSync", "steps")) {
		step := convergev1.RolloutStep{MatchLabels: map[string]string{}}
		for _, e := range asSlice(asMap(s)["matchExpressions"]) {
			em := asMap(e)
			vals := strings1(em["values"])
			if str(em, "operator") != "In" || len(vals) != 1 {
				c.lost("strategy.rollingSync.steps["+strconv.Itoa(i)+"]", "", "converge's steps match labels with one value each (matchLabels): write the step as such")
				return nil
			}
			step.MatchLabels[str(em, "key")] = vals[0]
		}
		if _, ok := asMap(s)["maxUpdate"]; ok {
			c.note("strategy", "%sstrategy.rollingSync.steps[%d].maxUpdate (%s): converge caps the whole rollout with maxConcurrent", c.in, i, c.kindName())
		}
		rs.Steps = append(rs.Steps, step)
	}
	return &rs
}

// template maps an ApplicationSet's template: the Application spec as a SyncTarget spec,
// its parameters written as converge's ({{ .name }}).
func (c *conv) template(m map[string]any, t *setTarget) {
	var s convergev1.SyncTargetSpec
	sc := c.at("", c.in+"spec.", c.out+"spec.")
	sc.clusters = t.clusters
	if !sc.appSpec(asMap(m["spec"]), &s) {
		return
	}
	if t.previews {
		s.ServiceAccountName = previewServiceAccount
	}
	raw, err := json.Marshal(s)
	if err != nil {
		return
	}
	var spec map[string]any
	_ = json.Unmarshal(raw, &spec)
	translated := sc.translateTree(spec, "", t.goTemplate)
	b, _ := json.Marshal(translated)
	t.spec.Template.Spec = apiextensionsv1.JSON{Raw: b}
	c.templateMeta(asMap(m["metadata"]), &t.spec.Template.Metadata, t.goTemplate)
}

func (c *conv) templateMeta(m map[string]any, meta *convergev1.SyncTargetTemplateMeta, goTmpl bool) {
	mc := c.at("", c.in+"metadata.", c.out+"metadata.")
	meta.Name = mc.translate(str(m, "name"), "name", goTmpl)
	for _, k := range sortedKeys(m) {
		switch k {
		case "name", "namespace", "finalizers":
		case "labels", "annotations":
			out := map[string]string{}
			for lk, lv := range asMap(m[k]) {
				out[lk] = mc.translate(asString(lv), k, goTmpl)
			}
			if k == "labels" {
				meta.Labels = out
			} else {
				meta.Annotations = out
			}
		default:
			mc.lost(k, "", "no equivalent in converge")
		}
	}
}
