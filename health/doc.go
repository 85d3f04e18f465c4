// Package health decides the readiness of applied objects: kstatus for well-known kinds,
// CEL rules for custom ones, waited for within a deadline.
//
// A Checker learns the state of the objects it waits for from watch events, not by
// polling: Wait opens one list and one watch per (kind, namespace) group, narrowed by the
// caller's label selector or, for a group of a single object, by its name, and returns as
// soon as every object is Current, as soon as one has Failed, or at the deadline. Waiting
// on a thousand ConfigMaps therefore costs a handful of API requests, and a Deployment is
// seen ready the moment its controller says so.
//
// It is converge's one readiness engine: the daemon waits for a revision's objects with
// it (New, NewForClients), and an apply waits between its stages for what the next stage
// needs, a CRD Established or a Namespace Active, with it too (NewForClient, reading
// through the apply's own client and identity; a client that cannot watch is listed
// again every 200ms instead).
//
// The pure parts — evaluating CEL rules, computing one object's status, summarising the
// statuses into a report and an error — are plain functions over plain data.
//
// Messages this package produces end up in SyncTarget status and events. They are built
// from kstatus results, condition reasons and messages and the user's own expressions,
// never from object contents; Secrets are watched as metadata only.
package health
