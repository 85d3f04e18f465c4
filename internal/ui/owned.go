package ui

import (
	"context"
	"net/http"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/converge-gitops/converge/internal/tree"
)

// ownedView is what one object of a SyncTarget's inventory owns, for its tree: a
// Deployment's ReplicaSets and their Pods, with their health; or why it is not shown.
type ownedView struct {
	Owned []tree.Owned
	Notes []string
	Note  string
}

// serveOwned is the fragment of what an inventory object owns, read when its node of the
// tree is opened, with the user's rights (in the cluster: the object's get, and each
// kind's list, asked first).
func (s *Server) serveOwned(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	st, want, err := s.readObject(ctx, keyOf(r), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v := &ownedView{}
	c, release, note := s.objectClient(ctx, st, want)
	if c == nil {
		v.Note = note
		s.render(w, r, "owned", v)
		return
	}
	defer release()
	live, note := readLive(ctx, c, want)
	if live == nil {
		v.Note = note
		s.render(w, r, "owned", v)
		return
	}
	var may tree.MayList
	if s.opts.InCluster != nil {
		may = func(ctx context.Context, gvk schema.GroupVersionKind, ns string) bool {
			m, err := s.client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
			return err == nil && s.authorize(ctx, "list", gvk.Group, m.Resource.Resource, ns, "") == nil
		}
	}
	res := tree.LoadOwned(ctx, c, live, may)
	v.Owned, v.Notes = res.Owned, res.Notes
	s.render(w, r, "owned", v)
}
