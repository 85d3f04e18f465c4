// Package reconciler is the SyncTarget reconciler. Reconcile gets the SyncTarget, runs the
// gates (spec, dependencies, sync windows) and then one run of the sync, whose methods are
// the steps: resolve the source, read the spec.postBuild variables (variables.go), then
// hold the healthy revision (while the source points at a refused one), heal drift (steady
// state), or attempt the revision — checkout, render, record the pending inventory, apply
// (sync/apply), prune, wait for health — and roll back to the last healthy revision when
// it fails. Every step ends in one outcome value, which finish turns into conditions,
// history, event and requeue; the only other writer of conditions is the progress note of
// a step that lasts (run.progress), which the outcome then replaces.
//
// The reconciler's dependencies are interfaces (interfaces.go): Fetcher (the source),
// Renderer, HealthChecker, Applier, and the Clusters of sync/cluster (the daemon's own
// cluster and the remote ones, each one scope, looked up once per run). NewReconciler
// wires the daemon's; the package reconcilertest has fakes that drive the whole flow in
// unit tests, remote targets included. What a
// SyncTarget's inputs are (credentials, keys, render options, prune rules) is read through
// sync/target, shared with converge diff and build.
//
// The decisions are plain functions of plain values in policy.go (refused? steady? roll
// back to what? does this revision cut that wait short?), and every error is classified
// once (classify) into its reason and what follows: stall, retry with backoff, wait for
// the source, or fail the revision. What the reconciler remembers of a SyncTarget between
// reconciles is one targetState; Forget drops it, with what the fetcher and the drift
// watcher keep of it, when the SyncTarget is gone.
package reconciler
