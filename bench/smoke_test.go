package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBenchSmoke runs every workload of the benchmark once at tiny sizes, through the code
// `make bench` runs, so that the benchmark cannot rot. It checks that the workloads complete
// — every SyncTarget Ready, every object present, every figure measured — and never how fast:
// timings belong to `make bench`, not to assertions.
func TestBenchSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cluster and the converge daemon")
	}
	cfg := Config{
		Workloads:           slices.Clone(allWorkloads),
		Reps:                1,
		ManyN:               []int{3},
		HelmSources:         []string{helmSourceGit, helmSourceRepo},
		ShardN:              4,
		BigConfigMaps:       6,
		BigDeployments:      2,
		FetchFiles:          150,
		PollIntervalSeconds: 2,
		FloorConcurrency:    4,
		Nodes:               1,
		PreviewN:            2,
		PreviewIdle:         2 * time.Second,
		Out:                 filepath.Join(t.TempDir(), "results.json"),
		Profile:             true,
	}
	b, err := Setup(t.Context(), t, cfg, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	res := b.Results()

	want := []struct{ workload, metric string }{
		{"many N=3", "create → all Ready"},
		{"many N=3", "daemon peak RSS (VmHWM)"},
		{"oci N=3", "create → all Ready"},
		{"oci N=3", "daemon peak RSS (VmHWM)"},
		{"oci N=3", "API requests sent per SyncTarget"},
		{"shards N=4", "create → all Ready (2 shards)"},
		{"shards N=4", "shard a peak RSS (VmHWM)"},
		{"shards N=4", "shard b peak RSS (VmHWM)"},
		{workloadBig, "cold sync → Ready (8 objects)"},
		{workloadIdle, "no-op reconcile of big: wall time"},
		{workloadIdle, "no-op reconcile of big: API requests (apiserver Δ)"},
		{workloadIdle, "no-op reconcile of big: requests the daemon sent"},
		{workloadChange, "push → applied (webhook)"},
		{workloadChange, "push → healthy (webhook)"},
		{workloadChange, "push → applied (poll 2s)"},
		{workloadChange, "push → healthy (poll 2s)"},
		{workloadDrift, "edit → restored"},
		{bigTarget, "daemon peak RSS (VmHWM), big group"},
		{workloadFetch, "cold fetch, 150 files"},
		{"helm N=3 (git)", "create → all Ready"},
		{"helm N=3 (git)", "API requests per idle reconcile per target"},
		{"helm N=3 (git)", "version bump → all Ready"},
		{"fleet N=3", "create set → all Ready"},
		{"fleet N=3", "template change → all Ready"},
		{"fleet N=3", "API requests sent per target (cold)"},
		{"fleet N=3", "GET secrets per target (change)"},
		{"fleet N=3", "GET secrets per target (reconcile, nothing new)"},
		{"fleet N=3", "GET secrets per target (kubeconfig Secret written)"},
		{"previews N=2", "pull request opened → preview Ready (webhook)"},
		{"previews N=2", "1 more pull requests opened → their previews Ready"},
		{"previews N=2", "API requests sent per minute per preview, idle"},
		{"previews N=2", "2 pull requests closed → all previews gone"},
	}
	for _, w := range want {
		r := res.find(w.workload, w.metric)
		if r == nil {
			t.Errorf("no figure for %s / %s", w.workload, w.metric)
			continue
		}
		if len(r.Samples) != cfg.Reps {
			t.Errorf("%s / %s: %d samples, want %d", w.workload, w.metric, len(r.Samples), cfg.Reps)
		}
		for _, v := range r.Samples {
			if v < 0 || (r.Unit != Requests && v == 0) {
				t.Errorf("%s / %s: implausible sample %v", w.workload, w.metric, v)
			}
		}
	}
	// The chart-repository half of helm runs, or says why not.
	if res.find("helm N=3 (repo)", "create → all Ready") == nil &&
		!slices.ContainsFunc(res.Notes, func(n string) bool { return strings.Contains(n, "helm (repo): skipped: no chart fetcher") }) {
		t.Errorf("helm from a chart repository neither ran nor was noted as skipped: %q", res.Notes)
	}
	for _, r := range res.Rows {
		if r.Baseline != nil && (len(r.Baseline.Samples) != cfg.Reps || (r.Median > 0 && r.Baseline.Median > 0 && r.Ratio <= 0)) {
			t.Errorf("%s / %s: baseline %s has %d samples, ratio %v", r.Workload, r.Metric, r.BaselineName, len(r.Baseline.Samples), r.Ratio)
		}
	}

	// BENCH_PROFILE: a CPU and a heap profile per workload, and its top functions noted.
	for _, w := range []string{"many N=3", "oci N=3", workloadBig, workloadIdle, workloadChange, workloadDrift} {
		for _, kind := range []string{"cpu", "heap"} {
			if fi, err := os.Stat(filepath.Join(b.profileDir(), sanitize(w)+"."+kind+".pprof")); err != nil || fi.Size() == 0 {
				t.Errorf("no %s profile of %s: %v", kind, w, err)
			}
		}
		if !slices.ContainsFunc(res.Notes, func(n string) bool { return strings.HasPrefix(n, "profile "+w+" ") && strings.Contains(n, "top CPU") }) {
			t.Errorf("no note of the top functions of %s in %q", w, res.Notes)
		}
	}

	// The table and the JSON are what `make bench` prints and writes.
	var table strings.Builder
	res.WriteTable(&table)
	t.Log("\n" + table.String())
	if err := res.WriteJSON(cfg.Out); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(cfg.Out)
	if err != nil {
		t.Fatal(err)
	}
	var back Results
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatalf("the JSON does not read back: %v", err)
	}
	if len(back.Rows) != len(res.Rows) {
		t.Errorf("the JSON holds %d rows, want %d", len(back.Rows), len(res.Rows))
	}
}
