package ui

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// deniedError is a read or an action that the request's user may not do, as a
// SubjectAccessReview answered in in-cluster mode.
type deniedError struct {
	user, verb, resource, namespace string
}

func (e *deniedError) Error() string {
	msg := fmt.Sprintf("you (user %s) may not %s %s", e.user, e.verb, e.resource)
	if e.namespace != "" {
		msg += " in namespace " + e.namespace
	}
	return msg
}

// synctargets is the resource of SyncTargets, for authorization.
const synctargets = "synctargets"

// authorize fails with a deniedError unless the request's user may do verb on the
// resource; outside in-cluster mode it allows everything (the API server judges).
func (s *Server) authorize(ctx context.Context, verb, group, resource, ns, name string) error {
	ok, err := s.can(ctx, verb, group, resource, ns, name)
	if err != nil {
		return err
	}
	if !ok {
		return &deniedError{user: requestUser(ctx), verb: verb, resource: resource, namespace: ns}
	}
	return nil
}

// authorizeTarget checks verb on one SyncTarget.
func (s *Server) authorizeTarget(ctx context.Context, verb, ns, name string) error {
	return s.authorize(ctx, verb, convergev1.GroupVersion.Group, synctargets, ns, name)
}

// readTarget reads the SyncTarget key for a user who may do verb on it, asking first:
// a user who may not gets the same deniedError whether it exists or not, so that no
// route tells of a SyncTarget its user may not read. Every route that names a
// SyncTarget reads it through here (actions authorize "patch" before they read it).
func (s *Server) readTarget(ctx context.Context, verb string, key client.ObjectKey) (*convergev1.SyncTarget, error) {
	if err := s.authorizeTarget(ctx, verb, key.Namespace, key.Name); err != nil {
		return nil, err
	}
	st, found, err := s.store.Target(ctx, key)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, errNotFound
	}
	return st, nil
}

// visible keeps the SyncTargets of the namespaces the request's user may list.
func (s *Server) visible(ctx context.Context, targets []convergev1.SyncTarget) []convergev1.SyncTarget {
	if s.opts.InCluster == nil {
		return targets
	}
	may := map[string]bool{}
	out := targets[:0:0]
	for _, st := range targets {
		ok, seen := may[st.Namespace]
		if !seen {
			ok = s.authorizeTarget(ctx, "list", st.Namespace, "") == nil
			may[st.Namespace] = ok
		}
		if ok {
			out = append(out, st)
		}
	}
	return out
}

// mayRead says whether the request's user may get the object id, whose kind the
// server's RESTMapper knows; in in-cluster mode only.
func (s *Server) mayRead(ctx context.Context, id *unstructured.Unstructured) bool {
	gvk := id.GroupVersionKind()
	m, err := s.client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return false
	}
	return s.authorize(ctx, "get", gvk.Group, m.Resource.Resource, id.GetNamespace(), id.GetName()) == nil
}

// mayFollow says whether a change of the SyncTarget key ("namespace/name") may be
// sent to the request's user.
func (s *Server) mayFollow(ctx context.Context, key string) bool {
	ns, name, _ := strings.Cut(key, "/")
	return s.authorizeTarget(ctx, "get", ns, name) == nil
}
