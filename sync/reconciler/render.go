package reconciler

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/lru"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/cluster"
	"github.com/converge-gitops/converge/sync/postbuild"
	"github.com/converge-gitops/converge/sync/render"
	"github.com/converge-gitops/converge/sync/target"
)

// KustomizeRenderer is the Renderer of the daemon: kustomize, plain manifests or a Helm
// chart, read in place from the shared checkout, confined to it.
type KustomizeRenderer struct {
	// Mapper tells the scope of custom kinds already installed; nil takes them as namespaced.
	Mapper meta.RESTMapper
	// Timeout bounds one render (render.DefaultTimeout when zero); a render that runs
	// out of time fails with render.ErrRenderTimeout ("render exceeded 2m0s").
	Timeout time.Duration
	// Secrets reads a SyncTarget's decryption Secret, one by one by name (the manager's
	// API reader: Secrets are never listed or cached). Nil, a SyncTarget with
	// spec.decryption fails to render.
	Secrets client.Reader
	// Charts keeps the renders of charts; nil renders every time.
	Charts *ChartRenders
	// Pool, when set, renders in worker processes (the daemon's render boundary: what a
	// template does costs only its own SyncTarget); nil renders in this process.
	Pool *render.Pool
}

// Render implements Renderer.
func (k KustomizeRenderer) Render(ctx context.Context, st *convergev1.SyncTarget, to cluster.Destination, root string,
	vars postbuild.Variables) (*render.Result, error) {
	mapper, c := k.Mapper, to.Client
	if c != nil {
		if m := c.RESTMapper(); m != nil {
			mapper = m
		}
	}
	opts, err := target.For(st, k.Secrets, mapper).RenderOptions(ctx, root, vars)
	if err != nil {
		return nil, err
	}
	opts.Timeout = k.Timeout
	if opts.Helm != nil {
		if c != nil {
			opts.Helm.Lookup = target.Lookup(c)
		}
		if to.Capabilities != nil && render.IsChart(root, opts.Path) {
			caps, err := to.Capabilities()
			if err != nil {
				return nil, err
			}
			opts.Helm.KubeVersion, opts.Helm.APIVersions, opts.Helm.FromCluster = caps.KubeVersion, caps.APIVersions, true
		}
	}
	key := k.Charts.key(st, opts)
	if objs, ok := k.Charts.get(key); ok {
		return &render.Result{Objects: objs, Chart: true}, nil
	}
	res, err := k.render(ctx, st.Namespace, opts)
	if err != nil {
		return nil, err
	}
	if res.Chart {
		k.Charts.put(key, res.Objects)
	}
	return res, nil
}

func (k KustomizeRenderer) render(ctx context.Context, tenant string, opts render.Options) (*render.Result, error) {
	if k.Pool != nil {
		return k.Pool.Render(ctx, tenant, opts)
	}
	return render.Render(ctx, opts)
}

// ChartRenders keeps the objects a chart rendered, keyed by everything the render read
// but the release's revision and install/upgrade state: a chart drawing random values
// (randAlphaNum, genCA) then re-applies the objects it rendered the first time at every
// heal and idle reconcile, and only a new revision, new values or a new spec renders anew.
// It lives in memory: a restarted daemon renders once more.
type ChartRenders struct {
	mu    sync.Mutex
	cache *lru.Cache
}

// NewChartRenders keeps the renders of up to size chart revisions.
func NewChartRenders(size int) *ChartRenders {
	return &ChartRenders{cache: lru.New(size)}
}

// key is the cache key of a render with opts, "" when not cached.
func (c *ChartRenders) key(st *convergev1.SyncTarget, opts render.Options) string {
	if c == nil || opts.Helm == nil {
		return ""
	}
	h := opts.Helm
	b, err := json.Marshal(struct {
		Root, Path, TargetNamespace, Owner, Release, Namespace string
		ValuesFiles                                            []string
		Values                                                 any
		Inline                                                 []byte
		Flags                                                  [3]bool
		Sub                                                    *render.Substitution
		Generation                                             int64
		KubeVersion                                            string
		APIVersions                                            []string
	}{opts.Root, opts.Path, opts.TargetNamespace, st.Namespace + "/" + st.Name, h.ReleaseName, h.Namespace,
		h.ValuesFiles, h.Values, h.Inline, [3]bool{h.SkipCRDs, h.DisableHooks, h.IncludeTests}, opts.Substitute, st.Generation,
		h.KubeVersion, h.APIVersions})
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func (c *ChartRenders) get(key string) ([]*unstructured.Unstructured, bool) {
	if c == nil || key == "" {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.cache.Get(key)
	if !ok {
		return nil, false
	}
	return deepCopies(v.([]*unstructured.Unstructured)), true
}

func (c *ChartRenders) put(key string, objects []*unstructured.Unstructured) {
	if c == nil || key == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cache.Add(key, deepCopies(objects))
}

func deepCopies(objects []*unstructured.Unstructured) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, len(objects))
	for i, o := range objects {
		out[i] = o.DeepCopy()
	}
	return out
}
