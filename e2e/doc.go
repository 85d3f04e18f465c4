// Package e2e holds the whole-system tests: the real converge binary in its own process
// against a local cluster (controller-manager, scheduler, 3 kwok nodes) and real git
// servers on loopback (HTTP with basic auth, and SSH), driven only through git pushes,
// webhooks, API calls and the converge CLI — with faults: a daemon killed mid-apply, an
// API server restart, a git server that goes away, a leader that dies.
//
// TestMain builds the binary once and starts what the scenarios share: the cluster, the
// git servers and one `converge serve` for every SyncTarget without the e2e-shard label.
// Scenarios that kill or restart daemons label their SyncTargets and run daemons of their
// own. Each scenario has its own namespaces and repositories and runs in parallel with the
// others, except the API server restart, which runs alone. At the end TestMain prints a
// table of the scenarios: result, wall time and the latencies they measured.
//
// Run it with `make e2e` (or `go test ./e2e/`; `make test` runs it too). It needs the
// control-plane binaries of `make controlplane`; -short skips it. When a scenario fails,
// the daemons' logs are kept and their directory is printed.
package e2e
