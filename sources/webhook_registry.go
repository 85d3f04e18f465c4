package sources

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/netip"
	"net/url"
	"path"
	"strconv"
	"strings"
)

// OCIWebhookPath is where the webhook receiver takes the push notifications of OCI
// registries. A registry that sends no header of the user's choosing (Docker Hub, Quay, a
// Pub/Sub push subscription) puts the token in the URL instead: OCIWebhookPath + "/<token>".
const OCIWebhookPath = "/hooks/oci"

// errNoPush is a registry notification that reports no push (a pull, a deletion, a scan):
// nothing to poll.
var errNoPush = errors.New("no push in the notification")

// dockerHub is the name of Docker Hub's registry in normalized repositories.
const dockerHub = "docker.io"

// dockerHubHosts are the names Docker Hub's registry goes by.
var dockerHubHosts = map[string]bool{
	dockerHub: true, "registry-1.docker.io": true, "index.docker.io": true, "registry.hub.docker.com": true,
}

// NormalizeOCIRepository reduces a reference to an OCI repository to "host[:port]/path",
// the form SyncTargets following an artifact (spec.oci.url) are indexed by and that
// registries' notifications are matched with. It takes oci://, https:// and http:// URLs
// and references without a scheme (ghcr.io/org/app:v1, nginx), drops a tag or digest,
// folds case, drops the default ports 443 and 80 (another port is another registry),
// names Docker Hub docker.io (registry-1.docker.io, index.docker.io and
// registry.hub.docker.com alike) and puts its one-element repositories under library/.
// Without a scheme, the first element is the registry when it has a dot or a port or is
// localhost, as docker pull reads a reference; otherwise the registry is Docker Hub.
func NormalizeOCIRepository(ref string) (string, error) {
	s := strings.TrimSpace(ref)
	scheme, rest, hasScheme := strings.Cut(s, "://")
	if hasScheme {
		switch strings.ToLower(scheme) {
		case "oci", "https", "http":
		default:
			return "", errors.New("unsupported scheme: want oci://, https:// or http://")
		}
		s = rest
	}
	host, p, found := strings.Cut(s, "/")
	if !hasScheme && (!found || (!strings.ContainsAny(host, ".:") && host != "localhost")) {
		host, p = dockerHub, s
	}
	if strings.Contains(host, "@") {
		return "", errors.New("a registry reference carries no credentials")
	}
	host, err := normalizeRegistryHost(host)
	if err != nil {
		return "", err
	}
	if strings.Contains(p, "%") {
		if p, err = url.PathUnescape(p); err != nil {
			return "", errors.New("malformed repository path")
		}
	}
	p, _, _ = strings.Cut(p, "@") // a digest
	if i := strings.LastIndex(p, "/"); strings.Contains(p[i+1:], ":") {
		p = p[:i+1+strings.Index(p[i+1:], ":")] // a tag
	}
	p = strings.ToLower(strings.TrimPrefix(path.Clean("/"+p), "/"))
	switch {
	case p == "" || p == ".":
		return "", errors.New("no repository path")
	case strings.Trim(p, "abcdefghijklmnopqrstuvwxyz0123456789._-/") != "":
		return "", errors.New("invalid repository path")
	}
	if host == dockerHub && !strings.Contains(p, "/") {
		p = "library/" + p
	}
	return host + "/" + p, nil
}

// normalizeRegistryHost lowers a registry's host[:port], drops the default ports and
// names Docker Hub one way.
func normalizeRegistryHost(hostport string) (string, error) {
	hostport = strings.ToLower(hostport)
	host, port := hostport, ""
	if i := strings.LastIndex(hostport, ":"); i >= 0 && !strings.HasSuffix(hostport, "]") {
		host, port = hostport[:i], hostport[i+1:]
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return "", errors.New("invalid registry port")
		}
	}
	host = strings.TrimRight(host, ".")
	switch {
	case host == "":
		return "", errors.New("no registry host")
	case strings.HasPrefix(host, "["):
		addr, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
		if err != nil || !strings.HasSuffix(host, "]") {
			return "", errors.New("invalid registry host")
		}
		host = "[" + addr.String() + "]"
	case strings.Trim(host, "abcdefghijklmnopqrstuvwxyz0123456789.-_") != "":
		return "", errors.New("invalid registry host")
	}
	if dockerHubHosts[host] {
		host = dockerHub
	}
	// A host is read as one only with a dot, a port, brackets or as localhost: one that
	// would lose all of them here would read back as a Docker Hub path.
	named := strings.Contains(host, ".") || strings.HasPrefix(host, "[") || host == "localhost"
	switch {
	case (port == "" || port == "443" || port == "80") && named:
		return host, nil
	case port == "":
		return "", errors.New("invalid registry host: a host needs a dot or a port")
	}
	return host + ":" + port, nil
}

// RegistryPayloadRepositories returns the repositories (NormalizeOCIRepository) that a
// registry's push notification names. It reads:
//
//   - CNCF Distribution (the registry binary) and Azure Container Registry:
//     events[].target.repository, or target.repository, with request.host (else the host
//     of target.url), for the "push" of a manifest;
//   - Harbor, default and CloudEvents formats: the resources[].resource_url, and the
//     repository.repo_full_name on their host, of a PUSH_ARTIFACT (harbor.artifact.pushed);
//   - GitHub's package and registry_package events (the GitHub Container Registry):
//     package_version.package_url, else registry.url and the package's name, of a
//     container published or updated;
//   - Docker Hub: repository.repo_name beside push_data;
//   - Quay: docker_url of a repository push (updated_tags);
//   - Google Artifact Registry through a Pub/Sub push subscription: the tag or digest of
//     the base64 message.data of an INSERT.
//
// It fails on malformed JSON and on a payload of none of these forms; a notification that
// reports only something else than a push (a pull, a deletion) is errNoPush.
func RegistryPayloadRepositories(body []byte) ([]string, error) {
	obj, err := decodeObject(body)
	if err != nil {
		return nil, err
	}
	var refs []string
	known := false
	for _, parse := range []func(map[string]any) ([]string, bool){
		distributionRefs, harborRefs, githubPackageRefs, dockerHubRefs, quayRefs, pubSubRefs,
	} {
		r, ok := parse(obj)
		known = known || ok
		refs = append(refs, r...)
	}
	if !known {
		return nil, errors.New("not a registry notification")
	}
	if len(refs) == 0 {
		return nil, errNoPush
	}
	return normalizedSet(refs, NormalizeOCIRepository, "no repository in the notification")
}

// normalizedSet normalizes refs, drops those that do not normalize and duplicates, and
// keeps at most maxPayloadURLs; none left is the error none.
func normalizedSet(refs []string, normalize func(string) (string, error), none string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, r := range refs {
		n, err := normalize(r)
		if err != nil || seen[n] {
			continue
		}
		seen[n] = true
		out = append(out, n)
		if len(out) == maxPayloadURLs {
			break
		}
	}
	if len(out) == 0 {
		return nil, errors.New(none)
	}
	return out, nil
}

// jsonStr is the string at key of m, "" when absent or of another type.
func jsonStr(m map[string]any, key string) string {
	s, _ := m[key].(string)
	return s
}

// jsonObj is the object at key of m, nil when absent or of another type.
func jsonObj(m map[string]any, key string) map[string]any {
	o, _ := m[key].(map[string]any)
	return o
}

// distributionRefs reads the envelope of Distribution's notifications, and the single
// event Azure Container Registry sends.
func distributionRefs(o map[string]any) ([]string, bool) {
	if events, ok := o["events"].([]any); ok {
		var refs []string
		for _, e := range events {
			if ev, ok := e.(map[string]any); ok {
				refs = append(refs, distributionRef(ev)...)
			}
		}
		return refs, true
	}
	if jsonObj(o, "target") != nil && jsonStr(o, "action") != "" {
		return distributionRef(o), true
	}
	return nil, false
}

// distributionRef is the repository of an event that pushed a manifest: pushes of layers
// (Distribution reports them too) come before their manifest's, and pulls — the pollers'
// own among them — are no news.
func distributionRef(ev map[string]any) []string {
	target := jsonObj(ev, "target")
	if jsonStr(ev, "action") != "push" || target == nil {
		return nil
	}
	if mt := jsonStr(target, "mediaType"); mt != "" && !strings.Contains(mt, "manifest") && !strings.Contains(mt, "index") {
		return nil
	}
	repo, host := jsonStr(target, "repository"), jsonStr(jsonObj(ev, "request"), "host")
	if host == "" {
		if u, err := url.Parse(jsonStr(target, "url")); err == nil {
			host = u.Host
		}
	}
	if repo == "" || host == "" {
		return nil
	}
	return []string{host + "/" + repo}
}

// harborRefs reads Harbor's notifications: event_data (default format) or data (CloudEvents).
func harborRefs(o map[string]any) ([]string, bool) {
	data, kind := jsonObj(o, "event_data"), jsonStr(o, "type")
	if data == nil && strings.HasPrefix(kind, "harbor.") {
		data = jsonObj(o, "data")
	}
	if data == nil {
		return nil, false
	}
	if kind != "PUSH_ARTIFACT" && kind != "harbor.artifact.pushed" {
		return nil, true
	}
	full := jsonStr(jsonObj(data, "repository"), "repo_full_name")
	resources, _ := data["resources"].([]any)
	var refs []string
	for _, r := range resources {
		res, _ := r.(map[string]any)
		u := jsonStr(res, "resource_url")
		if u == "" {
			continue
		}
		refs = append(refs, u)
		if host, _, ok := strings.Cut(u, "/"); ok && full != "" {
			refs = append(refs, host+"/"+full)
		}
	}
	return refs, true
}

// githubPackageRefs reads GitHub's package and registry_package events.
func githubPackageRefs(o map[string]any) ([]string, bool) {
	pkg := jsonObj(o, "package")
	if pkg == nil {
		pkg = jsonObj(o, "registry_package")
	}
	if pkg == nil {
		return nil, false
	}
	if a := jsonStr(o, "action"); a != "published" && a != "updated" {
		return nil, true
	}
	kind := strings.ToLower(jsonStr(pkg, "package_type"))
	if kind == "" {
		kind = strings.ToLower(jsonStr(pkg, "ecosystem"))
	}
	if kind != "container" && kind != "docker" {
		return nil, true
	}
	var refs []string
	if u := jsonStr(jsonObj(pkg, "package_version"), "package_url"); u != "" {
		refs = append(refs, u)
	}
	if reg, name := jsonStr(jsonObj(pkg, "registry"), "url"), jsonStr(pkg, "name"); reg != "" && name != "" {
		refs = append(refs, strings.TrimSuffix(reg, "/")+"/"+name)
	}
	return refs, true
}

// dockerHubRefs reads Docker Hub's notification, which only ever reports a push.
func dockerHubRefs(o map[string]any) ([]string, bool) {
	name := jsonStr(jsonObj(o, "repository"), "repo_name")
	if jsonObj(o, "push_data") == nil || name == "" {
		return nil, false
	}
	return []string{dockerHub + "/" + name}, true
}

// quayRefs reads Quay's notifications; a repository push is the one with updated_tags.
func quayRefs(o map[string]any) ([]string, bool) {
	u := jsonStr(o, "docker_url")
	if u == "" {
		return nil, false
	}
	if _, pushed := o["updated_tags"]; !pushed {
		return nil, true
	}
	return []string{u}, true
}

// pubSubRefs reads a Pub/Sub push of Artifact Registry's (and Container Registry's) gcr
// topic: message.data is the base64 JSON {"action": "INSERT", "digest": …, "tag": …}.
func pubSubRefs(o map[string]any) ([]string, bool) {
	data := jsonStr(jsonObj(o, "message"), "data")
	if data == "" {
		return nil, false
	}
	raw, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		if raw, err = base64.URLEncoding.DecodeString(data); err != nil {
			return nil, true
		}
	}
	var msg map[string]any
	if json.Unmarshal(raw, &msg) != nil || jsonStr(msg, "action") != "INSERT" {
		return nil, true
	}
	var refs []string
	for _, k := range []string{"tag", "digest"} {
		if s := jsonStr(msg, k); s != "" {
			refs = append(refs, s)
		}
	}
	return refs, true
}
