package soak

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"
)

// Report is what a soak run did and found. It is safe for concurrent use.
type Report struct {
	Seed     int64
	Duration time.Duration

	mu         sync.Mutex
	ops        map[string]int
	faults     map[string]int
	checks     map[int]int
	deployed   int
	rolledBack int
	latencies  []time.Duration
	violations []Violation
	first      map[string]time.Time // violation key → when first seen
}

// Op counts one operation of the driver (a commit of a kind, a drift edit, …).
func (r *Report) Op(kind string) { r.count(&r.ops, kind) }

// Fault counts one fault injected.
func (r *Report) Fault(kind string) { r.count(&r.faults, kind) }

func (r *Report) count(m *map[string]int, k string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if *m == nil {
		*m = map[string]int{}
	}
	(*m)[k]++
}

// Checked counts one check of an invariant and records what it found; a violation seen
// again (the same invariant, object and detail) is recorded once.
func (r *Report) Checked(invariant int, found []Violation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.checks == nil {
		r.checks, r.first = map[int]int{}, map[string]time.Time{}
	}
	r.checks[invariant]++
	for _, v := range found {
		if _, seen := r.first[v.String()]; seen {
			continue
		}
		r.first[v.String()] = time.Now()
		r.violations = append(r.violations, v)
	}
}

// Deployed records a good revision that became healthy, commit → healthy taking d.
func (r *Report) Deployed(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deployed++
	r.latencies = append(r.latencies, d)
}

// RolledBack records a revision rolled back.
func (r *Report) RolledBack() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rolledBack++
}

// Latencies are the commit → healthy times of the revisions deployed.
func (r *Report) Latencies() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.latencies)
}

// Violations lists what was found, in the order found.
func (r *Report) Violations() []Violation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.violations)
}

// Checks is how many checks of each invariant ran.
func (r *Report) Checks() map[int]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[int]int, len(r.checks))
	for k, v := range r.checks {
		out[k] = v
	}
	return out
}

// Percentile is the p-th percentile (0 < p ≤ 100) of ds by nearest rank; 0 for none.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p/100*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// Write prints the report: the seed to replay, what ran, what was found.
func (r *Report) Write(w io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, _ = fmt.Fprintf(w, "soak report: seed %d, %s (replay: SOAK_SEED=%d SOAK_DURATION=%s make soak)\n",
		r.Seed, r.Duration.Round(time.Second), r.Seed, r.Duration.Round(time.Second))
	line := func(title string, m map[string]int) {
		total := 0
		parts := ""
		for _, k := range slices.Sorted(maps.Keys(m)) {
			total += m[k]
			parts += fmt.Sprintf(" %s=%d", k, m[k])
		}
		_, _ = fmt.Fprintf(w, "  %-11s %d:%s\n", title, total, parts)
	}
	line("operations", r.ops)
	line("faults", r.faults)
	_, _ = fmt.Fprintf(w, "  revisions   %d deployed healthy, %d rolled back\n", r.deployed, r.rolledBack)
	_, _ = fmt.Fprintf(w, "  commit → healthy: p50 %s, p99 %s (%d)\n", Percentile(r.latencies, 50).Round(time.Millisecond),
		Percentile(r.latencies, 99).Round(time.Millisecond), len(r.latencies))
	checks, total := "", 0
	for i := NoHalfApplied; i <= BoundedResources; i++ {
		checks += fmt.Sprintf(" %d=%d", i, r.checks[i])
		total += r.checks[i]
	}
	_, _ = fmt.Fprintf(w, "  checks      %d by invariant:%s\n", total, checks)
	_, _ = fmt.Fprintf(w, "  violations  %d\n", len(r.violations))
	for _, v := range r.violations {
		_, _ = fmt.Fprintf(w, "    %s  %s (seed %d)\n", r.first[v.String()].UTC().Format("15:04:05.000"), v, r.Seed)
	}
}
