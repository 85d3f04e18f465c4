package render

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// plainWalk reads the manifests of a directory tree without kustomize.
type plainWalk struct {
	ctx   context.Context
	cfs   *confinedFS
	items []item
	docs  int
	// ancestors holds the resolved directories on the current walk path, to turn a
	// symlink back up the tree into an error instead of an endless walk.
	ancestors map[string]string
}

// renderPlain reads start, a file or a directory walked recursively in lexical order.
// Names starting with a dot (.git, .github, .gitlab-ci.yml, …) are skipped.
// Symlinks are followed when they resolve inside the root and are errors otherwise.
func renderPlain(ctx context.Context, cfs *confinedFS, start resolved, display string) ([]item, error) {
	w := &plainWalk{ctx: ctx, cfs: cfs, ancestors: map[string]string{}}
	var err error
	if start.info.IsDir() {
		err = w.dir(start, display)
	} else {
		err = w.file(start, display)
	}
	if err != nil {
		return nil, err
	}
	return w.items, nil
}

func (w *plainWalk) dir(r resolved, display string) error {
	if prev, loop := w.ancestors[r.rel]; loop {
		return fileErr(display, classErr(ErrSymlinkLoop, "directory %s leads back to %s", display, prev))
	}
	w.ancestors[r.rel] = display
	defer delete(w.ancestors, r.rel)

	entries, err := w.cfs.readDir(r)
	if err != nil {
		return fileErr(display, err)
	}
	for _, e := range entries {
		if err := w.ctx.Err(); err != nil {
			return err
		}
		if err := w.cfs.countEntry(); err != nil {
			return fileErr(display, err)
		}
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		childDisplay := path.Join(display, name)
		childRel := name
		if r.rel != "." {
			childRel = r.rel + "/" + name
		}
		child := resolved{rel: childRel}
		if e.Type()&fs.ModeSymlink != 0 {
			child, err = w.cfs.resolve(childRel)
			if errors.Is(err, ErrNotFound) && !isManifestName(name) {
				continue // a dangling link we would not read anyway
			}
			if err != nil {
				return fileErr(childDisplay, err)
			}
		} else {
			// The listing's type bits (d_type, or an lstat when the file system has
			// none) say regular file, directory or other; a FIFO is never opened.
			child.info = typeOnly{name: name, mode: e.Type()}
		}
		switch {
		case child.info.IsDir():
			if err := w.dir(child, childDisplay); err != nil {
				return err
			}
		case isManifestName(name):
			if err := w.file(child, childDisplay); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *plainWalk) file(r resolved, display string) error {
	for _, k := range kustomizationFileNames {
		if path.Base(display) == k {
			return fileErr(display, classErr(ErrInvalidObject,
				"a kustomization below the rendered path is not built; point the path at its directory"))
		}
	}
	data, err := w.cfs.readFile(r, display)
	if err != nil {
		return fileErr(display, err)
	}
	limits := w.cfs.limits
	docs, err := decodeDocuments(display, data, limits, limits.MaxDocuments-w.docs)
	if err != nil {
		return err
	}
	w.docs += len(docs)
	for _, d := range docs {
		m, ok := d.value.(map[string]any)
		if !ok {
			return docErr(display, d.index, classErr(ErrInvalidObject, "document is not a mapping"))
		}
		items, isList := m["items"].([]any)
		kind, _ := m["kind"].(string)
		if isList && strings.HasSuffix(kind, "List") {
			for i, raw := range items {
				im, ok := raw.(map[string]any)
				if !ok {
					return docErr(display, d.index, classErr(ErrInvalidObject, "item %d of the %s is not a mapping", i+1, kind))
				}
				w.items = append(w.items, item{
					obj: &unstructured.Unstructured{Object: im}, file: display, doc: d.index,
					what: fmt.Sprintf("item %d of the %s", i+1, kind), node: listItemNode(d.node, i),
				})
			}
			continue
		}
		w.items = append(w.items, item{obj: &unstructured.Unstructured{Object: m}, file: display, doc: d.index, node: d.node})
	}
	if len(w.items) > limits.MaxDocuments {
		return fileErr(display, classErr(ErrLimitExceeded, "more than %d objects", limits.MaxDocuments))
	}
	return nil
}
