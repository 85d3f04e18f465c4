package fleet

import (
	"context"
	"fmt"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// PreviewOfLabel marks a namespace a set created for its previews: its value is
// "<set namespace>.<set name>".
const PreviewOfLabel = "converge.dev/preview-of"

// previewOf is the value of PreviewOfLabel for set.
func previewOf(set *convergev1.SyncTargetSet) string { return set.Namespace + "." + set.Name }

// namespaceCreator is the pullRequests generator whose service account creates the
// previews' namespaces, or nil when the set creates none.
func namespaceCreator(set *convergev1.SyncTargetSet) *convergev1.PullRequestsGenerator {
	for _, g := range set.Spec.Generators {
		if g.PullRequests != nil && g.PullRequests.CreateNamespace {
			return g.PullRequests
		}
		if g.Matrix != nil {
			for _, b := range g.Matrix.Generators {
				if b.PullRequests != nil && b.PullRequests.CreateNamespace {
					return b.PullRequests
				}
			}
		}
	}
	return nil
}

// asAccounts builds clients that act as a service account: the set creates and deletes
// namespaces with its previews' rights, never its own.
type asAccounts struct {
	config *rest.Config
	scheme client.Options

	mu      sync.Mutex
	clients map[string]client.Client
}

// client acts as the service account name of namespace ns.
func (a *asAccounts) client(ns, name string) (client.Client, error) {
	user := fmt.Sprintf("system:serviceaccount:%s:%s", ns, name)
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.clients[user]; ok {
		return c, nil
	}
	cfg := rest.CopyConfig(a.config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, a.scheme)
	if err != nil {
		return nil, err
	}
	if a.clients == nil {
		a.clients = map[string]client.Client{}
	}
	a.clients[user] = c
	return c, nil
}

// foreignNamespaceError is a preview's namespace that exists and is not the set's: the
// set's template must change, trying again does not help.
type foreignNamespaceError struct{ msg string }

func (e *foreignNamespaceError) Error() string { return e.msg }

// targetNamespaces are the spec.targetNamespace of targets, sorted, without repeats.
func targetNamespaces(targets []*Target) []string {
	seen := map[string]bool{}
	var out []string
	for _, t := range targets {
		ns, _ := t.Spec["targetNamespace"].(string)
		if ns != "" && !seen[ns] {
			seen[ns] = true
			out = append(out, ns)
		}
	}
	sort.Strings(out)
	return out
}

// ensureNamespaces creates, as the generator's service account, the target namespace of
// every preview about to be written that does not exist yet, labelled as the set's. A
// namespace that exists and is not the set's is refused: a set never deploys previews
// into a namespace it did not make.
func (r *Reconciler) ensureNamespaces(ctx context.Context, set *convergev1.SyncTargetSet, targets []*Target) error {
	g := namespaceCreator(set)
	if g == nil {
		return nil
	}
	for _, ns := range targetNamespaces(targets) {
		got := &corev1.Namespace{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Name: ns}, got)
		switch {
		case err == nil && got.Labels[PreviewOfLabel] == previewOf(set):
			continue
		case err == nil:
			return &foreignNamespaceError{fmt.Sprintf("namespace %q exists and is not this set's (label %s=%s): the set deploys previews only into namespaces it creates",
				ns, PreviewOfLabel, previewOf(set))}
		case !apierrors.IsNotFound(err):
			return err
		}
		c, err := r.accountClient(set.Namespace, g.ServiceAccountName)
		if err != nil {
			return err
		}
		err = c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
			Labels: map[string]string{PreviewOfLabel: previewOf(set)}}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the namespace %q as %s: %w", ns, g.ServiceAccountName, err)
		}
	}
	return nil
}

// dropNamespaces deletes, as the generator's service account, the namespaces the set
// created that none of keep's SyncTargets deploys into any more.
func (r *Reconciler) dropNamespaces(ctx context.Context, set *convergev1.SyncTargetSet, keep []*Target) error {
	g := namespaceCreator(set)
	if g == nil {
		return nil
	}
	list := &corev1.NamespaceList{}
	if err := r.APIReader.List(ctx, list, client.MatchingLabels{PreviewOfLabel: previewOf(set)}); err != nil {
		return err
	}
	used := map[string]bool{}
	for _, ns := range targetNamespaces(keep) {
		used[ns] = true
	}
	for i := range list.Items {
		ns := &list.Items[i]
		if used[ns.Name] || ns.DeletionTimestamp != nil {
			continue
		}
		c, err := r.accountClient(set.Namespace, g.ServiceAccountName)
		if err != nil {
			return err
		}
		if err := client.IgnoreNotFound(c.Delete(ctx, ns, client.Preconditions{UID: &ns.UID})); err != nil {
			return fmt.Errorf("deleting the namespace %q as %s: %w", ns.Name, g.ServiceAccountName, err)
		}
	}
	return nil
}

// accountClient is a client acting as a service account.
func (r *Reconciler) accountClient(ns, name string) (client.Client, error) {
	if r.accounts == nil {
		return nil, fmt.Errorf("no API server configuration to act as the service account %s", name)
	}
	return r.accounts.client(ns, name)
}
