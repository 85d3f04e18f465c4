package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Workload names, in the order they run.
const (
	workloadMany     = "many"
	workloadOCI      = "oci"
	workloadShards   = "shards"
	workloadBig      = "big"
	workloadIdle     = "idle"
	workloadChange   = "change"
	workloadDrift    = "drift"
	workloadFetch    = "fetch"
	workloadHelm     = "helm"
	workloadFleet    = "fleet"
	workloadPreviews = "previews"
)

var allWorkloads = []string{workloadMany, workloadOCI, workloadShards, workloadBig, workloadIdle, workloadChange, workloadDrift, workloadFetch, workloadHelm, workloadFleet, workloadPreviews}

// Config says what to run and at which sizes. The program reads it from BENCH_* variables;
// the smoke test sets tiny sizes directly.
type Config struct {
	// Workloads to run (default: all). idle, change and drift run on big's SyncTarget.
	Workloads []string
	// Reps is the number of repetitions of every figure (BENCH_REPS, default 3).
	Reps int
	// ManyN lists the SyncTarget counts of the many workload (BENCH_N, default 100;
	// a comma-separated list runs each).
	ManyN []int
	// HelmSources are the chart sources of the helm workload, run in turn (BENCH_HELM_SOURCE,
	// comma-separated, default git): "git", the chart directory in a Git repository, and
	// "repo", a loopback HTTP chart repository (spec.chart; skipped, and noted, when the
	// daemon fetches no charts from chart repositories).
	HelmSources []string
	// ShardN is the SyncTarget count of the shards workload, split between two daemons
	// (BENCH_SHARD_N, default 5000).
	ShardN int
	// BigConfigMaps and BigDeployments size big (BENCH_BIG_CONFIGMAPS, default 1000;
	// BENCH_BIG_DEPLOYMENTS, default 100).
	BigConfigMaps, BigDeployments int
	// FetchFiles is the size of the fetch workload's repository (BENCH_FETCH_FILES,
	// default 10 000).
	FetchFiles int
	// PollInterval is the SyncTarget interval of the polling half of change (default 10s).
	PollIntervalSeconds int
	// FloorConcurrency is the number of goroutines of the server-side-apply floor (default 8).
	FloorConcurrency int
	// Nodes is the number of fake kwok nodes (default 2).
	Nodes int
	// Out is where the JSON goes (BENCH_OUT, default bin/bench/results.json); empty: nowhere.
	Out string
	// DaemonArgs are added to every `converge serve` the benchmark starts (BENCH_DAEMON_ARGS,
	// split on spaces), e.g. --pprof-bind-address=127.0.0.1:6060 to profile a workload.
	DaemonArgs []string
	// Baselines are the other tools run on the same workloads in the same invocation
	// (BENCH_BASELINES, comma-separated; "flux" is the one known; `make bench` sets it).
	Baselines []string
	// Profile writes a CPU and a heap profile of the daemon per workload under bin/bench/
	// and notes the top five functions by CPU of each (BENCH_PROFILE=1).
	Profile bool
	// FluxDir holds Flux's controllers and CRDs as `make flux` leaves them (BENCH_FLUX_DIR,
	// default bin/flux).
	FluxDir string
	// IdleWait is how long a timed phase of fleet waits for the machine to be idle before
	// it starts (default a minute); zero starts it at once, as the smoke run does, whose
	// figures are not compared and whose machine is busy with other tests.
	IdleWait time.Duration
	// PreviewN is how many pull requests the previews workload opens (BENCH_PREVIEW_N,
	// default 50).
	PreviewN int
	// PreviewIdle is how long previews counts what the daemon sends with its previews
	// Ready and nothing to do (default 30s).
	PreviewIdle time.Duration
}

// DefaultConfig is the full-size benchmark of the issue, BENCH_N aside (100).
func DefaultConfig() Config {
	return Config{
		Workloads:           slices.Clone(allWorkloads),
		Reps:                3,
		ManyN:               []int{100},
		HelmSources:         []string{helmSourceGit},
		ShardN:              5000,
		BigConfigMaps:       1000,
		BigDeployments:      100,
		FetchFiles:          10_000,
		PollIntervalSeconds: 10,
		FloorConcurrency:    8,
		Nodes:               2,
		Out:                 "bin/bench/results.json",
		FluxDir:             "bin/flux",
		IdleWait:            time.Minute,
		PreviewN:            50,
		PreviewIdle:         30 * time.Second,
	}
}

// ConfigFromEnv reads the BENCH_* variables over the defaults.
func ConfigFromEnv() (Config, error) {
	c := DefaultConfig()
	ints := []struct {
		name string
		dst  *int
		min  int
	}{
		{"BENCH_REPS", &c.Reps, 1},
		{"BENCH_SHARD_N", &c.ShardN, 2},
		{"BENCH_BIG_CONFIGMAPS", &c.BigConfigMaps, 2},
		{"BENCH_BIG_DEPLOYMENTS", &c.BigDeployments, 1},
		{"BENCH_FETCH_FILES", &c.FetchFiles, 1},
		{"BENCH_POLL_INTERVAL_SECONDS", &c.PollIntervalSeconds, 1},
		{"BENCH_FLOOR_CONCURRENCY", &c.FloorConcurrency, 1},
		{"BENCH_NODES", &c.Nodes, 0},
		{"BENCH_PREVIEW_N", &c.PreviewN, 1},
	}
	for _, v := range ints {
		s := strings.TrimSpace(os.Getenv(v.name))
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < v.min {
			return c, fmt.Errorf("%s=%q: want an integer >= %d", v.name, s, v.min)
		}
		*v.dst = n
	}
	if s := strings.TrimSpace(os.Getenv("BENCH_N")); s != "" {
		c.ManyN = nil
		for f := range strings.SplitSeq(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return c, fmt.Errorf("BENCH_N=%q: want positive integers, comma-separated", s)
			}
			c.ManyN = append(c.ManyN, n)
		}
	}
	if s := strings.TrimSpace(os.Getenv("BENCH_WORKLOADS")); s != "" {
		c.Workloads = nil
		for f := range strings.SplitSeq(s, ",") {
			w := strings.TrimSpace(f)
			if !slices.Contains(allWorkloads, w) {
				return c, fmt.Errorf("BENCH_WORKLOADS: unknown workload %q (want some of %s)", w, strings.Join(allWorkloads, ","))
			}
			c.Workloads = append(c.Workloads, w)
		}
	}
	if s := strings.TrimSpace(os.Getenv("BENCH_HELM_SOURCE")); s != "" {
		c.HelmSources = nil
		for f := range strings.SplitSeq(s, ",") {
			switch f = strings.TrimSpace(f); f {
			case helmSourceGit, helmSourceRepo:
				c.HelmSources = append(c.HelmSources, f)
			default:
				return c, fmt.Errorf("BENCH_HELM_SOURCE: unknown chart source %q (want git, repo or both)", f)
			}
		}
	}
	if s, ok := os.LookupEnv("BENCH_OUT"); ok {
		c.Out = s
	}
	c.DaemonArgs = strings.Fields(os.Getenv("BENCH_DAEMON_ARGS"))
	for f := range strings.SplitSeq(os.Getenv("BENCH_BASELINES"), ",") {
		switch f = strings.TrimSpace(f); f {
		case "":
		case baselineFlux:
			c.Baselines = append(c.Baselines, f)
		default:
			return c, fmt.Errorf("BENCH_BASELINES: unknown baseline %q (want flux)", f)
		}
	}
	switch s := strings.TrimSpace(os.Getenv("BENCH_PROFILE")); s {
	case "", "0", "false":
	case "1", "true":
		c.Profile = true
	default:
		return c, fmt.Errorf("BENCH_PROFILE=%q: want 1 or 0", s)
	}
	if s := strings.TrimSpace(os.Getenv("BENCH_FLUX_DIR")); s != "" {
		c.FluxDir = s
	}
	return c, nil
}

// baselineFlux runs Flux's source-controller and kustomize-controller beside converge.
const baselineFlux = "flux"

func (c Config) flux() bool { return slices.Contains(c.Baselines, baselineFlux) }

func (c Config) runs(w string) bool { return slices.Contains(c.Workloads, w) }

// needsCluster is false when only fetch runs.
func (c Config) needsCluster() bool {
	return slices.ContainsFunc(c.Workloads, func(w string) bool { return w != workloadFetch })
}

// runsBigGroup is true when big's SyncTarget is needed.
func (c Config) runsBigGroup() bool {
	return c.runs(workloadBig) || c.runs(workloadIdle) || c.runs(workloadChange) || c.runs(workloadDrift)
}
