// Package sources turns a SyncTarget's spec.source into a checked-out tree at an exact
// commit: ref resolution, shallow fetch, a cache of read-only checkouts per commit,
// authentication, poll scheduling and signed push webhooks.
package sources
