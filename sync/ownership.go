package sync

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

// checkOwnership refuses to take over objects another existing SyncTarget manages: two
// SyncTargets rendering one object would otherwise overwrite each other on every sync,
// and the loser's prune could delete what the winner still declares. It lists, per kind
// and namespace of the rendered objects, the objects labelled for another SyncTarget
// (metadata only, two label-selected lists per kind and namespace, so the cost does not
// grow with the number of objects) and returns an error naming the first few conflicts.
// An object whose labels name a SyncTarget that no longer exists is free to adopt.
func (r *Reconciler) checkOwnership(ctx context.Context, c client.Client, st *convergev1.SyncTarget,
	objects []*unstructured.Unstructured) error {
	type scope struct {
		gvk       schema.GroupVersionKind
		namespace string
	}
	wanted := map[scope]map[string]bool{}
	for _, o := range objects {
		s := scope{gvk: o.GroupVersionKind(), namespace: o.GetNamespace()}
		if wanted[s] == nil {
			wanted[s] = map[string]bool{}
		}
		wanted[s][o.GetName()] = true
	}
	// Objects labelled with another name, and objects with this name but another namespace.
	otherName, _ := labels.NewRequirement(convergev1.NameLabel, selection.NotEquals, []string{st.Name})
	hasName, _ := labels.NewRequirement(convergev1.NameLabel, selection.Exists, nil)
	sameName, _ := labels.NewRequirement(convergev1.NameLabel, selection.Equals, []string{st.Name})
	otherNS, _ := labels.NewRequirement(convergev1.NamespaceLabel, selection.NotEquals, []string{st.Namespace})
	selectors := []labels.Selector{
		labels.NewSelector().Add(*hasName, *otherName),
		labels.NewSelector().Add(*sameName, *otherNS),
	}

	owners := map[client.ObjectKey]bool{} // claiming SyncTargets, and whether they exist
	var conflicts []string
	for s, names := range wanted {
		for _, sel := range selectors {
			list := &metav1.PartialObjectMetadataList{}
			list.SetGroupVersionKind(s.gvk.GroupVersion().WithKind(s.gvk.Kind + "List"))
			opts := []client.ListOption{client.MatchingLabelsSelector{Selector: sel}}
			if s.namespace != "" {
				opts = append(opts, client.InNamespace(s.namespace))
			}
			if err := c.List(ctx, list, opts...); err != nil {
				if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || meta.IsNoMatchError(err) {
					// A kind or namespace that does not exist yet holds no one's objects;
					// one the identity may not list it may not take over either: apply decides.
					continue
				}
				return fmt.Errorf("checking who manages the %s objects: %w", s.gvk.Kind, err)
			}
			for _, item := range list.Items {
				if !names[item.Name] {
					continue
				}
				owner := client.ObjectKey{Namespace: item.Labels[convergev1.NamespaceLabel], Name: item.Labels[convergev1.NameLabel]}
				exists, known := owners[owner]
				if !known {
					err := r.Get(ctx, owner, &convergev1.SyncTarget{})
					if err != nil && !apierrors.IsNotFound(err) {
						return fmt.Errorf("checking SyncTarget %s: %w", owner, err)
					}
					exists = err == nil
					owners[owner] = exists
				}
				if exists {
					conflicts = append(conflicts, fmt.Sprintf("%s %s is managed by SyncTarget %s",
						s.gvk.Kind, objectName(s.namespace, item.Name), owner))
				}
			}
		}
	}
	if len(conflicts) == 0 {
		return nil
	}
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
