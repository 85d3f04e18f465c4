// Package apply holds converge's apply rules, the one engine both the daemon and
// `converge diff` use: the stage split (CRDs, Namespaces and ClusterRoles, then class
// definitions, then the rest), the read-only Plan (server-side dry-run with converge's
// field manager, each object's Policy from converge's and Flux's annotations, drift
// comparison), the Applier that writes what a plan says differs and takes over in place
// the objects other tools made (takeover.go), the inventory, the prune filter and prune,
// the guard against pruning everything because a revision renders nothing, the
// ownership check between SyncTargets, and the redaction of Secret values from the API
// server's errors.
//
// The daemon plans, then writes; `converge diff` plans and formats. Plan never writes.
// Between two stages the Applier waits for what the next one needs (a CRD Established, a
// Namespace Active) with the health package's engine, the one the daemon waits for a
// revision with.
package apply
