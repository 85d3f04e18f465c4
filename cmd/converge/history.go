package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// historyOptions are the flags of `converge history`.
type historyOptions struct {
	cli    cliOptions
	output outputOptions
}

func newHistoryCommand() *cobra.Command {
	o := &historyOptions{}
	cmd := &cobra.Command{
		Use:   "history NAME",
		Short: "Show the sync history of a SyncTarget, newest first",
		Long: `Show the sync attempts of a SyncTarget, newest first: the revision, whether it succeeded,
failed or was rolled back, when it started and how long it took, the objects it created (+),
configured (~) and deleted (-), and what happened.

A revision from this table can be passed to converge rollback --to.`,
		Example: `  converge history shop -n team-a
  converge history shop -o yaml`,
		Args:              usageArgs(cobra.ExactArgs(1)),
		ValidArgsFunction: completeSyncTargets(&o.cli),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), args[0])
		},
	}
	o.cli.BindFlags(cmd.Flags(), false)
	o.output.BindFlags(cmd)
	return cmd
}

func (o *historyOptions) run(ctx context.Context, out, errOut io.Writer, name string) error {
	if err := o.output.Validate(); err != nil {
		return err
	}
	st, _, err := getSyncTarget(ctx, &o.cli, name)
	if err != nil {
		return err
	}
	if o.output.format != outputTable {
		h := st.Status.History
		if h == nil {
			h = []convergev1.HistoryEntry{}
		}
		return printStructured(out, o.output.format, h)
	}
	if len(st.Status.History) == 0 {
		_, err := fmt.Fprintf(errOut, "SyncTarget %s/%s has no history yet.\n", st.Namespace, st.Name)
		return err
	}
	return printHistory(out, st.Status.History, time.Now())
}

// getSyncTarget reads the SyncTarget name in the namespace the flags select.
func getSyncTarget(ctx context.Context, o *cliOptions, name string) (*convergev1.SyncTarget, client.Client, error) {
	ns, err := o.Namespace()
	if err != nil {
		return nil, nil, err
	}
	c, _, err := o.Client()
	if err != nil {
		return nil, nil, err
	}
	st := &convergev1.SyncTarget{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, st); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, notFound(ns, name)
		}
		return nil, nil, fmt.Errorf("reading SyncTarget %s/%s: %w", ns, name, err)
	}
	return st, c, nil
}

// printHistory writes the history table; now makes the ages reproducible. The history of
// an OCI artifact's SyncTarget has a FROM column: the revision each artifact says it was
// made from.
func printHistory(out io.Writer, history []convergev1.HistoryEntry, now time.Time) error {
	origins := slices.ContainsFunc(history, func(e convergev1.HistoryEntry) bool { return e.Origin != nil })
	head := []string{"REVISION", "RESULT", "STARTED", "DURATION", "CHANGES", "MESSAGE"}
	if origins {
		head = slices.Insert(head, 1, "FROM")
	}
	rows := [][]string{head}
	for _, e := range history {
		row := []string{
			shortRevision(e.Revision),
			string(e.Result),
			humanAge(e.StartedAt.Time, now),
			entryDuration(e),
			fmt.Sprintf("+%d ~%d -%d", e.Created, e.Configured, e.Deleted),
			tableMessage(e.Message),
		}
		if origins {
			from := "-"
			if e.Origin != nil && e.Origin.Revision != "" {
				from = oneLine(shortRevision(e.Origin.Revision), 48)
			}
			row = slices.Insert(row, 1, from)
		}
		rows = append(rows, row)
	}
	var t alignedTable
	return t.write(out, rows)
}

// entryDuration is how long the sync of a history entry took: its duration to the
// millisecond, or for an entry recorded without one the difference of its times, which
// are to the second: "<1s" when they are equal.
func entryDuration(e convergev1.HistoryEntry) string {
	switch {
	case e.Duration != nil:
		return syncDuration(e.Duration.Duration)
	case e.FinishedAt == nil || e.FinishedAt.IsZero():
		return "-"
	case e.FinishedAt.Equal(&e.StartedAt):
		return "<1s"
	}
	return syncDuration(e.FinishedAt.Sub(e.StartedAt.Time))
}

// syncDuration prints how long a sync took: 850ms, 4.2s, 47s, 2m30s.
func syncDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return duration.HumanDuration(d)
}
