package health

import (
	"context"
	"errors"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// pollInterval is how often a stream lists its objects again when its source cannot
// watch (a controller-runtime client without Watch).
const pollInterval = 200 * time.Millisecond

// errNoWatch is what a source that cannot watch answers a watch with: the stream lists
// again after pollInterval instead.
var errNoWatch = errors.New("the client cannot watch")

// resource is what one stream reads: the objects of one kind in one namespace ("" for
// all, or for a cluster-scoped kind), whole or as metadata only.
type resource struct {
	gvr       schema.GroupVersionResource
	gvk       schema.GroupVersionKind
	namespace string
	// metadataOnly streams read objects as metadata (see statusless).
	metadataOnly bool
}

// source lists and watches resources for the streams of a Checker.
type source interface {
	// list returns the items of r that opts selects, and the resource version of the list.
	list(ctx context.Context, r resource, opts metav1.ListOptions) ([]runtime.Object, string, error)
	// watch opens a watch of r as opts says; errNoWatch when the source cannot watch.
	watch(ctx context.Context, r resource, opts metav1.ListOptions) (watch.Interface, error)
}

// clientGoSource reads through client-go's dynamic and metadata clients (New,
// NewForClients). Without a metadata client, metadata-only resources are read whole.
type clientGoSource struct {
	dynamic  dynamic.Interface
	metadata metadata.Interface
}

func (s clientGoSource) list(ctx context.Context, r resource, opts metav1.ListOptions) ([]runtime.Object, string, error) {
	if r.metadataOnly && s.metadata != nil {
		l, err := s.metadata.Resource(r.gvr).Namespace(r.namespace).List(ctx, opts)
		if err != nil {
			return nil, "", err
		}
		return items(l.Items), l.ResourceVersion, nil
	}
	l, err := s.dynamic.Resource(r.gvr).Namespace(r.namespace).List(ctx, opts)
	if err != nil {
		return nil, "", err
	}
	return items(l.Items), l.GetResourceVersion(), nil
}

func (s clientGoSource) watch(ctx context.Context, r resource, opts metav1.ListOptions) (watch.Interface, error) {
	if r.metadataOnly && s.metadata != nil {
		return s.metadata.Resource(r.gvr).Namespace(r.namespace).Watch(ctx, opts)
	}
	return s.dynamic.Resource(r.gvr).Namespace(r.namespace).Watch(ctx, opts)
}

// runtimeSource reads through a controller-runtime client (NewForClient). It watches when
// the client is a client.WithWatch and lists every pollInterval otherwise.
type runtimeSource struct {
	client client.Client
}

func (s runtimeSource) list(ctx context.Context, r resource, opts metav1.ListOptions) ([]runtime.Object, string, error) {
	if r.metadataOnly {
		l := &metav1.PartialObjectMetadataList{}
		l.SetGroupVersionKind(r.gvk.GroupVersion().WithKind(r.gvk.Kind + "List"))
		if err := s.client.List(ctx, l, listOptions(r, opts)); err != nil {
			return nil, "", err
		}
		return items(l.Items), l.ResourceVersion, nil
	}
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(r.gvk.GroupVersion().WithKind(r.gvk.Kind + "List"))
	if err := s.client.List(ctx, l, listOptions(r, opts)); err != nil {
		return nil, "", err
	}
	return items(l.Items), l.GetResourceVersion(), nil
}

func (s runtimeSource) watch(ctx context.Context, r resource, opts metav1.ListOptions) (watch.Interface, error) {
	wc, ok := s.client.(client.WithWatch)
	if !ok {
		return nil, errNoWatch
	}
	var l client.ObjectList
	if r.metadataOnly {
		l = &metav1.PartialObjectMetadataList{}
	} else {
		l = &unstructured.UnstructuredList{}
	}
	l.GetObjectKind().SetGroupVersionKind(r.gvk.GroupVersion().WithKind(r.gvk.Kind + "List"))
	return wc.Watch(ctx, l, listOptions(r, opts))
}

// listOptions passes opts through as they are, in r's namespace.
func listOptions(r resource, opts metav1.ListOptions) *client.ListOptions {
	return &client.ListOptions{Namespace: r.namespace, Raw: &opts}
}

// items returns pointers to the elements of a list's items.
func items[T any, PT interface {
	*T
	runtime.Object
}](list []T) []runtime.Object {
	out := make([]runtime.Object, len(list))
	for i := range list {
		out[i] = PT(&list[i])
	}
	return out
}
