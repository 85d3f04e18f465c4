// Package reconciler is the SyncTarget reconciler. Reconcile gets the SyncTarget, runs the
// gates (spec, dependencies, sync windows) and then one run of the sync, whose methods are
// the steps: resolve the source, read the spec.postBuild variables (variables.go), then hold the healthy revision (while the source points
// at a refused one), heal drift (steady state), or attempt the revision — checkout, render,
// record the pending inventory, apply (sync/apply), prune, wait for health — and roll back
// to the last healthy revision when it fails. Every step ends in one outcome value, and
// summarize alone turns it into conditions, history, event and requeue.
//
// The decisions are plain functions of plain values in policy.go (refused? steady? roll
// back to what? does this revision cut that wait short?), and every error is classified
// once (classify) into its reason and what follows: stall, retry with backoff, wait for
// the source, or fail the revision. What the reconciler remembers of a SyncTarget between
// reconciles is one targetState.
package reconciler
