// Command bench is converge's benchmark: it builds the converge binary, starts a local
// cluster (etcd, kube-apiserver, controller-manager, scheduler, kwok nodes), a loopback git
// server and `converge serve` as its own process, runs its workloads — many, shards (many's
// shape split between two `converge serve` shards), big, idle, change, drift and fetch — each figure the median of BENCH_REPS repetitions with min
// and max, every comparison a ratio of two runs of this invocation, prints a table and
// writes the figures as JSON.
//
//	make bench                        # BENCH_N=100 BENCH_REPS=3
//	BENCH_N=100,500,1000 make bench   # every N in one invocation
//	BENCH_WORKLOADS=big,idle make bench
//
// Variables: BENCH_N, BENCH_SHARD_N (default 5000), BENCH_REPS, BENCH_OUT (default bin/bench/results.json; empty: no
// file), BENCH_WORKLOADS, BENCH_BIG_CONFIGMAPS, BENCH_BIG_DEPLOYMENTS, BENCH_FETCH_FILES,
// BENCH_POLL_INTERVAL_SECONDS, BENCH_FLOOR_CONCURRENCY, BENCH_NODES, BENCH_DAEMON_ARGS.
// BENCH_BASELINES=flux (set by `make bench`, which builds Flux first with `make flux`) runs
// Flux's source-controller and kustomize-controller on the same workloads in the same
// invocation, beside converge: a Flux column and a converge/Flux ratio per row
// (BENCH_FLUX_DIR: where `make flux` left them, default bin/flux). BENCH_PROFILE=1 writes a
// CPU and a heap profile of the daemon per workload under bin/bench/ and notes the top five
// functions by CPU of each. Result files are figures from one machine at one moment: never
// commit them as reference figures.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

func main() {
	os.Exit(run())
}

func run() (code int) {
	cfg, err := ConfigFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tb := &programTB{}
	defer func() {
		if p := recover(); p != nil {
			fe, ok := p.(fatalError)
			if !ok {
				tb.runCleanups()
				panic(p)
			}
			fmt.Fprintln(os.Stderr, "bench:", fe.msg)
			code = 1
		}
		tb.runCleanups()
	}()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	b, err := Setup(ctx, tb, cfg, logf)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	runErr := b.Run(ctx)
	res := b.Results()
	fmt.Println()
	res.WriteTable(os.Stdout)
	if cfg.Out != "" {
		out := cfg.Out
		if !filepath.IsAbs(out) {
			out = filepath.Join(b.root, out)
		}
		if err := res.WriteJSON(out); err != nil {
			fmt.Fprintln(os.Stderr, "bench: writing results:", err)
			code = 1
		} else {
			fmt.Printf("\nresults: %s\n", out)
		}
	}
	if runErr != nil {
		fmt.Fprintln(os.Stderr, "bench:", runErr)
		return 1
	}
	return code
}
