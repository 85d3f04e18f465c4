// Package postbuild reads the variables of a SyncTarget's spec.postBuild, for the daemon
// and the CLI alike; sync/render substitutes them.
package postbuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/render"
)

// ErrReferentNotFound: a ConfigMap or Secret that spec.postBuild.substituteFrom names,
// without optional, does not exist (yet).
var ErrReferentNotFound = errors.New("not found")

// Variables are what the substitution of one SyncTarget needs, and the Helm values its
// spec.helm.valuesFrom reads.
type Variables struct {
	// Substitution is nil when the SyncTarget has no spec.postBuild.
	Substitution *render.Substitution
	// Values are the layers of spec.helm.valuesFrom, in order.
	Values []ValuesLayer
	// Sensitive are the strings read from Secrets (variables and values): callers
	// redact them from every message.
	Sensitive []string
	// Digest is "sha256:<hex>" over what substituteFrom and valuesFrom read (names,
	// kinds and values, and which optional referents were missing): it changes when they
	// change. Empty when both are empty. It is kept in memory only, never shown.
	Digest string
}

// Read reads the variables of st: the data of the ConfigMaps and Secrets of
// spec.postBuild.substituteFrom, in order (a later one wins), then spec.postBuild.substitute
// (which wins); and the values of spec.helm.valuesFrom. They are read from st's namespace
// with r, one Get each: give it a reader with the rights the SyncTarget acts with (the
// daemon impersonates its service account), not a cache. Keys that are not variable names
// are skipped. A missing referent is an error wrapping ErrReferentNotFound unless it is
// optional; errors name referents, never values.
func Read(ctx context.Context, r client.Reader, st *convergev1.SyncTarget) (Variables, error) {
	read := func(ctx context.Context, ref convergev1.SubstituteReference) (map[string]string, bool, error) {
		return readReferent(ctx, r, st.Namespace, ref)
	}
	h := sha256.New()
	out := Variables{}
	if pb := st.Spec.PostBuild; pb != nil {
		sub, err := readSubstitution(ctx, read, st, h)
		if err != nil {
			return Variables{}, err
		}
		out.Substitution, out.Sensitive = sub, sub.Sensitive
	}
	layers, sensitive, err := readValues(ctx, read, st, h)
	if err != nil {
		return Variables{}, err
	}
	out.Values, out.Sensitive = layers, append(out.Sensitive, sensitive...)
	if (st.Spec.PostBuild != nil && len(st.Spec.PostBuild.SubstituteFrom) > 0) || len(layers) > 0 ||
		(st.Spec.Helm != nil && len(st.Spec.Helm.ValuesFrom) > 0) {
		out.Digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
	}
	return out, nil
}

// readSubstitution reads spec.postBuild, adding what substituteFrom read to h.
func readSubstitution(ctx context.Context, read readerFunc, st *convergev1.SyncTarget, h hash.Hash) (*render.Substitution, error) {
	pb := st.Spec.PostBuild
	vars := map[string]string{}
	var sensitive []string
	for i, ref := range pb.SubstituteFrom {
		data, found, err := read(ctx, ref)
		if err != nil {
			return nil, fmt.Errorf("spec.postBuild.substituteFrom[%d]: %w", i, err)
		}
		writeDigest(h, ref, found, data)
		for k, v := range data {
			if isName(k) {
				vars[k] = v
				if ref.Kind == "Secret" {
					sensitive = append(sensitive, v)
				}
			}
		}
	}
	for k, v := range pb.Substitute {
		vars[k] = v
	}
	return &render.Substitution{Vars: vars, Strict: st.SubstitutionStrict(), Sensitive: sensitive}, nil
}

// readReferent returns the data of one referent, and whether it exists.
func readReferent(ctx context.Context, r client.Reader, namespace string, ref convergev1.SubstituteReference) (map[string]string, bool, error) {
	key := client.ObjectKey{Namespace: namespace, Name: ref.Name}
	var data map[string]string
	var err error
	switch ref.Kind {
	case "ConfigMap":
		cm := &corev1.ConfigMap{}
		if err = r.Get(ctx, key, cm); err == nil {
			data = cm.Data
		}
	case "Secret":
		s := &corev1.Secret{}
		if err = r.Get(ctx, key, s); err == nil {
			data = make(map[string]string, len(s.Data))
			for k, v := range s.Data {
				data[k] = string(v)
			}
		}
	default:
		return nil, false, fmt.Errorf("kind %q is neither ConfigMap nor Secret", ref.Kind)
	}
	switch {
	case apierrors.IsNotFound(err) && ref.Optional:
		return nil, false, nil
	case apierrors.IsNotFound(err):
		return nil, false, fmt.Errorf("%s %s/%s %w", ref.Kind, namespace, ref.Name, ErrReferentNotFound)
	case err != nil:
		return nil, false, fmt.Errorf("reading %s %s/%s: %w", ref.Kind, namespace, ref.Name, err)
	}
	return data, true, nil
}

// writeDigest adds one referent to the digest, keys sorted, every field length-prefixed.
func writeDigest(h interface{ Write([]byte) (int, error) }, ref convergev1.SubstituteReference, found bool, data map[string]string) {
	field := func(s string) { _, _ = fmt.Fprintf(h, "%d:%s", len(s), s) }
	field(ref.Kind)
	field(ref.Name)
	if !found {
		field("-")
		return
	}
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	field(fmt.Sprint(len(keys)))
	for _, k := range keys {
		field(k)
		field(data[k])
	}
}

// isName reports whether k can be referenced as ${k}.
func isName(k string) bool {
	for i := 0; i < len(k); i++ {
		c := k[i]
		ok := c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9')
		if !ok {
			return false
		}
	}
	return k != ""
}
