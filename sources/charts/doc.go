// Package charts follows Helm charts in chart repositories — HTTP repositories serving an
// index.yaml, and OCI registries holding charts as `helm push` writes them — and
// configuration artifacts of OCI registries: a kustomization, plain YAML or a chart
// directory, packed as `converge push artifact` (PackArtifact, Client.PushArtifact),
// `flux push artifact` or `oras push` of a tar.gz write it (a Source of KindArtifact).
//
// Client.Resolve finds the newest version a semver range allows (or the OCI manifest a
// digest pins) and names it by a revision, "<version>@sha256:<hex>": the archive's sha256
// for an HTTP repository, the manifest's digest for OCI. Client.Fetch downloads that
// archive — bounded, its digest checked — and extracts it into a content-addressed cache
// kept apart for each repository and credentials (a hash of both names the part): a chart
// in the cache costs no request to the source that downloaded it, and a source naming the
// digest of another's private chart asks its own repository. The cache is collected after
// downloads: charts unused for a day, then the least recently used beyond a size, go.
// CacheDir is where the daemon keeps it, inside its cache directory. Client.Verify checks
// the chart's provenance (.prov): an OpenPGP clearsigned message, signed by a trusted key,
// naming the archive's sha256; with cosign keys, it checks instead that an OCI chart or artifact is signed with
// cosign by one of them, offline (cosign's classic .sig format and cosign v3's Sigstore
// bundles; no transparency log). Scheduler polls sources on an interval or a cron
// schedule, one poller shared by every subscriber of the same source.
//
// An artifact follows a tag, the newest tag a semver range allows, or a digest; its
// revision is "<tag>@sha256:<manifest hex>" ("digest@…" when pinned). Fetch returns its
// whole tree, extracted under the same caps and checks as a chart, into the same cache
// (apart from charts').
//
// Archives come from the internet and are treated as hostile: an entry with an absolute
// path or "..", a link, a device, or (of a chart) outside the directory named after the
// chart is refused; the archive, each file, the files together and their count are capped,
// the bytes decompressed counted as they are read; everything is extracted into a temporary
// directory that is renamed into the cache only when complete and checked.
//
// Credentials go only to the repository's own origin (scheme, host and port): a chart URL
// of an index.yaml that names another host, or a redirect elsewhere, gets none. An OCI
// registry is reached over HTTPS, or plain HTTP when it is on a loopback address (a test
// registry, a port-forward) and nowhere else. Unless Client.AllowLoopback, no connection
// goes to a loopback, link-local (cloud metadata), unspecified or multicast address —
// checked on the address each connection dials, after name resolution, so redirects,
// chart URLs, token realms and names that resolve there are refused alike (an
// *AddressRefusedError, matching sources.ErrInvalidSource). Errors name the repository
// without credentials and never quote a password or token, nor what a server answered
// beyond a short one-line excerpt (a registry's error codes and messages); they match the
// kinds of package sources (sources.ErrAuthFailed, sources.ErrLimitExceeded, ...), an
// untrusted chart or artifact is a *sources.VerificationError.
package charts
