// Package notify delivers what happens to SyncTargets — a revision deploying, deployed,
// failed, rolled back, a stall — to where the people who pushed look: commit statuses on
// GitHub, GitLab, Gitea and Bitbucket, and messages to Slack, Microsoft Teams, Discord or
// a generic webhook. A Notifier names the provider and which SyncTargets and events.
//
// It runs in the daemon next to the sync reconciler and is decoupled from it: it reads
// the SyncTargets' status as the reconciler writes it (history entries, the Reconciling
// and Stalled conditions), so a sync never waits for a delivery. Each Notifier has one
// worker that delivers in order, with retries (exponential backoff with jitter, honouring
// Retry-After), a per-provider rate limit and a give-up after a number of tries. What
// was delivered is recorded per SyncTarget in the Notifier's status (a cursor), so a
// restart re-derives exactly what was not delivered yet: nothing is lost, nothing sent
// twice (save a crash between a provider's answer and the status write).
package notify
