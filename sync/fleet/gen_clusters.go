package fleet

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// clustersGenerator yields a parameter set per cluster Secret of the set's namespace, and
// is read again at the default interval (Secrets are not watched).
type clustersGenerator struct{ g *convergev1.ClustersGenerator }

func (c clustersGenerator) generate(ctx context.Context, env Env) (Generated, error) {
	p, err := clusterParams(ctx, env, c.g)
	return Generated{Params: p, Recheck: convergev1.DefaultInterval}, err
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
