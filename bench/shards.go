package main

import (
	"context"
	"fmt"
	"time"

	"github.com/converge-gitops/converge/internal/gittest"
)

// shardLabel splits the shards workload's SyncTargets between the two daemons.
const shardLabel = "bench.converge.dev/shard"

// shardsRun is one repetition of shards.
type shardsRun struct {
	ready    time.Duration
	rss      [2]float64 // MiB, per shard, VmHWM
	anon     [2]float64 // MiB, per shard, peak RssAnon
	requests float64    // sent by both daemons, per SyncTarget
}

// runShards measures the scale-out path: N SyncTargets of many's shape split between two
// `converge serve` shards on one cluster (--watch-label-selector on a label of their own),
// timed from the first create until all are Ready, with each shard's peak RSS. Kubernetes
// is the coordination: no shard knows of the other.
func (b *Bench) runShards(ctx context.Context) error {
	n := b.cfg.ShardN
	repo := gittest.NewRepo(b.tb, b.gitRoot, fmt.Sprintf("shards-%d", n))
	revision := "main@sha1:" + repo.Commit(b.tb, "main", manyFiles(n))
	url := b.git.RepoURL(repo)
	names, namespaces := make([]string, n), make([]string, n)
	for i := range n {
		names[i], namespaces[i] = fmt.Sprintf("shards-%05d", i), manyNamespace(i)
	}
	var ready, rssA, rssB, anonA, anonB, perTarget []float64
	for rep := range b.cfg.Reps {
		r, err := b.shardsOnce(ctx, rep, url, revision, names)
		if err != nil {
			return fmt.Errorf("shards N=%d rep %d: %w", n, rep+1, err)
		}
		b.logf("shards N=%d rep %d/%d: all Ready in %s; peak RSS shard a %.0f MiB, shard b %.0f MiB; %.1f API requests sent per SyncTarget",
			n, rep+1, b.cfg.Reps, r.ready.Round(time.Millisecond), r.rss[0], r.rss[1], r.requests)
		ready, perTarget = append(ready, r.ready.Seconds()), append(perTarget, r.requests)
		rssA, rssB = append(rssA, r.rss[0]), append(rssB, r.rss[1])
		anonA, anonB = append(anonA, r.anon[0]), append(anonB, r.anon[1])
		if err := b.deleteTargets(ctx, workloadShards); err != nil {
			return err
		}
		if err := b.deleteNamespaces(ctx, namespaces...); err != nil {
			return err
		}
	}
	w := fmt.Sprintf("shards N=%d", n)
	var readyTarget, rssTarget *Target
	if n == 5000 {
		readyTarget, rssTarget = &Target{Text: "≤ 4 min", Max: 240}, &Target{Text: "≤ 200 MiB", Max: 200}
	}
	b.res.add(w, "create → all Ready (2 shards)", Seconds, ready, "", nil, readyTarget)
	b.res.add(w, "shard a peak RSS (VmHWM)", MiB, rssA, "", nil, rssTarget)
	b.res.add(w, "shard b peak RSS (VmHWM)", MiB, rssB, "", nil, rssTarget)
	b.res.add(w, "shard a peak anonymous RSS (sampled)", MiB, anonA, "", nil, nil)
	b.res.add(w, "shard b peak anonymous RSS (sampled)", MiB, anonB, "", nil, nil)
	b.res.add(w, "API requests sent per SyncTarget", Requests, perTarget, "", nil, nil)
	return nil
}

func (b *Bench) shardsOnce(ctx context.Context, rep int, url, revision string, names []string) (shardsRun, error) {
	var daemons [2]*daemon
	for i, shard := range []string{"a", "b"} {
		d, err := b.startDaemon(ctx, fmt.Sprintf("shard-%s-%d", shard, rep), "--watch-label-selector", shardLabel+"="+shard)
		if err != nil {
			return shardsRun{}, err
		}
		defer b.stopDaemon(d)
		daemons[i] = d
	}
	var sent0 float64
	for _, d := range daemons {
		c, err := d.counters(ctx)
		if err != nil {
			return shardsRun{}, err
		}
		sent0 += c.requests.total()
	}
	n := len(names)
	tw, err := b.watchTargetsReady(ctx, names, revision, 15*time.Minute+time.Duration(n)*time.Second)
	if err != nil {
		return shardsRun{}, err
	}
	start := time.Now()
	err = b.createManyTargets(ctx, url, names, func(i int) map[string]string {
		return map[string]string{workloadLabel: workloadShards, shardLabel: []string{"a", "b"}[i%2]}
	})
	if err != nil {
		tw.stop()
		return shardsRun{}, fmt.Errorf("creating SyncTargets: %w", err)
	}
	done, err := tw.wait()
	if err != nil {
		return shardsRun{}, fmt.Errorf("%w%s%s", err, daemons[0].tail(), daemons[1].tail())
	}
	r := shardsRun{ready: done.Sub(start)}
	var sent1 float64
	for i, d := range daemons {
		c, err := d.counters(ctx)
		if err != nil {
			return r, err
		}
		sent1 += c.requests.total()
		r.anon[i] = d.peakAnonMiB()
		if r.rss[i], err = peakRSS(d.pid()); err != nil {
			return r, err
		}
		if err := d.running(); err != nil {
			return r, err
		}
	}
	r.requests = (sent1 - sent0) / float64(n)
	return r, b.checkMany(ctx, n)
}
