package diff

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/converge-gitops/converge/sync/render"
)

// RenderOptions say what to render and for which SyncTarget, as the daemon would.
type RenderOptions struct {
	// Root is the directory reads are confined to: the checkout, or the local repository.
	Root string
	// Path is the directory or file to render, slash-separated, relative to Root.
	Path string
	// TargetNamespace becomes the namespace of every namespaced object when set.
	TargetNamespace string
	// OwnerName and OwnerNamespace name the SyncTarget whose owner labels the objects
	// get; both empty, they get none.
	OwnerName, OwnerNamespace string
	// Decryption decrypts SOPS-encrypted files as the daemon does (render.KeysFor); nil,
	// an encrypted file fails the render.
	Decryption *render.Keys
	// Substitute, when set, substitutes the SyncTarget's spec.postBuild variables (read
	// with postbuild.Read) as the daemon does.
	Substitute *render.Substitution
}

// Render renders opts with the daemon's renderer. mapper, when set, tells the scope of
// custom kinds already installed in the cluster (as the daemon's RESTMapper does); nil,
// kinds that are neither built in nor defined by a rendered CRD are taken as namespaced.
func Render(ctx context.Context, mapper meta.RESTMapper, opts RenderOptions) ([]*unstructured.Unstructured, error) {
	ro := render.Options{
		Root:            opts.Root,
		Path:            opts.Path,
		TargetNamespace: opts.TargetNamespace,
		OwnerName:       opts.OwnerName,
		OwnerNamespace:  opts.OwnerNamespace,
		Decryption:      opts.Decryption,
		Substitute:      opts.Substitute,
	}
	if mapper != nil {
		ro.IsNamespaced = func(gvk schema.GroupVersionKind) (bool, error) {
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
	res, err := render.Render(ctx, ro)
	if err != nil {
		return nil, err
	}
	return res.Objects, nil
}

// LocalRoot splits a local directory (or manifest file) into the root that reads are
// confined to and the path below it: the root is the enclosing Git work tree, as the
// daemon confines a render to its checkout, so that an overlay may refer to ../base; a
// path outside any work tree is its own root.
func LocalRoot(path string) (root, rel string, err error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", "", err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", "", fmt.Errorf("%s does not exist", path)
		}
		return "", "", err
	}
	dir := abs
	if !fi.IsDir() {
		dir = filepath.Dir(abs)
	}
	root = dir
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(filepath.Join(d, ".git")); err == nil {
			root = d
			break
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	rel, err = filepath.Rel(root, abs)
	if err != nil {
		return "", "", err
	}
	return root, filepath.ToSlash(rel), nil
}

// WriteManifests writes objects as a multi-document YAML stream, in order.
func WriteManifests(w io.Writer, objects []*unstructured.Unstructured) error {
	for i, o := range objects {
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			return fmt.Errorf("%s: %w", describe(o), err)
		}
		if i > 0 {
			if _, err := io.WriteString(w, "---\n"); err != nil {
				return err
			}
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}
