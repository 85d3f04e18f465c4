package convert

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// clusterKinds are the kinds listed from a cluster, sources first.
var clusterKinds = []schema.GroupKind{
	{Group: fluxSourceGroup, Kind: "GitRepository"},
	{Group: fluxSourceGroup, Kind: "HelmRepository"},
	{Group: fluxSourceGroup, Kind: "OCIRepository"},
	{Group: fluxSourceGroup, Kind: "Bucket"},
	{Group: fluxKustomizeGroup, Kind: "Kustomization"},
	{Group: fluxHelmGroup, Kind: "HelmRelease"},
	{Group: fluxNotificationGroup, Kind: "Provider"},
	{Group: fluxNotificationGroup, Kind: "Alert"},
	{Group: fluxNotificationGroup, Kind: "Receiver"},
	{Group: argoGroup, Kind: "Application"},
	{Group: argoGroup, Kind: "ApplicationSet"},
	{Group: argoGroup, Kind: "AppProject"},
}

// listPage is the size of one page of a list.
const listPage = 500

// FromCluster lists the Flux and Argo CD objects of namespace (every namespace when
// empty) at the version the cluster prefers; kinds not installed are skipped. Only
// apiVersion, kind, metadata name and namespace, and spec are kept.
func FromCluster(ctx context.Context, cfg *rest.Config, namespace string) ([]*unstructured.Unstructured, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, gk := range clusterKinds {
		m, err := mapper.RESTMapping(gk)
		if meta.IsNoMatchError(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("finding %s: %w", gk, err)
		}
		objs, err := listAll(ctx, dyn.Resource(m.Resource).Namespace(namespace), gk)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

func listAll(ctx context.Context, ri dynamic.ResourceInterface, gk schema.GroupKind) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	opts := metav1.ListOptions{Limit: listPage}
	for {
		list, err := ri.List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", gk, err)
		}
		for i := range list.Items {
			out = append(out, trimmed(&list.Items[i]))
		}
		if len(out) > MaxObjects {
			return nil, fmt.Errorf("listing %s: %w", gk, errTooMany)
		}
		if opts.Continue = list.GetContinue(); opts.Continue == "" {
			return out, nil
		}
	}
}

// trimmed keeps what a conversion reads of a live object.
func trimmed(u *unstructured.Unstructured) *unstructured.Unstructured {
	t := &unstructured.Unstructured{Object: map[string]any{"spec": u.Object["spec"]}}
	t.SetAPIVersion(u.GetAPIVersion())
	t.SetKind(u.GetKind())
	t.SetNamespace(u.GetNamespace())
	t.SetName(u.GetName())
	return t
}
