// Package e2e holds the whole-system tests: the real converge binary in its own process
// against a local cluster (controller-manager, scheduler, kwok nodes) and a real git
// server on loopback.
package e2e
