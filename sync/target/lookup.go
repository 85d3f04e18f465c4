package target

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-gitops/converge/sync/helm"
)

// Lookup answers a chart's lookup through r, read-only: give it the client the SyncTarget
// acts with (its service account), so that a chart reads nothing its tenant could not.
// A missing object, or a kind the cluster does not serve, is an empty answer, as in Helm.
func Lookup(r client.Reader) helm.Lookup {
	return func(ctx context.Context, apiVersion, kind, namespace, name string) (map[string]any, error) {
		gv, err := schema.ParseGroupVersion(apiVersion)
		if err != nil {
			return nil, err
		}
		gvk := gv.WithKind(kind)
		if name == "" {
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(gvk.GroupVersion().WithKind(kind + "List"))
			err = r.List(ctx, list, client.InNamespace(namespace))
			if absent(err) {
				return map[string]any{}, nil
			}
			if err != nil {
				return nil, err
			}
			return list.UnstructuredContent(), nil
		}
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(gvk)
		err = r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, obj)
		if absent(err) {
			return map[string]any{}, nil
		}
		if err != nil {
			return nil, err
		}
		return obj.Object, nil
	}
}

// absent reports whether err says the object, or its kind, is not there.
func absent(err error) bool {
	return apierrors.IsNotFound(err) || isNoMatch(err)
}

func isNoMatch(err error) bool { return err != nil && meta.IsNoMatchError(err) }
