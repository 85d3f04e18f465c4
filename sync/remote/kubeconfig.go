package remote

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"sort"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// MaxKubeConfigSize bounds the kubeconfig read from a Secret.
const MaxKubeConfigSize = 256 << 10

// ErrRefused marks a kubeconfig that converge does not use: it asks for something a
// tenant's kubeconfig may not (see the package documentation), or is malformed. Retrying
// does not help; the Secret must change.
var ErrRefused = errors.New("kubeconfig refused")

// refused returns an ErrRefused error saying why.
func refused(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
}

// yamlLine finds the line number of a YAML error: the parser's message may quote the
// kubeconfig, credentials included, so only where it failed is said.
var yamlLine = regexp.MustCompile(`line \d+`)

// Parse turns a kubeconfig into the rest.Config of its current context (or of its only
// context), refusing what the package documentation lists. Nothing is read from files,
// and the kubeconfig's content never appears in an error: neither its credentials nor
// its server URL (only the server's host) nor an exec plugin's command. The config has no
// transport yet: see withTransport.
func Parse(data []byte, allowLoopback bool) (*rest.Config, error) {
	return parse(data, addressPolicy{allowLoopback: allowLoopback})
}

// parse is Parse with the addresses a server may be at.
func parse(data []byte, where addressPolicy) (*rest.Config, error) {
	if len(data) > MaxKubeConfigSize {
		return nil, refused("it is %d bytes, more than the %d allowed", len(data), MaxKubeConfigSize)
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		at := yamlLine.FindString(err.Error())
		if at != "" {
			at = " (at " + at + ")"
		}
		return nil, refused("it does not parse as a kubeconfig%s", at)
	}
	cluster, user, err := currentContext(kc)
	if err != nil {
		return nil, err
	}
	if err := checkCluster(cluster, where); err != nil {
		return nil, err
	}
	if err := checkUser(user); err != nil {
		return nil, err
	}
	return restConfig(cluster, user), nil
}

// currentContext returns the cluster and user of the current context, or of the only
// context when none is current.
func currentContext(kc *clientcmdapi.Config) (*clientcmdapi.Cluster, *clientcmdapi.AuthInfo, error) {
	name := kc.CurrentContext
	if name == "" {
		if len(kc.Contexts) != 1 {
			return nil, nil, refused("it has %d contexts and no current-context: say which one to use", len(kc.Contexts))
		}
		for n := range kc.Contexts {
			name = n
		}
	}
	ctx, ok := kc.Contexts[name]
	if !ok || ctx == nil {
		return nil, nil, refused("its current-context %q does not exist", name)
	}
	cluster, ok := kc.Clusters[ctx.Cluster]
	if !ok || cluster == nil {
		return nil, nil, refused("the cluster %q of context %q does not exist", ctx.Cluster, name)
	}
	user := kc.AuthInfos[ctx.AuthInfo]
	if user == nil {
		user = &clientcmdapi.AuthInfo{} // anonymous, or a client certificate-less TLS server
	}
	return cluster, user, nil
}

// checkCluster refuses file paths, proxies and addresses a tenant may not reach.
func checkCluster(c *clientcmdapi.Cluster, where addressPolicy) error {
	switch {
	case c.LocationOfOrigin != "":
		return refused("it was loaded from a file; only inline kubeconfigs are read")
	case c.CertificateAuthority != "":
		return refused("certificate-authority names a file of the daemon's host: use certificate-authority-data")
	case c.ProxyURL != "":
		return refused("proxy-url would route the daemon's requests through a host of the kubeconfig's choosing; connect to the cluster directly")
	}
	return checkServer(c.Server, where)
}

// checkServer refuses a server that is not an https URL of a host, or whose host is an
// address a tenant may not reach. Its errors name the server by its host alone: the rest
// of the URL (userinfo, path, query) may hold credentials, and a URL that does not parse
// is not quoted at all.
func checkServer(server string, where addressPolicy) error {
	if server == "" {
		return refused("the cluster has no server")
	}
	u, err := url.Parse(server)
	switch {
	case err != nil:
		return refused("the server is not a URL")
	case u.User != nil:
		return refused("the server URL carries credentials (user:password@); give them as the user's token, or username and password")
	case u.Opaque != "" || u.Host == "":
		return refused("the server is not a URL of a host")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return refused("the server URL of %s has a query or a fragment: a server is a scheme, a host and an optional path", u.Host)
	case u.Scheme != "https" && u.Scheme != "http":
		return refused("the server %s is not an https URL", u.Host)
	case u.Scheme == "http" && !where.allowLoopback:
		return refused("the server %s is not https: credentials would cross the network in the clear", u.Host)
	}
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		host = "127.0.0.1"
	}
	if addr, err := netip.ParseAddr(host); err == nil {
		if why := where.refuse(addr); why != "" {
			return refused("the server %s is %s", u.Host, why)
		}
	}
	return nil
}

// authProviders are the auth-provider names client-go knows: an error quotes the name of
// one of them, and no other (the name is the kubeconfig's to choose).
var authProviders = map[string]bool{"gcp": true, "azure": true, "oidc": true, "openstack": true}

// checkUser refuses credentials that run commands, call a cloud, read files or
// impersonate.
func checkUser(u *clientcmdapi.AuthInfo) error {
	switch {
	case u.Exec != nil:
		// Neither the command nor its arguments nor its environment are quoted: they may
		// hold a token.
		return refused("exec plugins are not run: the daemon would run a command the kubeconfig names; use a token or a client certificate")
	case u.AuthProvider != nil && authProviders[u.AuthProvider.Name]:
		return refused("auth-provider %q is not used: the daemon would call a cloud with its own identity; use a token or a client certificate", u.AuthProvider.Name)
	case u.AuthProvider != nil:
		return refused("auth-provider is not used: the daemon would call a cloud with its own identity; use a token or a client certificate")
	case u.LocationOfOrigin != "":
		return refused("it was loaded from a file; only inline kubeconfigs are read")
	case u.TokenFile != "":
		return refused("tokenFile names a file of the daemon's host: put the token inline (token)")
	case u.ClientCertificate != "" || u.ClientKey != "":
		return refused("client-certificate and client-key name files of the daemon's host: use client-certificate-data and client-key-data")
	case u.Impersonate != "" || u.ImpersonateUID != "" || len(u.ImpersonateGroups) > 0 || len(u.ImpersonateUserExtra) > 0:
		return refused("act-as is not used: the daemon impersonates the SyncTarget's service account itself")
	case (len(u.ClientCertificateData) > 0) != (len(u.ClientKeyData) > 0):
		return refused("client-certificate-data and client-key-data go together")
	}
	return nil
}

// restConfig builds the rest.Config of a checked cluster and user.
func restConfig(c *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) *rest.Config {
	return &rest.Config{
		// client-go's default, 5 requests/s, would make an apply of a hundred objects
		// take half a minute; each identity's client has a limiter of its own.
		QPS:                100,
		Burst:              200,
		Host:               c.Server,
		BearerToken:        u.Token,
		Username:           u.Username,
		Password:           u.Password,
		DisableCompression: c.DisableCompression,
		TLSClientConfig: rest.TLSClientConfig{
			Insecure:   c.InsecureSkipTLSVerify,
			ServerName: c.TLSServerName,
			CAData:     c.CertificateAuthorityData,
			CertData:   u.ClientCertificateData,
			KeyData:    u.ClientKeyData,
		},
	}
}

// KubeConfigKeys are the keys a kubeconfig Secret is read from when the reference names
// none, in order: Flux and Cluster API write "value", some tools "value.yaml".
var KubeConfigKeys = []string{"value", "value.yaml"}

// kubeConfigData picks the kubeconfig out of a Secret's data.
func kubeConfigData(data map[string][]byte, key string) ([]byte, error) {
	if key != "" {
		if v, ok := data[key]; ok {
			return v, nil
		}
		return nil, refused("it has no key %q (keys: %s)", key, keyList(data))
	}
	for _, k := range KubeConfigKeys {
		if v, ok := data[k]; ok {
			return v, nil
		}
	}
	return nil, refused("it has neither of the keys %s (keys: %s); name the key in spec.kubeConfig.secretRef.key",
		strings.Join(KubeConfigKeys, ", "), keyList(data))
}

func keyList(data map[string][]byte) string {
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		return "none"
	}
	return strings.Join(keys, ", ")
}
