package render

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	yaml "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/scheme"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/crdkinds"
)

// Limits cap the work one render may do, so that a hostile or broken repository
// fails fast with bounded memory instead of stalling the daemon. A zero field takes
// its default from DefaultLimits.
type Limits struct {
	// MaxFileSize is the largest file read, in bytes.
	MaxFileSize int64
	// MaxTotalBytes bounds the bytes read by one render.
	MaxTotalBytes int64
	// MaxFiles bounds the files read by one render, and separately the directory
	// entries a plain-YAML walk visits (file-count bombs).
	MaxFiles int
	// MaxDocuments bounds the YAML documents read, and the objects rendered.
	MaxDocuments int
	// MaxDepth bounds the nesting of mappings and sequences in one document.
	MaxDepth int
	// MaxAliasNodes bounds the nodes that YAML aliases expand to in one document
	// ("billion laughs").
	MaxAliasNodes int
}

// DefaultLimits are generous for real repositories (a large CRD is a few MiB and
// nests a few dozen levels) and small enough to keep one render within tens of MiB.
func DefaultLimits() Limits {
	return Limits{
		MaxFileSize:   8 << 20,
		MaxTotalBytes: 128 << 20,
		MaxFiles:      20_000,
		MaxDocuments:  20_000,
		MaxDepth:      128,
		MaxAliasNodes: 10_000,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxFileSize <= 0 {
		l.MaxFileSize = d.MaxFileSize
	}
	if l.MaxTotalBytes <= 0 {
		l.MaxTotalBytes = d.MaxTotalBytes
	}
	if l.MaxFiles <= 0 {
		l.MaxFiles = d.MaxFiles
	}
	if l.MaxDocuments <= 0 {
		l.MaxDocuments = d.MaxDocuments
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = d.MaxDepth
	}
	if l.MaxAliasNodes <= 0 {
		l.MaxAliasNodes = d.MaxAliasNodes
	}
	return l
}

// Options say what to render, and for which SyncTarget.
type Options struct {
	// Root is the checkout: a directory that may be shared, read-only, by many
	// SyncTargets. It is read in place — never copied, unpacked or written — and
	// nothing outside it is ever read.
	Root string
	// Path is the directory (or single manifest file) to render, relative to Root,
	// slash-separated; "" or "." is Root itself. A directory holding
	// kustomization.yaml, kustomization.yml or Kustomization is built with
	// kustomize; any other directory has its *.yaml, *.yml and *.json files read,
	// recursively, in lexical order, skipping names that start with a dot.
	Path string
	// TargetNamespace, when set, becomes metadata.namespace of every namespaced object.
	TargetNamespace string
	// OwnerName and OwnerNamespace name the SyncTarget. When set (both or neither),
	// every object gets the labels converge.dev/name and converge.dev/namespace.
	OwnerName      string
	OwnerNamespace string
	// IsNamespaced reports the scope of kinds that are neither built into Kubernetes
	// nor defined by a CustomResourceDefinition in the same render (a RESTMapper
	// answers it). Nil, such kinds are taken to be namespaced. An error fails the render.
	IsNamespaced func(schema.GroupVersionKind) (bool, error) `json:"-"`
	// Limits cap the work of one render; zero fields take DefaultLimits.
	Limits Limits
	// Timeout bounds the whole render (DefaultTimeout when zero or negative). A render
	// that runs out of time fails with ErrRenderTimeout ("render exceeded 2m0s").
	Timeout time.Duration
	// Decryption, when set, decrypts SOPS-encrypted files in memory as they are read
	// (an empty Keys decrypts nothing: every encrypted file then fails naming its
	// recipients). Nil, an encrypted file fails the render with ErrDecryption.
	Decryption *Keys `json:"-"`
	// Substitute, when set, replaces ${var} in the rendered objects (spec.postBuild),
	// before they are validated, labelled and sorted; see Substitution.
	Substitute *Substitution
	// Helm, when set, renders a Path holding Chart.yaml (and no kustomization) as a Helm
	// chart with these options. Nil, such a directory is read as plain manifests.
	Helm *HelmOptions
	// KeepSensitive fills Result.Sensitive: for a caller that shows rendered objects where
	// masking Secrets is not enough. The daemon's own renders leave it false, so that their
	// results, kept in memory, hold no more copies of secret values than the objects do.
	KeepSensitive bool

	// readHook, when set (tests only), runs before every file read with the
	// render's context and the file's path relative to Root.
	readHook func(ctx context.Context, rel string)
}

// DefaultTimeout bounds a render when Options.Timeout is not set: far above what a
// large repository needs (seconds), and short enough that a render stuck on a slow
// or hostile file system frees its worker.
const DefaultTimeout = 2 * time.Minute

// Result is a rendered set of objects.
type Result struct {
	// Objects are the rendered objects, target namespace and owner labels set,
	// CustomResourceDefinitions first, then Namespaces, then all others ordered by
	// group, kind, namespace and name. The order does not depend on file layout.
	Objects []*unstructured.Unstructured
	// Digest is "sha256:<hex>" over the canonical JSON of Objects in order. Two
	// renders with equal digests would apply exactly the same objects, so a
	// reconciler can skip a no-op apply.
	Digest string
	// Kustomized is true when Path was built with kustomize.
	Kustomized bool
	// Chart is true when Path was rendered as a Helm chart.
	Chart bool
	// Sensitive, when Options.KeepSensitive asked for it, are the values the render read
	// that must never be shown: every value decrypted from a SOPS file and every value of
	// a Secret in the files read (and, for data, its decoded text). A caller that shows
	// rendered objects beyond a Secret's masking (a pull request's comment) redacts them.
	// It is not part of Digest.
	Sensitive []string
	// Values, for a chart rendered with HelmOptions.ShowValues, are its values as a
	// person may see them. Not part of Digest.
	Values *ChartValues `json:",omitempty"`
}

// How a path was built.
const (
	builtPlain = iota
	builtKustomize
	builtChart
)

// digestVersion changes when the rendering of equal input changes, so that digests
// kept from an older converge never match a newer rendering.
const digestVersion = "converge.dev/render/v1\n"

// kustomizationFileNames are the names kustomize recognises, in its order.
var kustomizationFileNames = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

// item is a rendered object and where it came from, for error messages.
type item struct {
	obj  *unstructured.Unstructured
	file string // slash path relative to the root
	doc  int    // 1-based document index, 0 for kustomize output
	what string // extra locator ("item 3 of the List", "object 7 of the kustomize output")
	// node is the YAML the object was decoded from, when known: substitution reads in it
	// which scalars were plain (see Substitution).
	node *yaml.Node
}

func (it item) err(err error) error {
	if it.what != "" {
		err = fmt.Errorf("%s: %w", it.what, err)
	}
	return docErr(it.file, it.doc, err)
}

// Render reads opts.Path under opts.Root, builds it with kustomize when it holds a
// kustomization or reads its manifests otherwise, then sets the target namespace and
// the owner labels. Paths, `..` and symlinks are confined to Root; kustomize gets no
// remote bases, plugins, functions, helm or exec, and nothing it is handed can make it
// fetch a URL or run git. The render runs under opts.Timeout. Any failure returns a
// *Error (the commit's fault: BuildFailed) and no objects — except cancellation of
// ctx, which returns ctx.Err(). Render is safe for concurrent use; it starts no
// goroutine and never writes to Root or anywhere else.
func Render(ctx context.Context, opts Options) (*Result, error) {
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := renderWithin(rctx, opts)
	if rctx.Err() != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// Whatever kustomize made of the file system refusing every call after the
		// deadline, the render ran out of time; and nothing built late is returned.
		return nil, &Error{Err: timeoutError{after: timeout}}
	}
	return res, err
}

// renderWithin is Render under the render's own deadline: the confined file system
// fails every call once ctx is done, so kustomize stops at its next read.
func renderWithin(ctx context.Context, opts Options) (*Result, error) {
	limits := opts.Limits.withDefaults()
	if err := validateOptions(opts); err != nil {
		return nil, &Error{Err: err}
	}
	root, err := os.OpenRoot(opts.Root)
	if err != nil {
		return nil, &Error{Err: fmt.Errorf("%w: open checkout: %s", ErrNotFound, errText(err))}
	}
	defer func() { _ = root.Close() }()
	cfs := newConfinedFS(ctx, root, limits)
	cfs.readHook = opts.readHook
	cfs.keys = opts.Decryption

	display := cleanDisplay(opts.Path)
	items, how, err := renderItems(ctx, cfs, display, opts)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(items) > limits.MaxDocuments {
		return nil, fileErr(display, classErr(ErrLimitExceeded, "more than %d objects", limits.MaxDocuments))
	}
	if opts.Substitute != nil {
		if err := substitute(items, *opts.Substitute, limits, display); err != nil {
			return nil, err
		}
	}
	if err := finish(items, opts, limits); err != nil {
		return nil, err
	}
	objs := make([]*unstructured.Unstructured, len(items))
	for i := range items {
		objs[i] = items[i].obj
	}
	digest, err := Digest(objs)
	if err != nil {
		return nil, &Error{File: display, Err: err}
	}
	res := &Result{Objects: objs, Digest: digest, Kustomized: how == builtKustomize, Chart: how == builtChart}
	if opts.KeepSensitive {
		res.Sensitive = cfs.secretValues()
	}
	res.Values = cfs.shown
	return res, nil
}

// IsChart says whether Render renders path of the checkout at root as a Helm chart (given
// Helm options): a directory holding a Chart.yaml and no kustomization. It reads as
// Render does, confined to root; a path it cannot read is no chart.
func IsChart(root, path string) bool {
	r, err := os.OpenRoot(root)
	if err != nil {
		return false
	}
	defer func() { _ = r.Close() }()
	cfs := newConfinedFS(context.Background(), r, Limits{}.withDefaults())
	start, err := cfs.resolve(cleanDisplay(path))
	if err != nil || !start.info.IsDir() {
		return false
	}
	if kfile, err := findKustomization(cfs, start.rel); err != nil || kfile != "" {
		return false
	}
	chart, err := isChart(cfs, start.rel)
	return err == nil && chart
}

// renderItems builds the objects at display: with kustomize when it is a directory holding
// a kustomization, as plain manifests otherwise.
func renderItems(ctx context.Context, cfs *confinedFS, display string, opts Options) (items []item, how int, err error) {
	start, err := cfs.resolve(display)
	if err != nil {
		return nil, builtPlain, fileErr(display, err)
	}
	if start.info.IsDir() {
		kfile, err := findKustomization(cfs, start.rel)
		if err != nil {
			return nil, builtPlain, fileErr(display, err)
		}
		if kfile != "" {
			items, err = renderKustomize(ctx, cfs, start.rel, display)
			return items, builtKustomize, err
		}
		chart, err := isChart(cfs, start.rel)
		if err != nil {
			return nil, builtPlain, fileErr(display, err)
		}
		if chart && opts.Helm != nil {
			items, err = renderChart(ctx, cfs, opts.Root, start, display, opts.Helm)
			return items, builtChart, err
		}
	}
	items, err = renderPlain(ctx, cfs, start, display)
	return items, builtPlain, err
}

func validateOptions(opts Options) error {
	if opts.Root == "" {
		return classErr(ErrInvalidOptions, "no checkout root")
	}
	if opts.TargetNamespace != "" {
		if errs := validation.IsDNS1123Label(opts.TargetNamespace); len(errs) > 0 {
			return classErr(ErrInvalidOptions, "target namespace %q: %s", opts.TargetNamespace, strings.Join(errs, "; "))
		}
	}
	if (opts.OwnerName == "") != (opts.OwnerNamespace == "") {
		return classErr(ErrInvalidOptions, "owner name and namespace must be set together")
	}
	for _, v := range []string{opts.OwnerName, opts.OwnerNamespace} {
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return classErr(ErrInvalidOptions, "owner %q is not a valid label value: %s", v, strings.Join(errs, "; "))
		}
	}
	return nil
}

// cleanDisplay turns Path into a clean slash path ("." for the root). It does not
// clamp: "../x" stays "../x", and resolving it fails with ErrOutsideRoot.
func cleanDisplay(p string) string {
	return path.Clean(filepath.ToSlash(p))
}

// findKustomization returns the kustomization file name in directory rel, or "".
func findKustomization(cfs *confinedFS, rel string) (string, error) {
	found := ""
	for _, name := range kustomizationFileNames {
		r, err := cfs.resolve(path.Join(rel, name))
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return "", err
		}
		if r.info.IsDir() {
			continue
		}
		if found != "" {
			return "", classErr(ErrKustomize, "both %s and %s exist", found, name)
		}
		found = name
	}
	return found, nil
}

// finish validates the objects, applies scope, target namespace and owner labels,
// rejects duplicates and sorts.
func finish(items []item, opts Options, limits Limits) error {
	for _, it := range items {
		nameGenerated(it.obj)
		if err := validateObject(it.obj.Object, limits); err != nil {
			return it.err(err)
		}
	}
	scope := newScopeResolver(items, opts.IsNamespaced)
	for _, it := range items {
		namespaced, err := scope.namespaced(it.obj.GroupVersionKind())
		if err != nil {
			return it.err(err)
		}
		switch {
		case !namespaced:
			it.obj.SetNamespace("")
		case opts.TargetNamespace != "":
			it.obj.SetNamespace(opts.TargetNamespace)
		}
		if opts.OwnerName != "" {
			labels := it.obj.GetLabels()
			if labels == nil {
				labels = map[string]string{}
			}
			labels[convergev1.NameLabel] = opts.OwnerName
			labels[convergev1.NamespaceLabel] = opts.OwnerNamespace
			it.obj.SetLabels(labels)
		}
	}
	seen := make(map[objectID]item, len(items))
	for _, it := range items {
		id := idOf(it.obj)
		if prev, dup := seen[id]; dup {
			return it.err(classErr(ErrDuplicateObject, "%s is also defined by %s", id, prev.where()))
		}
		seen[id] = it
	}
	sort.SliceStable(items, func(i, j int) bool { return lessObject(items[i].obj, items[j].obj) })
	return nil
}

func (it item) where() string {
	s := it.file
	if it.doc > 0 {
		s = fmt.Sprintf("%s document %d", s, it.doc)
	}
	if it.what != "" {
		s += " (" + it.what + ")"
	}
	return s
}

// objectID identifies an object the way the API server does: versions of one kind
// are the same object.
type objectID struct {
	group, kind, namespace, name string
}

func idOf(u *unstructured.Unstructured) objectID {
	gvk := u.GroupVersionKind()
	return objectID{group: gvk.Group, kind: gvk.Kind, namespace: u.GetNamespace(), name: u.GetName()}
}

func (id objectID) String() string {
	gk := id.kind
	if id.group != "" {
		gk = id.kind + "." + id.group
	}
	if id.namespace == "" {
		return gk + " " + id.name
	}
	return gk + " " + id.namespace + "/" + id.name
}

// rank puts the objects others depend on first: CRDs, then Namespaces.
func rank(u *unstructured.Unstructured) int {
	gvk := u.GroupVersionKind()
	switch {
	case crdkinds.Is(u):
		return 0
	case gvk.Group == "" && gvk.Kind == "Namespace":
		return 1
	}
	return 2
}

func lessObject(a, b *unstructured.Unstructured) bool {
	if ra, rb := rank(a), rank(b); ra != rb {
		return ra < rb
	}
	ia, ib := idOf(a), idOf(b)
	if ia.group != ib.group {
		return ia.group < ib.group
	}
	if ia.kind != ib.kind {
		return ia.kind < ib.kind
	}
	if ia.namespace != ib.namespace {
		return ia.namespace < ib.namespace
	}
	return ia.name < ib.name
}

// Digest returns "sha256:<hex>" over the canonical JSON (sorted keys) of objs, in
// order, each prefixed by its length.
func Digest(objs []*unstructured.Unstructured) (string, error) {
	h := sha256.New()
	_, _ = h.Write([]byte(digestVersion))
	for _, o := range objs {
		b, err := json.Marshal(o.Object)
		if err != nil {
			return "", fmt.Errorf("%w: %s: %s", ErrInvalidObject, idOf(o), err.Error())
		}
		_, _ = fmt.Fprintf(h, "%d\n", len(b))
		_, _ = h.Write(b)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// validateObject checks what every object needs before it can be labelled,
// identified and applied. Messages name fields, never values other than names.
func validateObject(m map[string]any, limits Limits) error {
	if err := checkDepth(m, 1, limits.MaxDepth); err != nil {
		return err
	}
	apiVersion, ok := m["apiVersion"].(string)
	if !ok || apiVersion == "" {
		return classErr(ErrInvalidObject, "missing apiVersion")
	}
	if _, err := schema.ParseGroupVersion(apiVersion); err != nil {
		return classErr(ErrInvalidObject, "invalid apiVersion %q", apiVersion)
	}
	kind, ok := m["kind"].(string)
	if !ok || kind == "" {
		return classErr(ErrInvalidObject, "missing kind")
	}
	meta, ok := m["metadata"].(map[string]any)
	if !ok {
		return classErr(ErrInvalidObject, "%s: missing metadata", kind)
	}
	name, ok := meta["name"].(string)
	if !ok || name == "" {
		return classErr(ErrInvalidObject, "%s: missing metadata.name", kind)
	}
	if !validPathSegment(name) {
		return classErr(ErrInvalidObject, "%s %q: invalid metadata.name", kind, name)
	}
	if ns, present := meta["namespace"]; present && ns != nil {
		s, ok := ns.(string)
		if !ok {
			return classErr(ErrInvalidObject, "%s %q: metadata.namespace is not a string", kind, name)
		}
		if s != "" {
			if errs := validation.IsDNS1123Label(s); len(errs) > 0 {
				return classErr(ErrInvalidObject, "%s %q: invalid metadata.namespace %q", kind, name, s)
			}
		}
	}
	for _, field := range []string{"labels", "annotations"} {
		v, present := meta[field]
		if !present || v == nil {
			continue
		}
		mm, ok := v.(map[string]any)
		if !ok {
			return classErr(ErrInvalidObject, "%s %q: metadata.%s is not a mapping", kind, name, field)
		}
		for k, val := range mm {
			if _, ok := val.(string); !ok {
				return classErr(ErrInvalidObject, "%s %q: metadata.%s[%q] is not a string", kind, name, field, k)
			}
		}
	}
	return nil
}

// validPathSegment accepts names the API server can address: not "." or "..", no
// "/" or "%". Kinds differ in what else they allow; the API server judges the rest.
func validPathSegment(name string) bool {
	return name != "." && name != ".." && !strings.ContainsAny(name, "/%")
}

func checkDepth(v any, depth, max int) error {
	if depth > max {
		return classErr(ErrLimitExceeded, "object nests deeper than %d levels", max)
	}
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			if err := checkDepth(e, depth+1, max); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range x {
			if err := checkDepth(e, depth+1, max); err != nil {
				return err
			}
		}
	}
	return nil
}

// scopeResolver decides whether a kind is namespaced: built-in kinds from the table
// and the client-go scheme, custom kinds from CRDs rendered alongside, then the
// caller's IsNamespaced, else namespaced.
type scopeResolver struct {
	crds   map[schema.GroupKind]bool // namespaced?
	lookup func(schema.GroupVersionKind) (bool, error)
	cache  map[schema.GroupVersionKind]bool
}

func newScopeResolver(items []item, lookup func(schema.GroupVersionKind) (bool, error)) *scopeResolver {
	s := &scopeResolver{crds: map[schema.GroupKind]bool{}, lookup: lookup, cache: map[schema.GroupVersionKind]bool{}}
	for _, it := range items {
		if !crdkinds.Is(it.obj) {
			continue
		}
		group, _, _ := unstructured.NestedString(it.obj.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(it.obj.Object, "spec", "names", "kind")
		sc, _, _ := unstructured.NestedString(it.obj.Object, "spec", "scope")
		if kind != "" {
			s.crds[schema.GroupKind{Group: group, Kind: kind}] = sc != "Cluster"
		}
	}
	return s
}

func (s *scopeResolver) namespaced(gvk schema.GroupVersionKind) (bool, error) {
	if v, ok := s.cache[gvk]; ok {
		return v, nil
	}
	v, err := s.decide(gvk)
	if err != nil {
		return false, err
	}
	s.cache[gvk] = v
	return v, nil
}

func (s *scopeResolver) decide(gvk schema.GroupVersionKind) (bool, error) {
	gk := gvk.GroupKind()
	if clusterScoped[gk] {
		return false, nil
	}
	if scheme.Scheme.Recognizes(gvk) {
		return true, nil
	}
	if v, ok := s.crds[gk]; ok {
		return v, nil
	}
	if s.lookup != nil {
		v, err := s.lookup(gvk)
		if err != nil {
			return false, fmt.Errorf("%w: scope of %s: %w", ErrInvalidObject, gvk.String(), err)
		}
		return v, nil
	}
	return true, nil
}

// isManifestName reports whether a plain-YAML walk reads the file.
func isManifestName(name string) bool {
	l := strings.ToLower(name)
	return strings.HasSuffix(l, ".yaml") || strings.HasSuffix(l, ".yml") || strings.HasSuffix(l, ".json")
}
