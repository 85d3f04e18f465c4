package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/actions"
)

// PinnedFromAnnotation records, as JSON, the ref a SyncTarget followed before
// `converge rollback` pinned it to a commit; `converge resume` restores it.
const PinnedFromAnnotation = actions.PinnedFromAnnotation

// rollbackOptions are the flags of `converge rollback`.
type rollbackOptions struct {
	cli  cliOptions
	wait waitOptions
	to   string
}

func newRollbackCommand() *cobra.Command {
	o := &rollbackOptions{}
	cmd := forOneSyncTarget(&cobra.Command{
		Use:   "rollback NAME --to REVISION",
		Short: "Pin a SyncTarget to a revision of its history",
		Long: `Pin a SyncTarget to a commit: spec.source.ref becomes {commit: <sha>}, and the ref it
followed is recorded in the annotation ` + PinnedFromAnnotation + `, so that converge resume can
restore it. Rolling back a SyncTarget that is pinned already keeps the ref recorded first.

REVISION is a revision from converge history (main@sha1:<hex>), a full commit SHA, or a prefix
of at least 7 hex digits of a commit in the history. With --wait (the default) it then waits
for the sync like converge reconcile.

A SyncTarget of a chart repository (spec.chart) is pinned to a chart revision of its history:
spec.chart.version becomes that exact version (for an oci:// repository, spec.chart.digest its
manifest digest), and the version or range it asked for is recorded in the annotation
` + actions.PinnedChartAnnotation + ` for converge resume. REVISION is then the revision as
converge history prints it (6.5.1@sha256:e8d3f31), in full, or the version alone when one
revision of the history has it.

A chart (of a chart repository, or kept in Git) gets the inline values (spec.helm.values) it
was deployed with at that revision, as its history kept them (up to 4 KiB); the values it had
are recorded in the annotation ` + actions.PinnedValuesAnnotation + ` for converge resume.
What spec.helm.valuesFrom points at is not kept: it stays as it is.`,
		Example: `  converge rollback shop --to main@sha1:0a1b2c3d4e5f60718293a4b5c6d7e8f901234567
  converge rollback shop --to 0a1b2c3
  converge rollback podinfo --to 6.5.1@sha256:e8d3f31
  converge resume shop`,
	}, &o.cli, o.run)
	o.wait.BindFlags(cmd.Flags())
	cmd.Flags().StringVar(&o.to, "to", "", "revision to pin: from converge history, a full commit SHA or a unique prefix of one (required)")
	_ = cmd.RegisterFlagCompletionFunc("to", completeHistoryRevisions(&o.cli))
	return cmd
}

// completeHistoryRevisions completes --to with the revisions of the SyncTarget's history,
// newest first, each described by its result and age.
func completeHistoryRevisions(o *cliOptions) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) != 1 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		st, _, err := getSyncTarget(cmd.Context(), o, args[0])
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		now := time.Now()
		seen := map[string]bool{}
		var revs []cobra.Completion
		for _, e := range st.Status.History {
			if seen[e.Revision] {
				continue
			}
			seen[e.Revision] = true
			revs = append(revs, cobra.CompletionWithDesc(e.Revision, fmt.Sprintf("%s %s ago", e.Result, humanAge(e.StartedAt.Time, now))))
		}
		return revs, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveKeepOrder
	}
}

func (o *rollbackOptions) run(ctx context.Context, out io.Writer, name string) error {
	if err := o.wait.Validate(); err != nil {
		return err
	}
	if o.to == "" {
		return usageError(errors.New("--to REVISION is required: a revision from converge history, a commit SHA or a prefix of one"))
	}
	st, c, err := getSyncTarget(ctx, &o.cli, name)
	if err != nil {
		return err
	}
	key := client.ObjectKeyFromObject(st)
	requested := newRequestToken()
	commit, err := actions.Rollback(ctx, c, key, o.to, requested, st)
	if err != nil {
		return cliInputError(err)
	}
	what, from := actions.Pinned(st)
	if _, err := fmt.Fprintf(out, "pinned SyncTarget %s to %s %s (converge resume restores %s)\n",
		key, what, commit, from); err != nil {
		return err
	}
	if !o.wait.wait {
		return nil
	}
	return waitForSync(ctx, &o.cli, out, key, requested, o.wait.timeout)
}

// resolveRollbackCommit finds the full commit SHA that rev names for st (see
// actions.ResolveCommit); a rev that names no commit at all is a usage error.
func resolveRollbackCommit(st *convergev1.SyncTarget, rev string) (string, error) {
	commit, err := actions.ResolveCommit(st, rev)
	return commit, cliInputError(err)
}

// cliInputError makes a revision that names no commit a usage error (exit 2).
func cliInputError(err error) error {
	var in *actions.InputError
	if errors.As(err, &in) {
		return usageError(err)
	}
	return err
}

func pin(st *convergev1.SyncTarget, commit string) error { return actions.Pin(st, commit) }

func parsePinnedFrom(raw string) (convergev1.GitRef, error) { return actions.ParsePinnedFrom(raw) }

// recordedRef is the ref st's annotation records, or its current ref.
func recordedRef(st *convergev1.SyncTarget) convergev1.GitRef { return actions.RecordedRef(st) }

// resumeOptions are the flags of `converge resume`.
type resumeOptions struct {
	cli  cliOptions
	wait waitOptions
}

func newResumeCommand() *cobra.Command {
	o := &resumeOptions{}
	cmd := forOneSyncTarget(&cobra.Command{
		Use:   "resume NAME",
		Short: "Unpin and un-suspend a SyncTarget, and wait for it to sync",
		Long: `Undo converge rollback and converge suspend: restore the ref recorded in the annotation
` + PinnedFromAnnotation + ` (if any), remove the annotation, set spec.suspend to false, and
ask for a sync. With --wait (the default) it waits for the sync like converge reconcile.`,
		Example: `  converge resume shop -n team-a`,
	}, &o.cli, o.run)
	o.wait.BindFlags(cmd.Flags())
	return cmd
}

func (o *resumeOptions) run(ctx context.Context, out io.Writer, name string) error {
	if err := o.wait.Validate(); err != nil {
		return err
	}
	st, c, err := getSyncTarget(ctx, &o.cli, name)
	if err != nil {
		return err
	}
	key := client.ObjectKeyFromObject(st)
	requested := newRequestToken()
	did, err := actions.Resume(ctx, c, key, requested)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(out, "resumed SyncTarget %s: %s\n", key, strings.Join(did, ", ")); err != nil {
		return err
	}
	if !o.wait.wait {
		return nil
	}
	return waitForSync(ctx, &o.cli, out, key, requested, o.wait.timeout)
}

// suspendOptions are the flags of `converge suspend`.
type suspendOptions struct {
	cli cliOptions
}

func newSuspendCommand() *cobra.Command {
	o := &suspendOptions{}
	return forOneSyncTarget(&cobra.Command{
		Use:   "suspend NAME",
		Short: "Stop syncing a SyncTarget until converge resume",
		Long: `Set spec.suspend on a SyncTarget: the daemon leaves it, and the objects it applied, alone
until converge resume.`,
		Example: `  converge suspend shop -n team-a`,
	}, &o.cli, o.run)
}

func (o *suspendOptions) run(ctx context.Context, out io.Writer, name string) error {
	st, c, err := getSyncTarget(ctx, &o.cli, name)
	if err != nil {
		return err
	}
	key := client.ObjectKeyFromObject(st)
	if err := actions.Suspend(ctx, c, st); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "suspended SyncTarget %s\n", key)
	return err
}
