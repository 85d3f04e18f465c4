// Package health decides the readiness of applied objects: kstatus for well-known kinds,
// CEL rules for custom ones, waited for within a deadline.
package health
