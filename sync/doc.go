// Package sync is the SyncTarget reconciler and its steps: render, staged server-side
// apply, prune, rollback, status and history. Rendering, inventory diffing and rollback
// decisions are plain functions, usable and testable without a running manager.
package sync
