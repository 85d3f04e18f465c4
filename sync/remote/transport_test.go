package remote

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-gitops/converge/internal/category"
)

// leaked is planted in every answer a remote cluster must not have quoted back.
const leaked = "internal-secret-3f9a"

// remoteClient acquires, with loopback allowed, the cluster of a kubeconfig pointing at
// server, and returns its client acting as the kubeconfig's own identity.
func remoteClient(t *testing.T, server string) client.WithWatch {
	t.Helper()
	cs := NewClusters(Options{Secrets: secretReader(t, map[string][]byte{"value": kubeconfig(t, server, nil)}), AllowLoopback: true})
	c, err := cs.Acquire(context.Background(), syncTarget("app", "kc", ""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Release(client.ObjectKey{Namespace: "team", Name: "app"}) })
	cl, err := c.Client("")
	if err != nil {
		t.Fatal(err)
	}
	return cl.(client.WithWatch)
}

func getConfigMap(cl client.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return cl.Get(ctx, client.ObjectKey{Namespace: "team", Name: "cm"}, &corev1.ConfigMap{})
}

// TestNonAPIAnswersAreNotQuoted: a server that does not answer as a Kubernetes API server
// (an internal web service, a metadata service) is named with its status code and content
// type; its body, which a tenant could otherwise read through the SyncTarget's status,
// never appears in the error.
func TestNonAPIAnswersAreNotQuoted(t *testing.T) {
	for name, tc := range map[string]struct {
		code        int
		contentType string
		want        string
	}{
		"html page":            {http.StatusNotFound, "text/html; charset=utf-8", "(HTTP 404, text/html)"},
		"plain text error":     {http.StatusInternalServerError, "text/plain", "(HTTP 500, text/plain)"},
		"no content type":      {http.StatusForbidden, "", "(HTTP 403, no content type)"},
		"json, not a Status":   {http.StatusBadRequest, "application/json", "(HTTP 400, application/json)"},
		"html page, answer ok": {http.StatusOK, "text/html", "(HTTP 200, text/html)"},
		"json, answer ok":      {http.StatusOK, "application/json", "(HTTP 200, application/json)"},
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if tc.contentType != "" {
					w.Header().Set("Content-Type", tc.contentType)
				} else {
					w.Header()["Content-Type"] = nil
				}
				w.WriteHeader(tc.code)
				body := leaked
				if strings.Contains(tc.contentType, "json") {
					body = `{"credentials":"` + leaked + `","kind":""}`
				}
				_, _ = fmt.Fprint(w, body)
			}))
			defer srv.Close()
			err := getConfigMap(remoteClient(t, srv.URL))
			if err == nil || strings.Contains(err.Error(), leaked) {
				t.Fatalf("the answer's body is quoted: %v", err)
			}
			if !strings.Contains(err.Error(), "did not answer as a Kubernetes API server") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want the server named as no Kubernetes API server %s, got %v", tc.want, err)
			}
			if !category.Is(err, category.Retry) {
				t.Fatalf("a server that is no API server is not the revision's fault: %v", err)
			}
		})
	}
}

// fakeAPIServer answers discovery for ConfigMaps as an API server does, and every other
// request with other.
func fakeAPIServer(t *testing.T, other http.HandlerFunc) *httptest.Server {
	t.Helper()
	discovery := map[string]string{
		"/api":    `{"kind":"APIVersions","versions":["v1"]}`,
		"/apis":   `{"kind":"APIGroupList","apiVersion":"v1","groups":[]}`,
		"/api/v1": `{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"configmaps","singularName":"configmap","namespaced":true,"kind":"ConfigMap","verbs":["get","list","watch"]}]}`,
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if body, ok := discovery[r.URL.Path]; ok {
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprint(w, body)
			return
		}
		other(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestAnswersWithoutKindAreNotQuoted: past discovery, an answer that is JSON but no
// Kubernetes object (a DNS name rebound to an internal service) is not quoted either, as
// client-go's decoders would ("Object 'Kind' is missing in '...'"), in a read or a watch.
func TestAnswersWithoutKindAreNotQuoted(t *testing.T) {
	srv := fakeAPIServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") != "" {
			_, _ = fmt.Fprint(w, `{"type":"ADDED","object":{"credentials":"`+leaked+`"}}`+"\n")
			return
		}
		_, _ = fmt.Fprint(w, `{"credentials":"`+leaked+`"}`)
	})
	cl := remoteClient(t, srv.URL)
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("ConfigMap")
	err := cl.Get(context.Background(), client.ObjectKey{Namespace: "team", Name: "cm"}, u)
	if err == nil || strings.Contains(err.Error(), leaked) || !strings.Contains(err.Error(), "did not answer as a Kubernetes API server (HTTP 200, application/json)") ||
		!category.Is(err, category.Retry) {
		t.Fatalf("get: want the answer refused unquoted, got %v", err)
	}
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("v1")
	list.SetKind("ConfigMapList")
	w, err := cl.Watch(context.Background(), list, client.InNamespace("team"))
	if err == nil {
		defer w.Stop()
		select {
		case ev := <-w.ResultChan():
			if ev.Type == watch.Error {
				err = apierrors.FromObject(ev.Object)
			} else {
				err = fmt.Errorf("event %s %v", ev.Type, ev.Object)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("no watch event")
		}
	}
	if err == nil || strings.Contains(err.Error(), leaked) || !strings.Contains(err.Error(), "did not answer as a Kubernetes API server") {
		t.Fatalf("watch: want the answer refused unquoted, got %v", err)
	}
}

// TestStatusAnswersAreKept: an API server's own Status answers reach the caller as they
// are, message and reason.
func TestStatusAnswersAreKept(t *testing.T) {
	srv := fakeAPIServer(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"configmaps \"cm\" not found","reason":"NotFound","code":404}`)
	})
	err := getConfigMap(remoteClient(t, srv.URL))
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), `configmaps "cm" not found`) {
		t.Fatalf("want the API server's NotFound, got %v", err)
	}
}

// recorder is a server that notes the Authorization header of every request it gets.
type recorder struct {
	mu   sync.Mutex
	auth []string
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec.mu.Lock()
	rec.auth = append(rec.auth, r.Header.Get("Authorization"))
	rec.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprint(w, `{"kind":"APIVersions","versions":["v1"]}`)
}

// TestRedirectsAreNotFollowed: a cluster that redirects would carry the kubeconfig's
// token to another host, or in the clear over http: the redirect is refused and the
// other host gets nothing.
func TestRedirectsAreNotFollowed(t *testing.T) {
	for name, newTarget := range map[string]func(http.Handler) *httptest.Server{
		"to another https host": httptest.NewTLSServer,
		"to plain http":         httptest.NewServer,
	} {
		t.Run(name, func(t *testing.T) {
			rec := &recorder{}
			target := newTarget(rec)
			defer target.Close()
			for _, code := range []int{http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
				srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					http.Redirect(w, r, target.URL+r.URL.RequestURI(), code)
				}))
				err := getConfigMap(remoteClient(t, srv.URL))
				srv.Close()
				if err == nil || !strings.Contains(err.Error(), "redirect") || !category.Is(err, category.Retry) {
					t.Errorf("HTTP %d: want the redirect refused, got %v", code, err)
				}
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.auth) != 0 {
				t.Fatalf("the redirect's target got %d requests, with Authorization %q", len(rec.auth), rec.auth)
			}
		})
	}
}

// TestMetadataAddressesAreAlwaysRefused: cloud metadata services that are not at a
// link-local address are refused even where loopback is allowed, at parse time and at
// dial time.
func TestMetadataAddressesAreAlwaysRefused(t *testing.T) {
	for _, addr := range []string{"100.100.100.200", "168.63.129.16", "[fd00:ec2::254]", "169.254.169.254", "[fd20:ce::254]"} {
		if _, err := Parse(kubeconfig(t, "https://"+addr, nil), true); err == nil || !strings.Contains(err.Error(), "cloud metadata") {
			t.Errorf("parse %s: want it refused as a cloud metadata address, got %v", addr, err)
		}
		cfg, _, err := withTransport(&rest.Config{Host: "https://" + addr}, "team/kc", addressPolicy{allowLoopback: true})
		if err != nil {
			t.Fatal(err)
		}
		httpClient, _ := rest.HTTPClientFor(cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/api", nil)
		_, err = httpClient.Do(req)
		cancel()
		var refusedAddr *AddressRefusedError
		if !errors.As(err, &refusedAddr) || !strings.Contains(err.Error(), "cloud metadata") {
			t.Errorf("dial %s: want it refused as a cloud metadata address, got %v", addr, err)
		}
	}
}

// TestNetworksConfineClusters: with Options.Networks, a cluster outside them is refused,
// at parse time for an IP address and at dial time for the address a name resolves to.
func TestNetworksConfineClusters(t *testing.T) {
	var nets Networks
	if err := nets.Set("10.0.0.0/8, fd00:20::/48"); err != nil || nets.String() != "10.0.0.0/8,fd00:20::/48" {
		t.Fatalf("networks %v, %v", nets, err)
	}
	if err := nets.Set("10.0.0.1"); err == nil {
		t.Fatal("an address without a prefix length is not a network")
	}
	where := addressPolicy{networks: nets}
	for server, want := range map[string]string{
		"https://10.1.2.3:6443":       "",
		"https://[fd00:20::1]":        "",
		"https://cluster.example.com": "", // a name: checked when dialled
		"https://192.168.1.1":         "outside the networks remote clusters may be in (10.0.0.0/8,fd00:20::/48)",
		"https://[fd00:21::1]":        "outside the networks",
		"https://100.100.100.200":     "a cloud metadata address",
	} {
		_, err := parse(kubeconfig(t, server, nil), where)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: want %q, got %v", server, want, err)
		}
	}

	srv, hits := tripwire(t)
	cs := NewClusters(Options{Secrets: secretReader(t, map[string][]byte{"value": kubeconfig(t, srv.URL, nil)}),
		AllowLoopback: true, Networks: nets})
	if _, err := cs.Acquire(context.Background(), syncTarget("app", "kc", "")); err == nil || !strings.Contains(err.Error(), "outside the networks") {
		t.Fatalf("want the kubeconfig refused for a server outside the networks, got %v", err)
	}
	for _, tc := range []struct {
		where addressPolicy
		hits  int64
	}{
		{addressPolicy{allowLoopback: true, networks: nets}, 0},
		{addressPolicy{allowLoopback: true, networks: Networks{netip.MustParsePrefix("127.0.0.0/8")}}, 1},
	} {
		cfg, _, err := withTransport(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}, "team/kc", tc.where)
		if err != nil {
			t.Fatal(err)
		}
		httpClient, _ := rest.HTTPClientFor(cfg)
		resp, err := httpClient.Get(srv.URL + "/api")
		var refusedAddr *AddressRefusedError
		if tc.hits == 0 && (!errors.As(err, &refusedAddr) || !strings.Contains(err.Error(), "outside the networks")) {
			t.Fatalf("want the dial refused, got %v", err)
		}
		if resp != nil {
			_ = resp.Body.Close()
		}
		if n := hits.Load(); n != tc.hits {
			t.Fatalf("the server got %d requests, want %d", n, tc.hits)
		}
	}
}

// TestNetworksFlag: Networks is the value of `converge serve --remote-cluster-cidrs`,
// comma-separated or repeated, and a value that is not a CIDR fails the command line.
func TestNetworksFlag(t *testing.T) {
	var nets Networks
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs.Var(&nets, "remote-cluster-cidrs", "")
	if err := fs.Parse([]string{"--remote-cluster-cidrs=10.20.0.0/16,192.168.0.0/24", "--remote-cluster-cidrs", "fd00:20::/48"}); err != nil {
		t.Fatal(err)
	}
	if got := fs.Lookup("remote-cluster-cidrs").Value.String(); got != "10.20.0.0/16,192.168.0.0/24,fd00:20::/48" {
		t.Fatalf("networks %q", got)
	}
	if err := (&Networks{}).Set("10.20.0.0/33"); err == nil || !strings.Contains(err.Error(), `"10.20.0.0/33" is not a CIDR`) {
		t.Fatalf("want an invalid CIDR refused, got %v", err)
	}
}
