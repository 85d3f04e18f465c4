package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// MaxParamSets caps the parameter sets (and so the SyncTargets) one set generates.
const MaxParamSets = 1000

// Directories lists the directories of a Git source; the controller's is a GitLister.
type Directories interface {
	// List returns the directories of g's source (read with the credentials of the set's
	// namespace ns) matching its include and not its exclude globs, and how long the
	// answer holds before the source is polled again.
	List(ctx context.Context, ns string, g *convergev1.GitDirectoriesGenerator) (Listing, error)
}

// Listing is a Directories' answer.
type Listing struct {
	// Dirs are the directories.
	Dirs []string
	// Every is how long the answer holds before the source is polled again.
	Every time.Duration
	// Verified says who signed the revision listed, when the source has verify.
	Verified string
	// Refused says why the source's current revision was not listed, its signatures not
	// verifying: Dirs are those of the last revision that verified.
	Refused string
}

// Env is what the generators read.
type Env struct {
	// Namespace of the set: clusters are its Secrets, Git credentials its Secrets.
	Namespace string
	// Secrets lists Secrets' metadata; an uncached reader (the API reader), so that only
	// the clusters generator lists Secrets, by label, and nothing watches them.
	Secrets client.Reader
	// Dirs lists Git directories.
	Dirs Directories
}

// Generated is what the generators yielded: the parameter sets in order, and how long
// until a generator should be read again (0: only on a change of the set).
type Generated struct {
	Params  []Params
	Recheck time.Duration
	// Verified says, for each gitDirectories generator with verify, who signed the
	// revision it listed.
	Verified []string
	// Refused says, for each gitDirectories generator whose source's current revision did
	// not verify, why: it yielded the directories of the last revision that did.
	Refused []string
}

// add appends o's parameter sets and what it says, prefixed with where it comes from.
func (g *Generated) add(prefix string, o Generated) {
	g.Params = append(g.Params, o.Params...)
	g.Recheck = sooner(g.Recheck, o.Recheck)
	for _, v := range o.Verified {
		g.Verified = append(g.Verified, prefix+v)
	}
	for _, r := range o.Refused {
		g.Refused = append(g.Refused, prefix+r)
	}
}

// Generate runs every generator of the set and concatenates their parameter sets.
func Generate(ctx context.Context, env Env, gens []convergev1.Generator) (Generated, error) {
	var out Generated
	for i, g := range gens {
		got, err := generate(ctx, env, g)
		if err != nil {
			return Generated{}, fmt.Errorf("generators[%d]: %w", i, err)
		}
		out.add(fmt.Sprintf("generators[%d]: ", i), got)
		if len(out.Params) > MaxParamSets {
			return Generated{}, fmt.Errorf("the generators yield more than %d parameter sets", MaxParamSets)
		}
	}
	return out, nil
}

func sooner(a, b time.Duration) time.Duration {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

func generate(ctx context.Context, env Env, g convergev1.Generator) (Generated, error) {
	if g.Matrix != nil {
		return matrix(ctx, env, g.Matrix)
	}
	return generateBase(ctx, env, convergev1.BaseGenerator{List: g.List, Clusters: g.Clusters, GitDirectories: g.GitDirectories})
}

func generateBase(ctx context.Context, env Env, g convergev1.BaseGenerator) (Generated, error) {
	switch {
	case g.List != nil:
		return Generated{Params: listParams(g.List)}, nil
	case g.Clusters != nil:
		p, err := clusterParams(ctx, env, g.Clusters)
		return Generated{Params: p, Recheck: convergev1.DefaultInterval}, err
	case g.GitDirectories != nil:
		if env.Dirs == nil {
			return Generated{}, errors.New("no Git directory lister configured")
		}
		got, err := env.Dirs.List(ctx, env.Namespace, g.GitDirectories)
		if err != nil {
			return Generated{}, err
		}
		out := Generated{Params: dirParams(got.Dirs), Recheck: got.Every}
		if got.Verified != "" {
			out.Verified = []string{got.Verified}
		}
		if got.Refused != "" {
			out.Refused = []string{got.Refused}
		}
		return out, nil
	}
	return Generated{}, errors.New("no generator set")
}

func listParams(l *convergev1.ListGenerator) []Params {
	out := make([]Params, 0, len(l.Elements))
	for _, e := range l.Elements {
		out = append(out, Params(maps.Clone(e)))
	}
	return out
}

// matrix is the product of its two generators, each pair merged (the second wins).
func matrix(ctx context.Context, env Env, m *convergev1.MatrixGenerator) (Generated, error) {
	if len(m.Generators) != 2 {
		return Generated{}, fmt.Errorf("matrix: %d generators, want 2", len(m.Generators))
	}
	a, err := generateBase(ctx, env, m.Generators[0])
	if err != nil {
		return Generated{}, fmt.Errorf("matrix[0]: %w", err)
	}
	b, err := generateBase(ctx, env, m.Generators[1])
	if err != nil {
		return Generated{}, fmt.Errorf("matrix[1]: %w", err)
	}
	p, err := Product(a.Params, b.Params)
	if err != nil {
		return Generated{}, err
	}
	var out Generated
	out.add("matrix[0]: ", Generated{Recheck: a.Recheck, Verified: a.Verified, Refused: a.Refused})
	out.add("matrix[1]: ", Generated{Recheck: b.Recheck, Verified: b.Verified, Refused: b.Refused})
	out.Params = p
	return out, nil
}

// Product is every pair of a and b merged, b's values winning on a shared name, in the
// order of a then b. It refuses more than MaxParamSets pairs before building any.
func Product(a, b []Params) ([]Params, error) {
	if len(a) > 0 && len(b) > MaxParamSets/len(a) {
		return nil, fmt.Errorf("matrix: %d × %d parameter sets exceed %d", len(a), len(b), MaxParamSets)
	}
	out := make([]Params, 0, len(a)*len(b))
	for _, x := range a {
		for _, y := range b {
			p := maps.Clone(x)
			if p == nil {
				p = Params{}
			}
			maps.Copy(p, y)
			out = append(out, p)
		}
	}
	return out, nil
}

// clusterParams lists the metadata of the Secrets of the namespace labelled
// converge.dev/cluster and matching the selector: never their data.
func clusterParams(ctx context.Context, env Env, g *convergev1.ClustersGenerator) ([]Params, error) {
	sel, err := clusterSelector(g.Selector)
	if err != nil {
		return nil, err
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "SecretList"})
	if err := env.Secrets.List(ctx, list, client.InNamespace(env.Namespace),
		client.MatchingLabelsSelector{Selector: sel}, client.Limit(MaxParamSets+1)); err != nil {
		return nil, fmt.Errorf("clusters: listing the Secrets labelled %s: %w", convergev1.ClusterLabel, err)
	}
	if len(list.Items) > MaxParamSets || list.Continue != "" {
		return nil, fmt.Errorf("clusters: more than %d cluster Secrets", MaxParamSets)
	}
	out := make([]Params, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, ClusterParams(&list.Items[i].ObjectMeta))
	}
	return out, nil
}

// clusterSelector is the generator's selector with the requirement that the cluster
// label exists.
func clusterSelector(s *metav1.LabelSelector) (labels.Selector, error) {
	sel := labels.Everything()
	if s != nil {
		var err error
		if sel, err = metav1.LabelSelectorAsSelector(s); err != nil {
			return nil, fmt.Errorf("clusters: selector: %w", err)
		}
	}
	req, err := labels.NewRequirement(convergev1.ClusterLabel, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	return sel.Add(*req), nil
}

// ClusterParams are the parameters of one cluster Secret: name (the cluster label's
// value, or the Secret's name when it is empty), secretName, and labels.<key>.
func ClusterParams(m *metav1.ObjectMeta) Params {
	p := Params{"name": m.Labels[convergev1.ClusterLabel], "secretName": m.Name}
	if p["name"] == "" {
		p["name"] = m.Name
	}
	for k, v := range m.Labels {
		p["labels."+k] = v
	}
	return p
}
