package remote

import (
	"context"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/converge-gitops/converge/internal/category"
)

const secretToken = "s3cr3t-token-value"

// testCA is a CA certificate in PEM, as certificate-authority-data holds one.
var testCA = func() []byte {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}()

// kubeconfig writes a kubeconfig of one context, changed by mutate.
func kubeconfig(t *testing.T, server string, mutate func(*clientcmdapi.Cluster, *clientcmdapi.AuthInfo)) []byte {
	t.Helper()
	cluster := &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: testCA}
	user := &clientcmdapi.AuthInfo{Token: secretToken}
	if mutate != nil {
		mutate(cluster, user)
	}
	kc := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"c": cluster},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"u": user},
		Contexts:       map[string]*clientcmdapi.Context{"ctx": {Cluster: "c", AuthInfo: "u"}},
		CurrentContext: "ctx",
	}
	data, err := clientcmd.Write(kc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestParseTakesInlineCredentials(t *testing.T) {
	cfg, err := Parse(kubeconfig(t, "https://cluster.example.com:6443", func(c *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
		c.TLSServerName = "api.example.com"
		u.ClientCertificateData, u.ClientKeyData = []byte("cert"), []byte("key")
	}), false)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://cluster.example.com:6443" || cfg.BearerToken != secretToken || cfg.ServerName != "api.example.com" ||
		string(cfg.CAData) != string(testCA) || string(cfg.CertData) != "cert" || string(cfg.KeyData) != "key" {
		t.Fatalf("config: %+v", cfg)
	}
	basic, err := Parse(kubeconfig(t, "https://10.0.0.1", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
		u.Token, u.Username, u.Password = "", "admin", "pw"
	}), false)
	if err != nil || basic.Username != "admin" || basic.Password != "pw" {
		t.Fatalf("basic auth: %v %+v", err, basic)
	}
}

func TestParseTakesTheOnlyContext(t *testing.T) {
	data := kubeconfig(t, "https://cluster.example.com", nil)
	kc, err := clientcmd.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	kc.CurrentContext = ""
	data, _ = clientcmd.Write(*kc)
	if _, err := Parse(data, false); err != nil {
		t.Fatal(err)
	}
	kc.Contexts["other"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	data, _ = clientcmd.Write(*kc)
	if _, err := Parse(data, false); err == nil || !strings.Contains(err.Error(), "2 contexts and no current-context") {
		t.Fatalf("two contexts, none current: %v", err)
	}
}

func TestParseRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		server string
		mutate func(*clientcmdapi.Cluster, *clientcmdapi.AuthInfo)
		want   string
	}{
		"exec plugin": {mutate: func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Exec = &clientcmdapi.ExecConfig{Command: "/bin/sh", Args: []string{"-c", "curl evil"}, APIVersion: "client.authentication.k8s.io/v1"}
		}, want: "exec plugins are not run"},
		"auth provider": {mutate: func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.AuthProvider = &clientcmdapi.AuthProviderConfig{Name: "gcp"}
		}, want: `auth-provider "gcp" is not used`},
		"token file": {mutate: func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.TokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
		}, want: "tokenFile names a file"},
		"client certificate file": {mutate: func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.ClientCertificate, u.ClientKey = "/etc/kubernetes/pki/admin.crt", "/etc/kubernetes/pki/admin.key"
		}, want: "client-certificate and client-key name files"},
		"certificate authority file": {mutate: func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			c.CertificateAuthority = "/etc/kubernetes/pki/ca.crt"
		}, want: "certificate-authority names a file"},
		"proxy": {mutate: func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			c.ProxyURL = "http://proxy.example.com:3128"
		}, want: "proxy-url would route"},
		"impersonation": {mutate: func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Impersonate = "system:admin"
		}, want: "act-as is not used"},
		"certificate without key": {mutate: func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.ClientCertificateData = []byte("cert")
		}, want: "go together"},
		"loopback":              {server: "https://127.0.0.1:6443", want: "a loopback address"},
		"loopback elsewhere":    {server: "https://127.9.9.9", want: "a loopback address"},
		"localhost":             {server: "https://localhost:6443", want: "a loopback address"},
		"ipv6 loopback":         {server: "https://[::1]:6443", want: "a loopback address"},
		"mapped loopback":       {server: "https://[::ffff:127.0.0.1]:6443", want: "a loopback address"},
		"cloud metadata":        {server: "https://169.254.169.254", want: "a cloud metadata address"},
		"ipv6 link-local":       {server: "https://[fe80::1]", want: "a link-local address"},
		"aws ipv6 metadata":     {server: "https://[fd00:ec2::254]", want: "a cloud metadata address"},
		"unspecified":           {server: "https://0.0.0.0:6443", want: "the unspecified address"},
		"plain http":            {server: "http://cluster.example.com", want: "is not https"},
		"no server":             {server: "", want: "has no server"},
		"credentials in URL":    {server: "https://u:p@cluster.example.com", want: "carries credentials"},
		"another scheme":        {server: "file:///etc/passwd", want: "not a URL of a host"},
		"not a kubeconfig":      {want: "does not parse"},
		"too large":             {want: "more than the"},
		"http on loopback only": {server: "ftp://127.0.0.1", want: "not an https URL"},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.server == "" && name != "no server" {
				tc.server = "https://cluster.example.com"
			}
			data := kubeconfig(t, tc.server, tc.mutate)
			switch name {
			case "not a kubeconfig":
				data = []byte("apiVersion: v1\nkind: Config\nusers: [" + secretToken + ": {")
			case "too large":
				data = make([]byte, MaxKubeConfigSize+1)
			}
			_, err := Parse(data, name == "http on loopback only")
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrRefused) {
				t.Fatalf("want an ErrRefused saying %q, got %v", tc.want, err)
			}
			if strings.Contains(err.Error(), secretToken) {
				t.Fatalf("the error leaks the token: %v", err)
			}
		})
	}
}

func TestParseAllowsLoopbackWhenAsked(t *testing.T) {
	for _, server := range []string{"https://127.0.0.1:6443", "http://127.0.0.1:8080", "https://[::1]"} {
		if _, err := Parse(kubeconfig(t, server, nil), true); err != nil {
			t.Errorf("%s: %v", server, err)
		}
	}
}

// tripwire is an HTTP server on loopback that counts every request it gets.
func tripwire(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// TestLoopbackTripwire: a kubeconfig pointing at the daemon's own host is refused before
// any request leaves, at parse time for an address, at dial time for a name that
// resolves there.
func TestLoopbackTripwire(t *testing.T) {
	srv, hits := tripwire(t)
	cs := NewClusters(Options{Secrets: secretReader(t, map[string][]byte{"value": kubeconfig(t, srv.URL, nil)})})
	_, err := cs.Acquire(context.Background(), syncTarget("app", "kc", ""))
	var cfgErr *ConfigError
	if !errors.As(err, &cfgErr) || !strings.Contains(err.Error(), "a loopback address") || !strings.Contains(err.Error(), "team/kc") {
		t.Fatalf("want the kubeconfig secret team/kc refused for a loopback address, got %v", err)
	}

	// Past the parser (a name resolving to loopback): the dial refuses.
	cfg, _, err := withTransport(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}, "team/kc", addressPolicy{})
	if err != nil {
		t.Fatal(err)
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = httpClient.Get(srv.URL + "/api")
	var refusedAddr *AddressRefusedError
	if !errors.As(err, &refusedAddr) || !category.Is(err, category.Retry) {
		t.Fatalf("want the dial refused, got %v", err)
	}
	if host, _ := os.Hostname(); resolvesToLoopback(host) {
		_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
		_, err = httpClient.Get("https://" + net.JoinHostPort(host, port) + "/api")
		if !errors.As(err, &refusedAddr) {
			t.Fatalf("%s resolves to loopback: want the dial refused, got %v", host, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the tripwire got %d requests", n)
	}
}

func resolvesToLoopback(host string) bool {
	addrs, err := net.LookupHost(host)
	if err != nil || len(addrs) == 0 {
		return false
	}
	ip := net.ParseIP(addrs[0])
	return ip != nil && ip.IsLoopback()
}

func TestUnreachableNamesTheCluster(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // nothing listens there now: connection refused
	cfg, _, err := withTransport(&rest.Config{Host: "https://" + addr}, "team/kc", addressPolicy{allowLoopback: true})
	if err != nil {
		t.Fatal(err)
	}
	httpClient, _ := rest.HTTPClientFor(cfg)
	_, err = httpClient.Get("https://" + addr + "/api")
	var unreachable *UnreachableError
	var netErr net.Error
	if !errors.As(err, &unreachable) || !errors.As(err, &netErr) || !category.Is(err, category.Retry) {
		t.Fatalf("want an UnreachableError, got %v", err)
	}
	if !strings.Contains(err.Error(), "kubeconfig secret team/kc is unreachable") {
		t.Fatalf("the error does not name the cluster: %v", err)
	}
}

func TestKubeConfigKeys(t *testing.T) {
	if v, err := kubeConfigData(map[string][]byte{"value.yaml": []byte("b"), "other": []byte("c")}, ""); err != nil || string(v) != "b" {
		t.Fatalf("value.yaml: %q %v", v, err)
	}
	if v, err := kubeConfigData(map[string][]byte{"value": []byte("a"), "value.yaml": []byte("b")}, ""); err != nil || string(v) != "a" {
		t.Fatalf("value first: %q %v", v, err)
	}
	if v, err := kubeConfigData(map[string][]byte{"config": []byte("c")}, "config"); err != nil || string(v) != "c" {
		t.Fatalf("named key: %q %v", v, err)
	}
	_, err := kubeConfigData(map[string][]byte{"config": []byte("c")}, "")
	if err == nil || !strings.Contains(err.Error(), "keys: config") {
		t.Fatalf("missing key: %v", err)
	}
}

// TestParseErrorsKeepSecrets: every refusal of Parse names the problem without quoting
// what may hold a secret: the server URL's userinfo, path and query, an exec plugin's
// command, arguments and environment, a proxy's or an auth provider's settings.
func TestParseErrorsKeepSecrets(t *testing.T) {
	const pw = "hunter2-pw"
	execPlugin := func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
		u.Exec = &clientcmdapi.ExecConfig{Command: "/bin/get-token-" + pw, Args: []string{"--token=" + pw + "-arg"},
			Env: []clientcmdapi.ExecEnvVar{{Name: "TOKEN", Value: pw + "-env"}}, APIVersion: "client.authentication.k8s.io/v1"}
	}
	for name, tc := range map[string]struct {
		server string
		mutate func(*clientcmdapi.Cluster, *clientcmdapi.AuthInfo)
	}{
		"userinfo":              {server: "https://user:" + pw + "@10.0.0.1:6443"},
		"userinfo, no host":     {server: "https://user:" + pw + "@"},
		"userinfo, bad port":    {server: "https://user:" + pw + "@10.0.0.1:port"},
		"userinfo, opaque":      {server: "https:user:" + pw + "@10.0.0.1"},
		"userinfo, not a URL":   {server: "https://user:" + pw + "@10.0.0.1:6443/%zz"},
		"userinfo, plain http":  {server: "http://user:" + pw + "@10.0.0.1"},
		"userinfo, loopback":    {server: "https://user:" + pw + "@127.0.0.1"},
		"userinfo, scheme":      {server: "ftp://user:" + pw + "@10.0.0.1"},
		"query, scheme":         {server: "ftp://10.0.0.1/?token=" + pw},
		"path, scheme":          {server: "gopher://10.0.0.1/" + pw},
		"query, loopback":       {server: "https://127.0.0.1/?token=" + pw},
		"query, plain http":     {server: "http://10.0.0.1/?token=" + pw},
		"query":                 {server: "https://10.0.0.1/?token=" + pw},
		"fragment":              {server: "https://10.0.0.1/#" + pw},
		"exec plugin":           {mutate: execPlugin},
		"exec plugin, userinfo": {server: "https://user:" + pw + "@10.0.0.1", mutate: execPlugin},
		"proxy with userinfo": {mutate: func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			c.ProxyURL = "http://user:" + pw + "@proxy:3128"
		}},
		"auth provider config": {mutate: func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.AuthProvider = &clientcmdapi.AuthProviderConfig{Name: "oidc", Config: map[string]string{"id-token": pw}}
		}},
		"auth provider name": {mutate: func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.AuthProvider = &clientcmdapi.AuthProviderConfig{Name: pw}
		}},
		"token file":              {mutate: func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) { u.TokenFile = "/secrets/" + pw }},
		"certificate files":       {mutate: func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) { u.ClientKey = "/secrets/" + pw }},
		"certificate authority":   {mutate: func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.CertificateAuthority = "/secrets/" + pw }},
		"impersonation":           {mutate: func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) { u.ImpersonateGroups = []string{pw} }},
		"certificate without key": {mutate: func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) { u.ClientCertificateData = []byte(pw) }},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.server == "" {
				tc.server = "https://10.0.0.1:6443"
			}
			_, err := Parse(kubeconfig(t, tc.server, tc.mutate), false)
			if err == nil || !errors.Is(err, ErrRefused) {
				t.Fatalf("want an ErrRefused, got %v", err)
			}
			if strings.Contains(err.Error(), pw) {
				t.Fatalf("the error quotes a secret: %v", err)
			}
		})
	}
}
