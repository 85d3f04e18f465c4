package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// printSyncs writes a line to out for every sync attempt the SyncTargets of the cluster
// record in their history, once it ended (the newest entry of each, then each new one),
// until ctx ends: what a person running `converge dev` reads instead of the daemon's log.
func printSyncs(ctx context.Context, cfg *rest.Config, out io.Writer) error {
	scheme := runtime.NewScheme()
	if err := convergev1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	printed := map[client.ObjectKey]string{}
	for ctx.Err() == nil {
		w, err := c.Watch(ctx, &convergev1.SyncTargetList{})
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for ev := range w.ResultChan() {
			st, ok := ev.Object.(*convergev1.SyncTarget)
			if !ok || len(st.Status.History) == 0 {
				continue
			}
			e := st.Status.History[0]
			key, id := client.ObjectKeyFromObject(st), e.Revision+" "+e.StartedAt.UTC().String()
			if printed[key] == id {
				continue
			}
			printed[key] = id
			if _, err := fmt.Fprintln(out, syncLine(key, e)); err != nil {
				w.Stop()
				return err
			}
		}
		w.Stop()
	}
	return nil
}

// syncLine is one sync attempt in a line: when it ended, the SyncTarget, the revision
// (its digest shortened), the result, how long it took and what it did, or why it failed.
func syncLine(key client.ObjectKey, e convergev1.HistoryEntry) string {
	at := e.StartedAt.Local()
	if e.FinishedAt != nil {
		at = e.FinishedAt.Local()
	}
	var took string
	if e.Duration != nil {
		took = " in " + e.Duration.Round(100*time.Millisecond).String()
	}
	line := fmt.Sprintf("%s  %s  %s  %s%s", at.Format("15:04:05"), key, shortRevision(e.Revision), e.Result, took)
	if e.Result == convergev1.SyncSucceeded {
		return line + " (" + summary(int(e.Created), int(e.Configured), int(e.Deleted)) + ")"
	}
	return line + ": " + tableMessage(e.Message)
}

// summary says what an attempt changed: "2 created, 1 configured", or "no change".
func summary(created, configured, deleted int) string {
	var parts []string
	for _, p := range []struct {
		n    int
		what string
	}{{created, "created"}, {configured, "configured"}, {deleted, "pruned"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.what))
		}
	}
	if len(parts) == 0 {
		return "no change"
	}
	return strings.Join(parts, ", ")
}
