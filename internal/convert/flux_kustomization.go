package convert

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// newSyncTarget is an empty SyncTarget named after u, in u's namespace.
func newSyncTarget(u *unstructured.Unstructured) *convergev1.SyncTarget {
	return &convergev1.SyncTarget{
		TypeMeta:   metav1.TypeMeta{APIVersion: convergev1.GroupVersion.String(), Kind: convergev1.SyncTargetKind},
		ObjectMeta: metav1.ObjectMeta{Namespace: u.GetNamespace(), Name: u.GetName()},
	}
}

// kustomization converts a Flux Kustomization and its GitRepository or OCIRepository into
// a SyncTarget.
func (c *converter) kustomization(u *unstructured.Unstructured) {
	cv := newConv(c, u)
	st := newSyncTarget(u)
	spec := asMap(u.Object["spec"])
	from := []string{cv.from}
	if src := cv.kustomizationSource(u, spec, st); src != "" {
		from = append(from, src)
	} else if st.Spec.Source.URL == "" && st.Spec.OCI == nil {
		return
	}
	mapFields(cv, spec, &st.Spec, kustomizationRules, kustomizationLost)
	if w, ok := spec["wait"].(bool); !ok || !w {
		cv.note("wait", "spec.wait (Kustomization): Flux waited only for spec.healthChecks; converge health-checks every applied object by default (set wait: false for Flux's behaviour)")
	}
	cv.object(st, from...)
}

// kustomizationSource fills spec.source from the GitRepository of sourceRef, or spec.oci
// from its OCIRepository, and returns its name; "" when it is not in the input (the
// SyncTarget is kept, with a comment) or when it cannot be converted (the SyncTarget is
// dropped: it has neither a source URL nor spec.oci).
func (c *conv) kustomizationSource(u *unstructured.Unstructured, spec map[string]any, st *convergev1.SyncTarget) string {
	ref := asMap(spec["sourceRef"])
	kind, name, ns := str(ref, "kind"), str(ref, "name"), str(ref, "namespace")
	if ns == "" {
		ns = u.GetNamespace()
	}
	field := map[string]string{"GitRepository": "source", "OCIRepository": "oci"}[kind]
	if field == "" {
		c.lost("sourceRef", "", "converge follows Git repositories, OCI artifacts and charts; a "+kind+" source is not supported")
		return ""
	}
	repo := c.s.c.lookup(fluxSourceGroup, kind, ns, name)
	if repo == nil || ns != u.GetNamespace() {
		why := "the " + kind + " is not in the input: fill in spec." + field + ".url and spec." + field + ".ref"
		if ns != u.GetNamespace() {
			why = "the " + kind + " is in another namespace; converge's source is part of the SyncTarget: check spec." + field
		}
		c.lost("sourceRef", field, why)
		if kind == "OCIRepository" {
			st.Spec.OCI = &convergev1.OCISource{URL: "oci://registry.example.invalid/fill-me-in", Ref: convergev1.OCIRef{Tag: "latest"}}
		} else {
			st.Spec.Source.URL = "https://git.example.invalid/fill-me-in"
			st.Spec.Source.Ref.Branch = "main"
		}
		if repo == nil {
			return ""
		}
	}
	if kind == "OCIRepository" {
		src, ok := c.ociArtifact(repo)
		if !ok {
			st.Spec.OCI = nil
			c.lost("sourceRef", "", "the OCIRepository cannot be converted (see its problem), and the Kustomization is not either")
			return ""
		}
		st.Spec.OCI = src
		return keyOf(repo).String()
	}
	st.Spec.Source = c.gitSource(repo)
	return keyOf(repo).String()
}

var kustomizationRules = []rule[*convergev1.SyncTargetSpec]{
	ignored[*convergev1.SyncTargetSpec]("sourceRef"),
	{"path", func(_ *conv, v any, s *convergev1.SyncTargetSpec) { s.Path = relPath(asString(v)) }},
	{"prune", func(_ *conv, v any, s *convergev1.SyncTargetSpec) { s.Prune = asBool(v) }},
	{"dependsOn", func(_ *conv, v any, s *convergev1.SyncTargetSpec) { s.DependsOn = dependencies(v) }},
	{"healthChecks", func(_ *conv, v any, s *convergev1.SyncTargetSpec) { s.HealthChecks = healthChecks(v) }},
	{"healthCheckExprs", func(_ *conv, v any, s *convergev1.SyncTargetSpec) { s.HealthCheckExprs = healthExprs(v) }},
	{"wait", func(_ *conv, v any, s *convergev1.SyncTargetSpec) {
		if asBool(v) {
			w := true
			s.Wait = &w
		}
	}},
	{"timeout", func(c *conv, v any, s *convergev1.SyncTargetSpec) { s.Timeout = c.duration("timeout", v) }},
	{"targetNamespace", func(_ *conv, v any, s *convergev1.SyncTargetSpec) { s.TargetNamespace = asString(v) }},
	{"serviceAccountName", func(_ *conv, v any, s *convergev1.SyncTargetSpec) { s.ServiceAccountName = asString(v) }},
	{"suspend", func(_ *conv, v any, s *convergev1.SyncTargetSpec) { s.Suspend = asBool(v) }},
	{"postBuild", func(c *conv, v any, s *convergev1.SyncTargetSpec) { s.PostBuild = c.postBuild(asMap(v)) }},
	{"decryption", func(c *conv, v any, s *convergev1.SyncTargetSpec) { s.Decryption = c.decryption(asMap(v)) }},
	{"kubeConfig", func(c *conv, v any, s *convergev1.SyncTargetSpec) { s.KubeConfig = c.kubeConfig(v) }},
	{"interval", func(c *conv, _ any, s *convergev1.SyncTargetSpec) {
		const text = "%sinterval (%s): converge has no periodic re-apply: it watches the applied objects and corrects drift at once; %s"
		if s.OCI != nil {
			c.note("oci", text, c.in, c.kindName(), "spec.oci.interval is the poll of the registry")
			return
		}
		c.note("source", text, c.in, c.kindName(), "spec.source.interval is the poll of the repository")
	}},
	noteOnly[*convergev1.SyncTargetSpec]("retryInterval", "", "converge retries a failed revision with its own backoff"),
	noteOnly[*convergev1.SyncTargetSpec]("deletionPolicy", "prune", "converge prunes the objects when the SyncTarget is deleted if spec.prune is true, and orphans them otherwise"),
}

var kustomizationLost = map[string]string{
	"force":          "no equivalent: converge never deletes and recreates an object whose immutable fields changed",
	"patches":        "converge runs the kustomization.yaml found at spec.path: put the patches in a kustomization.yaml in Git",
	"images":         "converge runs the kustomization.yaml found at spec.path: put the images in a kustomization.yaml in Git",
	"components":     "converge runs the kustomization.yaml found at spec.path: put the components in a kustomization.yaml in Git",
	"commonMetadata": "converge runs the kustomization.yaml found at spec.path: put labels and annotations in a kustomization.yaml in Git",
	"namePrefix":     "converge runs the kustomization.yaml found at spec.path: put namePrefix in a kustomization.yaml in Git",
	"nameSuffix":     "converge runs the kustomization.yaml found at spec.path: put nameSuffix in a kustomization.yaml in Git",
}

func healthChecks(v any) []convergev1.NamespacedObjectKindReference {
	var out []convergev1.NamespacedObjectKindReference
	for _, x := range asSlice(v) {
		m := asMap(x)
		out = append(out, convergev1.NamespacedObjectKindReference{
			APIVersion: str(m, "apiVersion"), Kind: str(m, "kind"), Name: str(m, "name"), Namespace: str(m, "namespace"),
		})
	}
	return out
}

func healthExprs(v any) []convergev1.CustomHealthCheck {
	var out []convergev1.CustomHealthCheck
	for _, x := range asSlice(v) {
		m := asMap(x)
		out = append(out, convergev1.CustomHealthCheck{
			APIVersion: str(m, "apiVersion"), Kind: str(m, "kind"),
			Current: str(m, "current"), Failed: str(m, "failed"), InProgress: str(m, "inProgress"),
		})
	}
	return out
}

// postBuild reads Flux's spec.postBuild; Flux replaces an unset variable without a default
// by the empty string, so strict is turned off.
func (c *conv) postBuild(m map[string]any) *convergev1.PostBuildSpec {
	pb := &convergev1.PostBuildSpec{}
	if sub := asMap(m["substitute"]); len(sub) > 0 {
		pb.Substitute = map[string]string{}
		for k, v := range sub {
			pb.Substitute[k] = asString(v)
		}
	}
	for _, x := range asSlice(m["substituteFrom"]) {
		r := asMap(x)
		pb.SubstituteFrom = append(pb.SubstituteFrom, convergev1.SubstituteReference{
			Kind: str(r, "kind"), Name: str(r, "name"), Optional: asBool(r["optional"]),
		})
	}
	for _, k := range sortedKeys(m) {
		if k != "substitute" && k != "substituteFrom" {
			c.lost("postBuild."+k, "postBuild", "no equivalent in converge")
		}
	}
	strict := false
	pb.Strict = &strict
	c.note("postBuild.strict", "Flux replaces a variable that is unset and has no default by the empty string; converge's default (strict: true) makes it an error")
	return pb
}

func (c *conv) decryption(m map[string]any) *convergev1.DecryptionSpec {
	if p := str(m, "provider"); p != "sops" {
		c.lost("decryption.provider", "", "converge decrypts sops only")
		return nil
	}
	return &convergev1.DecryptionSpec{Provider: "sops", SecretRef: localRef(m["secretRef"])}
}
