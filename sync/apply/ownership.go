package apply

import (
	"context"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// maxConflictsListed bounds the objects named in a conflict message.
const maxConflictsListed = 5

// CheckOwnership refuses to take over objects another existing SyncTarget manages: two
// SyncTargets rendering one object would otherwise overwrite each other on every sync,
// and the loser's prune could delete what the winner still declares. owner names the
// SyncTarget the objects are applied for; ownerExists tells whether another SyncTarget
// exists (the daemon asks its cache). It returns an error naming the first few
// conflicts, and otherwise what it read of the objects, for the apply: what they are is
// learnt once. An object whose labels name a SyncTarget that no longer exists is free to
// adopt.
//
// Per kind and namespace of the rendered objects it costs one read: a get when the kind
// and namespace hold one object, else a list of the metadata of the objects converge
// manages there (plus a list of the SyncTarget's own objects when some of them exist),
// so the cost does not grow with the number of objects.
func CheckOwnership(ctx context.Context, c client.Client, owner client.ObjectKey,
	ownerExists func(context.Context, client.ObjectKey) (bool, error), objects []*unstructured.Unstructured) (Live, error) {
	return CheckOwnershipCached(ctx, c, owner, ownerExists, nil, objects)
}

// Managed finds, without a request, an object of kind gvk among those converge manages
// (a watch cache of the objects carrying the owner labels): its labels, and whether it
// is there. ok is false when it cannot answer for the kind; the cluster is read then.
type Managed func(gvk schema.GroupVersionKind, namespace, name string) (labels map[string]string, found, ok bool)

// CheckOwnershipCached is CheckOwnership asking managed first. A kind and namespace
// where managed finds no object of another SyncTarget costs no request: an object that
// carries no owner label is free to adopt whether it exists or not, and the apply's
// dry-run reads the live objects it needs. Where managed finds another SyncTarget's
// claim, the scope is read through c as without it, so that a conflict is only ever
// reported from what the caller's identity may read. nil managed reads every scope.
func CheckOwnershipCached(ctx context.Context, c client.Client, owner client.ObjectKey,
	ownerExists func(context.Context, client.ObjectKey) (bool, error), managed Managed,
	objects []*unstructured.Unstructured) (Live, error) {
	oc := &ownershipCheck{c: c, owner: owner, ownerExists: ownerExists, live: Live{}, owners: map[client.ObjectKey]bool{}}
	wanted := map[scope]map[string]bool{}
	var scopes []scope
	for _, o := range objects {
		s := scope{gvk: o.GroupVersionKind(), namespace: o.GetNamespace()}
		if wanted[s] == nil {
			wanted[s] = map[string]bool{}
			scopes = append(scopes, s)
		}
		wanted[s][o.GetName()] = true
	}
	for _, s := range scopes {
		if managed != nil && oc.checkCached(s, wanted[s], managed) {
			continue
		}
		var err error
		if names := wanted[s]; len(names) == 1 {
			for name := range names {
				err = oc.checkOne(ctx, s, name)
			}
		} else {
			err = oc.checkMany(ctx, s, names)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := oc.conflictError(); err != nil {
		return nil, err
	}
	return oc.live, nil
}

// scope is a kind in a namespace.
type scope struct {
	gvk       schema.GroupVersionKind
	namespace string
}

// ownershipCheck is one CheckOwnership: what it read and the conflicts it found.
type ownershipCheck struct {
	c           client.Client
	owner       client.ObjectKey
	ownerExists func(context.Context, client.ObjectKey) (bool, error)
	live        Live
	owners      map[client.ObjectKey]bool // claiming SyncTargets, and whether they exist
	conflicts   []string
}

// unknownScope: a kind or namespace that does not exist yet holds no one's objects; one
// the identity may not read it may not take over either: the apply decides.
func unknownScope(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || meta.IsNoMatchError(err)
}

// checkOne reads the one object of its kind and namespace.
func (oc *ownershipCheck) checkOne(ctx context.Context, s scope, name string) error {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(s.gvk)
	if err := oc.c.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: name}, u); err != nil {
		if unknownScope(err) {
			return nil
		}
		return fmt.Errorf("checking who manages %s %s: %w", s.gvk.Kind, objectName(s.namespace, name), err)
	}
	oc.live.Add(s.gvk, u)
	return oc.claim(ctx, s, name, u.GetLabels())
}

// checkMany lists the metadata of the objects converge manages in the scope, and when
// the owner has some among names, its own objects whole.
func (oc *ownershipCheck) checkMany(ctx context.Context, s scope, names map[string]bool) error {
	hasName, _ := labels.NewRequirement(convergev1.NameLabel, selection.Exists, nil)
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(s.gvk.GroupVersion().WithKind(s.gvk.Kind + "List"))
	opts := []client.ListOption{client.MatchingLabelsSelector{Selector: labels.NewSelector().Add(*hasName)}}
	if s.namespace != "" {
		opts = append(opts, client.InNamespace(s.namespace))
	}
	if err := oc.c.List(ctx, list, opts...); err != nil {
		if unknownScope(err) {
			return nil
		}
		return fmt.Errorf("checking who manages the %s objects: %w", s.gvk.Kind, err)
	}
	ownsSome := false
	for _, item := range list.Items {
		if !names[item.Name] {
			continue
		}
		ownsSome = ownsSome || ownedBy(oc.owner, item.Labels)
		if err := oc.claim(ctx, s, item.Name, item.Labels); err != nil {
			return err
		}
	}
	switch {
	case ownsSome && len(oc.conflicts) == 0:
		// The objects the SyncTarget owns already, whole, for the apply to compare with.
		oc.live.listOwner(ctx, oc.c, s, client.MatchingLabels{convergev1.NameLabel: oc.owner.Name, convergev1.NamespaceLabel: oc.owner.Namespace})
	case !ownsSome:
		oc.live.markListed(s.gvk, s.namespace) // it owns none there
	}
	return nil
}

// checkCached answers for the scope from managed, and reports whether it could: not when
// managed does not know the kind, nor when it shows another SyncTarget's claim. It reads
// nothing: the apply lists what it needs of the objects it applies (a commit that changes
// one object of a thousand needs none of the others).
func (oc *ownershipCheck) checkCached(s scope, names map[string]bool, managed Managed) bool {
	for name := range names {
		lbls, found, ok := managed(s.gvk, s.namespace, name)
		if !ok {
			return false
		}
		if !found {
			continue
		}
		if _, managedBy := lbls[convergev1.NameLabel]; managedBy && !ownedBy(oc.owner, lbls) {
			return false
		}
	}
	return true
}

// claim records a conflict when an object's labels name another SyncTarget that exists.
func (oc *ownershipCheck) claim(ctx context.Context, s scope, name string, lbls map[string]string) error {
	if _, managedBy := lbls[convergev1.NameLabel]; !managedBy || ownedBy(oc.owner, lbls) {
		return nil
	}
	other := client.ObjectKey{Namespace: lbls[convergev1.NamespaceLabel], Name: lbls[convergev1.NameLabel]}
	exists, known := oc.owners[other]
	if !known {
		var err error
		if exists, err = oc.ownerExists(ctx, other); err != nil {
			return fmt.Errorf("checking SyncTarget %s: %w", other, err)
		}
		oc.owners[other] = exists
	}
	if exists {
		oc.conflicts = append(oc.conflicts, fmt.Sprintf("%s %s is managed by SyncTarget %s",
			s.gvk.Kind, objectName(s.namespace, name), other))
	}
	return nil
}

// conflictError names the first few conflicts found, or is nil.
func (oc *ownershipCheck) conflictError() error {
	if len(oc.conflicts) == 0 {
		return nil
	}
	conflicts := oc.conflicts
	sort.Strings(conflicts)
	n := len(conflicts)
	if n > maxConflictsListed {
		conflicts = append(conflicts[:maxConflictsListed], fmt.Sprintf("and %d more", n-maxConflictsListed))
	}
	return fmt.Errorf("%d object(s) belong to another SyncTarget, nothing was applied: %s; remove them from one of the two",
		n, strings.Join(conflicts, "; "))
}

func objectName(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}
