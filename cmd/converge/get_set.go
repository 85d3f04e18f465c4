package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"unicode"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// printSetPullRequests prints, after a set's SyncTargets, the pull requests its
// pullRequests generators read: each with its previews and their readiness, or why it
// has none, and its page.
func printSetPullRequests(ctx context.Context, c client.Client, out io.Writer, key client.ObjectKey, targets []convergev1.SyncTarget) error {
	set := &convergev1.SyncTargetSet{}
	if err := c.Get(ctx, key, set); err != nil {
		return fmt.Errorf("reading the SyncTargetSet %s: %w", key, err)
	}
	if len(set.Status.PullRequests) == 0 {
		return nil
	}
	ready := map[string]string{}
	for i := range targets {
		st := &targets[i]
		ready[st.Name] = "Unknown"
		if c := apimeta.FindStatusCondition(st.Status.Conditions, convergev1.ReadyCondition); c != nil {
			ready[st.Name] = string(c.Status)
		}
	}
	rows := [][]string{{"PULL REQUEST", "AUTHOR", "BRANCH", "PREVIEW", "READY", "URL / WAITING"}}
	for _, pr := range set.Status.PullRequests {
		preview, state, note := "-", "-", pr.URL
		if pr.Waiting != "" {
			note = pr.Waiting
		} else if len(pr.SyncTargets) > 0 {
			preview = strings.Join(pr.SyncTargets, ",")
			var states []string
			for _, n := range pr.SyncTargets {
				states = append(states, orDash(ready[n]))
			}
			state = strings.Join(states, ",")
		}
		rows = append(rows, []string{fmt.Sprintf("#%d", pr.Number), forgeText(pr.Author), forgeText(pr.Branch),
			preview, state, forgeText(note)})
	}
	if _, err := fmt.Fprintln(out); err != nil {
		return err
	}
	var t alignedTable
	return t.write(out, rows)
}

// forgeText is what a forge said, for a terminal: on one line, without control
// characters (an escape sequence in a branch name is shown, not run).
func forgeText(s string) string {
	return tableMessage(strings.Map(func(r rune) rune {
		if unicode.IsControl(r) && r != '\n' && r != '\t' {
			return '?'
		}
		return r
	}, s))
}
