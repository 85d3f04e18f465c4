// Package sources turns a SyncTarget's spec.source into a checked-out tree at an exact
// commit: ref resolution, shallow fetch, a cache of read-only checkouts per commit,
// authentication, poll scheduling, signed push webhooks, and the one write converge makes
// (bootstrap's commit).
//
// It needs no controller manager; the reconciler wires it:
//
//   - AuthFromSecret builds the credentials of a Source from the Secret named by
//     spec.source.secretRef; sources.Ref(spec.source.ref) converts the API ref.
//   - Resolve lists the remote's refs (one ls-remote) and returns the Revision the ref points
//     at, rendered as <ref>@sha1:<hex> (ParseRevision reads it back).
//   - Cache.Checkout returns the read-only directory of a commit: from the cache without
//     network, or after a shallow fetch of that one commit, written atomically, within size
//     and file-count caps; files unchanged since an earlier checkout of the repository are
//     hard links of that checkout's. Cache.GC removes checkouts no SyncTarget needs any more.
//   - Scheduler polls every distinct (URL, ref, credentials) once for all its subscribers, on
//     an interval or a cron schedule, with bounded concurrency, timeouts and backoff (client-go's
//     per-item exponential failure rate limiter), checks new revisions out into the Cache, and
//     calls the subscribers back. Trigger polls a source now; triggers coalesce.
//   - Verifier checks that a revision's commit and/or annotated tag carry an OpenPGP or SSH
//     (git's gpg.format=ssh) signature by a key of TrustedKeysFromSecret, fetching only those
//     objects when the server can filter, and remembers each verdict per revision and keys.
//   - OpenBranch opens a branch for writing (converge bootstrap): ReadFile, WriteFile, then Push
//     makes one commit of the files on the fetched tip and pushes it, through the same
//     transport, credentials and host key policy as the polls.
//   - NewWebhookHandler serves POST /hooks/git: it verifies the signature of GitHub, GitLab,
//     Gitea/Forgejo and generic push webhooks against each following target's secret and
//     triggers exactly those. NormalizeURL is the repository identity it matches on.
//
// Errors from the network are *Error values that match one kind each (ErrAuthFailed,
// ErrUnknownHostKey, ErrHostKeyMismatch, ErrUnreachable, ErrTimeout, ErrRefNotFound, …) and
// never contain credentials; RedactURL strips them from URLs for messages.
package sources
