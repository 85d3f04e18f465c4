// Package charts follows Helm charts in chart repositories: HTTP repositories serving an
// index.yaml, and OCI registries holding charts as `helm push` writes them.
//
// Client.Resolve finds the newest version a semver range allows (or the OCI manifest a
// digest pins) and names it by a revision, "<version>@sha256:<hex>": the archive's sha256
// for an HTTP repository, the manifest's digest for OCI. Client.Fetch downloads that
// archive — bounded, its digest checked — and extracts it into a content-addressed cache;
// a chart in the cache costs no request. Client.Verify checks the chart's provenance
// (.prov): an OpenPGP clearsigned message, signed by a trusted key, naming the archive's
// sha256. Scheduler polls sources on an interval or a cron schedule, one poller shared by
// every subscriber of the same source.
//
// Archives come from the internet and are treated as hostile: an entry with an absolute
// path or "..", a link, a device, or outside the directory named after the chart is
// refused; the archive, each file, the files together and their count are capped, the
// bytes decompressed counted as they are read; everything is extracted into a temporary
// directory that is renamed into the cache only when complete and checked.
//
// Credentials go only to the repository's own origin (scheme, host and port): a chart URL
// of an index.yaml that names another host, or a redirect elsewhere, gets none. An OCI
// registry is reached over HTTPS, or plain HTTP when it is on a loopback address (a test
// registry, a port-forward) and nowhere else. Errors name the repository without
// credentials and never quote a password or token; they match the kinds of package
// sources (sources.ErrAuthFailed, sources.ErrLimitExceeded, ...), an untrusted chart is a
// *sources.VerificationError.
package charts
