package diff

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/converge-gitops/converge/sync/render"
	"github.com/converge-gitops/converge/sync/target"
)

// RenderOptions say what to render and for which SyncTarget, as the daemon would: the
// daemon's own render options (target.Inputs.RenderOptions builds a SyncTarget's).
type RenderOptions = render.Options

// pool is the render boundary of converge diff, build and the UI's pending diff: they
// render what a pull request holds, as hostile as what the daemon renders, so they render
// in worker processes too (this executable: its main calls render.ServeWorkerIfAsked).
var pool = sync.OnceValues(func() (*render.Pool, error) { return render.NewPool(render.PoolOptions{}) })

// Render renders opts with the daemon's renderer, behind the same boundary. mapper, when
// set and opts say nothing of the scope of kinds, tells the scope of custom kinds already
// installed in the cluster (as the daemon's RESTMapper does); nil, kinds that are neither
// built in nor defined by a rendered CRD are taken as namespaced.
func Render(ctx context.Context, mapper meta.RESTMapper, opts RenderOptions) ([]*unstructured.Unstructured, error) {
	res, err := RenderResult(ctx, mapper, opts)
	if err != nil {
		return nil, err
	}
	return res.Objects, nil
}

// RenderResult is Render with the whole result of the render.
func RenderResult(ctx context.Context, mapper meta.RESTMapper, opts RenderOptions) (*render.Result, error) {
	if opts.IsNamespaced == nil {
		opts.IsNamespaced = target.IsNamespaced(mapper)
	}
	p, err := pool()
	if err != nil {
		return nil, err
	}
	return p.Render(ctx, opts.OwnerNamespace, opts)
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
