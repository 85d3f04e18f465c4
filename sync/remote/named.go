package remote

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// nameErrors says, in every error of c, which cluster it came from ("on the cluster of
// kubeconfig secret team/kc: ..."), so that the status of a SyncTarget failing there
// names it: a 503 of its discovery or a refusal of its API server would not. Errors keep
// what they wrap (apierrors.IsNotFound and the like still answer).
func nameErrors(c client.WithWatch, name string) client.WithWatch {
	wrap := func(err error) error { return nameError(name, err) }
	return interceptor.NewClient(c, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			return wrap(c.Get(ctx, key, obj, opts...))
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			return wrap(c.List(ctx, list, opts...))
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			return wrap(c.Create(ctx, obj, opts...))
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			return wrap(c.Delete(ctx, obj, opts...))
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			return wrap(c.Update(ctx, obj, opts...))
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			return wrap(c.Patch(ctx, obj, patch, opts...))
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			return wrap(c.Apply(ctx, obj, opts...))
		},
		Watch: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
			w, err := c.Watch(ctx, list, opts...)
			return w, wrap(err)
		},
	})
}

// nameError says which cluster err came from, unless it says so already.
func nameError(name string, err error) error {
	var unreachable *UnreachableError
	if err == nil || errors.As(err, &unreachable) {
		return err
	}
	return fmt.Errorf("on the cluster of kubeconfig secret %s: %w", name, err)
}
