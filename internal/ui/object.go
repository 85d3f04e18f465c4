package ui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/apply"
	synccluster "github.com/converge-gitops/converge/sync/cluster"
)

// maxObjectEvents bounds the events listed in an object's namespace to find its own.
const maxObjectEvents = 500

// errNoSuchObject is an object that the SyncTarget's inventory does not list.
var errNoSuchObject = errors.New("no such object in the inventory")

// objectPage is one object of a SyncTarget's inventory as it is live: who wrote which of
// its fields (its managed fields), its events and its manifest (a Secret's data never).
type objectPage struct {
	Namespace, Name string // the SyncTarget's
	ID              string
	Kind, Object    string // "Deployment.apps", "shop/web"
	Managers        []managerView
	Events          []eventView
	Manifest        string
	// Note says what the page leaves out and why, or why the object could not be read.
	Note string
	// Workload is true for a Pod or a kind with Pods (Deployment, StatefulSet, DaemonSet,
	// ReplicaSet, Job): Pods lists them, PodsNote says what it leaves out.
	Workload bool
	Pods     []podView
	PodsNote string
}

// managerView is one entry of an object's managed fields: a field manager and what it did.
type managerView struct {
	Manager, Operation, Subresource string
	When                            timeView
	// Converge is true for converge's own field manager.
	Converge bool
}

func (s *Server) objectPage(ctx context.Context, key client.ObjectKey, id string) (*objectPage, error) {
	st, want, err := s.readObject(ctx, key, id)
	if err != nil {
		return nil, err
	}
	p := &objectPage{Namespace: st.Namespace, Name: st.Name, ID: id, Kind: kindOf(want), Object: objectName(want)}
	c, release, note := s.objectClient(ctx, st, want)
	if c == nil {
		p.Note = note
		return p, nil
	}
	defer release()
	live, note := readLive(ctx, c, want)
	p.Note = note
	if live == nil {
		return p, nil
	}
	now := s.opts.Now()
	for _, m := range live.GetManagedFields() {
		var when timeView
		if m.Time != nil {
			when = timeOf(m.Time.Time, now)
		}
		p.Managers = append(p.Managers, managerView{Manager: m.Manager, Operation: string(m.Operation),
			Subresource: m.Subresource, When: when, Converge: m.Manager == apply.FieldManager})
	}
	shown := live.DeepCopy()
	shown.SetManagedFields(nil)
	if b, err := yaml.Marshal(shown.Object); err == nil {
		p.Manifest = string(b)
	}
	if s.opts.InCluster == nil || s.authorize(ctx, "list", "", "events", eventNamespace(live), "") == nil {
		p.Events = objectEvents(ctx, c, live, now)
	}
	s.objectPods(ctx, p, c, live)
	return p, nil
}

// objectClient is the client an object of st is read with: the cluster st deploys to, with
// the caller's credentials (nil, and why, when it cannot be read here or by this user).
func (s *Server) objectClient(ctx context.Context, st *convergev1.SyncTarget, want *unstructured.Unstructured) (client.Client, func(), string) {
	switch {
	case s.opts.InCluster != nil && st.Spec.KubeConfig != nil:
		return nil, nil, "the objects of a remote cluster are not shown here: run converge ui with your own credentials"
	case s.opts.InCluster != nil && !s.mayRead(ctx, want):
		return nil, nil, "you may not read it"
	case s.client == nil:
		return nil, nil, "no cluster client"
	}
	on, release, err := synccluster.ForCaller(ctx, s.client, s.opts.Config, st, true)
	if err != nil {
		return nil, nil, s.explain(err)
	}
	c, err := on.Client("")
	if err != nil {
		release()
		return nil, nil, s.explain(err)
	}
	return c, release, ""
}

// readLive reads the live object want names with c. A Secret is read as metadata only:
// its data never reaches the page. nil and why when it cannot be read.
func readLive(ctx context.Context, c client.Reader, want *unstructured.Unstructured) (*unstructured.Unstructured, string) {
	gvk, key := want.GroupVersionKind(), client.ObjectKeyFromObject(want)
	var err error
	live := &unstructured.Unstructured{}
	note := ""
	if gvk.Group == "" && gvk.Kind == "Secret" {
		meta := &metav1.PartialObjectMetadata{}
		meta.SetGroupVersionKind(gvk)
		if err = c.Get(ctx, key, meta); err == nil {
			live.SetGroupVersionKind(gvk)
			live.Object["metadata"], err = runtimeMetadata(meta)
			note = "A Secret's data is never shown: only its metadata."
		}
	} else {
		live.SetGroupVersionKind(gvk)
		err = c.Get(ctx, key, live)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, "not found in the cluster"
	case apierrors.IsForbidden(err):
		return nil, "you may not read it"
	case err != nil:
		return nil, fmt.Sprintf("cannot read it: %v", err)
	}
	return live, note
}

// runtimeMetadata is the metadata of meta as an unstructured map.
func runtimeMetadata(meta *metav1.PartialObjectMetadata) (map[string]any, error) {
	b, err := yaml.Marshal(meta.ObjectMeta)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, yaml.Unmarshal(b, &m)
}

// objectEvents are the events of live, newest first, from the last maxObjectEvents of its
// namespace (none when they cannot be read).
func objectEvents(ctx context.Context, c client.Reader, live *unstructured.Unstructured, now time.Time) []eventView {
	var list corev1.EventList
	if err := c.List(ctx, &list, client.InNamespace(eventNamespace(live)), client.Limit(maxObjectEvents)); err != nil {
		return nil
	}
	var mine []corev1.Event
	for _, e := range list.Items {
		o := e.InvolvedObject
		if (o.UID != "" && o.UID == live.GetUID()) || (o.UID == "" && o.Kind == live.GetKind() && o.Name == live.GetName()) {
			mine = append(mine, e)
		}
	}
	sort.SliceStable(mine, func(i, j int) bool { return eventTime(mine[i]).After(eventTime(mine[j])) })
	out := make([]eventView, 0, len(mine))
	for _, e := range mine {
		out = append(out, eventView{Type: e.Type, Reason: e.Reason, Message: e.Message, Count: e.Count, When: timeOf(eventTime(e), now)})
	}
	return out
}

// eventNamespace is where the events of live are: its namespace, default for a
// cluster-scoped object.
func eventNamespace(live *unstructured.Unstructured) string {
	if ns := live.GetNamespace(); ns != "" {
		return ns
	}
	return metav1.NamespaceDefault
}

// readObject reads the SyncTarget key for a user who may get it (readTarget) and names the
// object id of its inventory: errNoSuchObject when the inventory does not list it. Every
// route of one object starts here.
func (s *Server) readObject(ctx context.Context, key client.ObjectKey, id string) (*convergev1.SyncTarget, *unstructured.Unstructured, error) {
	st, err := s.readTarget(ctx, "get", key)
	if err != nil {
		return nil, nil, err
	}
	if st.Status.Inventory != nil {
		for _, e := range st.Status.Inventory.Entries {
			if e.ID == id {
				want, err := apply.EntryObject(e)
				return st, want, err
			}
		}
	}
	return nil, nil, errNoSuchObject
}

// kindOf is an object's kind, qualified by its group unless core: "Deployment.apps".
func kindOf(o *unstructured.Unstructured) string {
	if g := o.GroupVersionKind().Group; g != "" {
		return o.GetKind() + "." + g
	}
	return o.GetKind()
}

// objectName is "namespace/name", or the name of a cluster-scoped object.
func objectName(o *unstructured.Unstructured) string {
	return strings.TrimPrefix(o.GetNamespace()+"/"+o.GetName(), "/")
}

func (s *Server) serveObject(w http.ResponseWriter, r *http.Request) {
	p, err := s.objectPage(r.Context(), keyOf(r), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, "object", p)
}
