package health

import (
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/converge-gitops/converge/internal/localcluster"
	"github.com/converge-gitops/converge/internal/localcluster/clustertest"
)

// The cluster tests share one local cluster (controller-manager, scheduler, two kwok
// nodes and the Widget CRD), started by the first test that needs it and stopped by
// TestMain; each test works in a namespace of its own. The pure tests never start it.
var shared = clustertest.NewShared(localcluster.Options{
	Workloads: true,
	Nodes:     2,
	CRDs:      []*apiextensionsv1.CustomResourceDefinition{widgetCRD()},
})

func TestMain(m *testing.M) { os.Exit(shared.Stop(m.Run())) }

// testCluster returns the shared cluster, starting it on first use.
func testCluster(t *testing.T) *localcluster.Cluster {
	t.Helper()
	return shared.Get(t)
}

// widgetCRD is a tiny custom kind whose status the tests set by hand (no status
// subresource, any fields).
func widgetCRD() *apiextensionsv1.CustomResourceDefinition {
	preserve := true
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.test.converge.dev"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "test.converge.dev",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: &preserve,
				}},
			}},
		},
	}
}

// requestCounter records the API requests sent through a rest.Config and how many
// watches are open.
type requestCounter struct {
	mu       sync.Mutex
	requests []string // "GET /api/v1/namespaces/x/configmaps?labelSelector=… accept=application/json;as=…"
	open     atomic.Int64
}

// config returns a copy of base whose requests the counter sees.
func (c *requestCounter) config(base *rest.Config) *rest.Config {
	cfg := rest.CopyConfig(base)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			c.mu.Lock()
			c.requests = append(c.requests, req.Method+" "+req.URL.RequestURI()+" accept="+req.Header.Get("Accept"))
			c.mu.Unlock()
			resp, err := rt.RoundTrip(req)
			if err == nil && req.URL.Query().Get("watch") == "true" {
				c.open.Add(1)
				resp.Body = &countedBody{ReadCloser: resp.Body, open: &c.open}
			}
			return resp, err
		})
	})
	return cfg
}

// seen returns the requests seen so far.
func (c *requestCounter) seen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.requests...)
}

// matching returns the requests containing every one of the substrings.
func matching(requests []string, subs ...string) []string {
	var out []string
next:
	for _, r := range requests {
		for _, s := range subs {
			if !strings.Contains(r, s) {
				continue next
			}
		}
		out = append(out, r)
	}
	return out
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// countedBody counts a watch as open until its body is closed.
type countedBody struct {
	io.ReadCloser
	open   *atomic.Int64
	closed atomic.Bool
}

func (b *countedBody) Close() error {
	if b.closed.CompareAndSwap(false, true) {
		b.open.Add(-1)
	}
	return b.ReadCloser.Close()
}
