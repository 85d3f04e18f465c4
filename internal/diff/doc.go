// Package diff is the engine of `converge diff` and `converge build`: it renders a
// directory or a SyncTarget's source exactly as the daemon does (sync/render, confined to
// the repository root, target namespace and owner labels), then compares every object
// with the cluster through a server-side dry-run apply with the daemon's field manager,
// in the daemon's stage order, and lists what an apply would create, change or prune.
//
// Secret values never leave this package: the data and stringData of Secrets, and their
// kubectl last-applied-configuration annotation, are masked in every diff it produces,
// whoever owns those fields.
package diff
