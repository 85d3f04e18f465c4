// Package actions are the writes a user makes on a SyncTarget — ask for a reconcile,
// suspend, resume, roll back to (pin) a revision of its history — shared by the CLI
// verbs and the web UI, so that both do exactly the same API calls with the caller's
// own client (and so the caller's own rights).
package actions
