// Package target turns a SyncTarget into what a sync of it needs: its source with
// credentials, the keys its revisions must be signed with, the options of its render
// (SOPS keys, post-build variables, namespacing) and the rules of its prune. The daemon,
// `converge diff` and `converge build` and the web UI's pending diff all read a SyncTarget
// through it, so that what they preview is what the daemon does.
//
// Every read is of the SyncTarget's own namespace, by name, with the reader given: the
// daemon's own reader for credentials and keys, the SyncTarget's (impersonated) client for
// variables; the CLI passes the user's client for all of them.
package target

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sync/apply"
	"github.com/converge-gitops/converge/sync/helm"
	"github.com/converge-gitops/converge/sync/postbuild"
	"github.com/converge-gitops/converge/sync/render"
)

// Inputs reads the inputs of one SyncTarget.
type Inputs struct {
	// Target is the SyncTarget.
	Target *convergev1.SyncTarget
	// Reader reads the Secrets its spec names: source credentials, trusted keys, SOPS keys.
	Reader client.Reader
	// Mapper tells the scope of kinds installed in the cluster; nil takes the kinds that
	// are neither built in nor defined by a rendered CRD as namespaced.
	Mapper meta.RESTMapper
}

// For returns the Inputs of st, read with r, kinds scoped by mapper (may be nil).
func For(st *convergev1.SyncTarget, r client.Reader, mapper meta.RESTMapper) Inputs {
	return Inputs{Target: st, Reader: r, Mapper: mapper}
}

// Key is the SyncTarget's namespace and name.
func (in Inputs) Key() types.NamespacedName {
	return types.NamespacedName{Namespace: in.Target.Namespace, Name: in.Target.Name}
}

// Source is the SyncTarget's source, with the credentials of spec.source.secretRef.
func (in Inputs) Source(ctx context.Context) (sources.Source, error) {
	st := in.Target
	src := sources.Source{URL: st.Spec.Source.URL, Ref: sources.Ref(st.Spec.Source.Ref)}
	ref := st.Spec.Source.SecretRef
	if ref == nil {
		return src, nil
	}
	data, err := in.secret(ctx, "source credentials", ref.Name)
	if err != nil {
		return src, err
	}
	auth, err := sources.AuthFromSecret(data, src.URL)
	if err != nil {
		return src, fmt.Errorf("source credentials secret %s/%s: %w", st.Namespace, ref.Name, err)
	}
	src.Auth = auth
	return src, nil
}

// TrustedKeys are the keys of spec.source.verify's Secret; nil when the SyncTarget does
// not ask for signed revisions.
func (in Inputs) TrustedKeys(ctx context.Context) (*sources.TrustedKeys, error) {
	v := in.Target.Spec.Source.Verify
	if v == nil {
		return nil, nil
	}
	data, err := in.secret(ctx, "trusted keys", v.SecretRef.Name)
	if err != nil {
		return nil, err
	}
	keys, err := sources.TrustedKeysFromSecret(data)
	if err != nil {
		return nil, fmt.Errorf("trusted keys secret %s/%s: %w", in.Target.Namespace, v.SecretRef.Name, err)
	}
	return keys, nil
}

// secret reads the data of the Secret name of the SyncTarget's namespace; what says
// what it holds, for the error. A missing Secret is an error that says so and wraps the
// API server's NotFound.
func (in Inputs) secret(ctx context.Context, what, name string) (map[string][]byte, error) {
	ns := in.Target.Namespace
	data, err := in.secretData(ctx, ns, name)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("the %s secret %s/%s does not exist: %w", what, ns, name, err)
	case err != nil:
		return nil, fmt.Errorf("reading the %s secret %s/%s: %w", what, ns, name, err)
	}
	return data, nil
}

// secretData reads the data of a Secret (for render.KeysFor too).
func (in Inputs) secretData(ctx context.Context, namespace, name string) (map[string][]byte, error) {
	if in.Reader == nil {
		return nil, errors.New("no Secret reader configured")
	}
	s := &corev1.Secret{}
	if err := in.Reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, s); err != nil {
		return nil, err
	}
	return s.Data, nil
}

// Variables reads the variables of spec.postBuild with r: give it a client with the
// rights the SyncTarget acts with (the daemon impersonates its service account).
func (in Inputs) Variables(ctx context.Context, r client.Reader) (postbuild.Variables, error) {
	return postbuild.Read(ctx, r, in.Target)
}

// RenderOptions are the options the SyncTarget renders with from the tree at root: its
// path, target namespace and owner labels, the SOPS keys of spec.decryption, the scope of
// kinds, vars (the spec.postBuild variables and spec.helm values) and, for a chart, the
// Helm options (release, values, CRD and hook policy; the caller sets Lookup). The caller
// sets the timeout.
func (in Inputs) RenderOptions(ctx context.Context, root string, vars postbuild.Variables) (render.Options, error) {
	st := in.Target
	opts := render.Options{
		Root:            root,
		Path:            st.Spec.Path,
		TargetNamespace: st.Spec.TargetNamespace,
		OwnerName:       st.Name,
		OwnerNamespace:  st.Namespace,
		Substitute:      vars.Substitution,
		IsNamespaced:    IsNamespaced(in.Mapper),
		Helm:            HelmOptions(st, vars),
	}
	keys, err := render.KeysFor(ctx, st, in.secretData)
	if err != nil {
		return opts, err
	}
	opts.Decryption = keys
	return opts, nil
}

// HelmOptions are the render options of the SyncTarget's chart (used when its path holds a
// Chart.yaml, or for spec.chart): the release is named spec.helm.releaseName (or the
// SyncTarget's name) in the target namespace (or the SyncTarget's); it is an upgrade once
// a revision was applied, and its .Release.Revision counts the attempts recorded.
func HelmOptions(st *convergev1.SyncTarget, vars postbuild.Variables) *render.HelmOptions {
	ns := st.Spec.TargetNamespace
	if ns == "" {
		ns = st.Namespace
	}
	o := &render.HelmOptions{ReleaseName: st.ReleaseName(), Namespace: ns,
		IsUpgrade: st.Status.LastAppliedRevision != "", Revision: ReleaseRevision(st),
		SkipCRDs: st.CRDPolicy() == convergev1.CRDsSkip}
	if h := st.Spec.Helm; h != nil {
		o.ValuesFiles, o.DisableHooks = h.ValuesFiles, h.DisableHooks
		if h.Values != nil {
			o.Inline = h.Values.Raw
		}
	}
	for _, l := range vars.Values {
		o.Values = append(o.Values, helm.ValuesSource{Name: l.Name, Data: l.Data, TargetPath: l.TargetPath, Sensitive: l.Sensitive})
	}
	return o
}

// ReleaseRevision is the .Release.Revision st's chart renders with next: one more than
// the attempts recorded (status.attempts, or the history's length where a status written
// before the counter has more).
func ReleaseRevision(st *convergev1.SyncTarget) int {
	return int(max(st.Status.Attempts, int64(len(st.Status.History)))) + 1
}

// IsNamespaced tells the scope of a kind from mapper, for render.Options: a kind the
// cluster does not know is taken as namespaced. Nil for a nil mapper.
func IsNamespaced(mapper meta.RESTMapper) func(schema.GroupVersionKind) (bool, error) {
	if mapper == nil {
		return nil
	}
	return func(gvk schema.GroupVersionKind) (bool, error) {
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			if meta.IsNoMatchError(err) {
				return true, nil
			}
			return false, err
		}
		return m.Scope.Name() == meta.RESTScopeNameNamespace, nil
	}
}

// Prune is what a SyncTarget's prune may delete.
type Prune struct {
	// Enabled is spec.prune.
	Enabled bool
	// AllowEmpty is spec.allowEmpty: without it a revision that renders nothing may not
	// prune everything.
	AllowEmpty bool
	// MaxDeletions is spec.maxDeletions; nil allows any number.
	MaxDeletions *intstr.IntOrString
}

// PruneRules are the SyncTarget's prune rules.
func (in Inputs) PruneRules() Prune {
	s := in.Target.Spec
	return Prune{Enabled: s.Prune, AllowEmpty: s.AllowEmpty, MaxDeletions: s.MaxDeletions}
}

// Stale returns what a prune from previous to rendered (the inventory of rendered
// objects, of which there are count) deletes: nothing when prune is off. It refuses, before
// anything is applied, a revision that renders nothing and would prune everything
// (apply.ErrWouldPruneAll, unless AllowEmpty) and one that would prune more than
// MaxDeletions allows (apply.ErrTooManyDeletions). Errors read after their subject
// ("revision X " + message).
func (p Prune) Stale(previous, rendered *convergev1.ResourceInventory, count int) ([]convergev1.InventoryEntry, error) {
	if !p.Enabled {
		return nil, nil
	}
	stale := apply.Stale(previous, rendered)
	if err := apply.GuardEmpty(count, stale, p.AllowEmpty); err != nil {
		return nil, err
	}
	applied := 0
	if previous != nil {
		applied = len(previous.Entries)
	}
	if err := apply.GuardDeletions(stale, applied, p.MaxDeletions); err != nil {
		return nil, err
	}
	return stale, nil
}
