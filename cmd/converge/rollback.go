package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
)

// PinnedFromAnnotation records, as JSON, the ref a SyncTarget followed before
// `converge rollback` pinned it to a commit; `converge resume` restores it.
const PinnedFromAnnotation = "converge.dev/pinned-from"

// minSHAPrefix is the shortest commit prefix rollback --to accepts, as git abbreviates.
const minSHAPrefix = 7

// rollbackOptions are the flags of `converge rollback`.
type rollbackOptions struct {
	cli  cliOptions
	wait waitOptions
	to   string
}

func newRollbackCommand() *cobra.Command {
	o := &rollbackOptions{}
	cmd := &cobra.Command{
		Use:   "rollback NAME --to REVISION",
		Short: "Pin a SyncTarget to a revision of its history",
		Long: `Pin a SyncTarget to a commit: spec.source.ref becomes {commit: <sha>}, and the ref it
followed is recorded in the annotation ` + PinnedFromAnnotation + `, so that converge resume can
restore it. Rolling back a SyncTarget that is pinned already keeps the ref recorded first.

REVISION is a revision from converge history (main@sha1:<hex>), a full commit SHA, or a prefix
of at least 7 hex digits of a commit in the history. With --wait (the default) it then waits
for the sync like converge reconcile.`,
		Example: `  converge rollback shop --to main@sha1:0a1b2c3d4e5f60718293a4b5c6d7e8f901234567
  converge rollback shop --to 0a1b2c3
  converge resume shop`,
		Args:              usageArgs(cobra.ExactArgs(1)),
		ValidArgsFunction: completeSyncTargets(&o.cli),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), args[0])
		},
	}
	o.cli.BindFlags(cmd.Flags(), false)
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
	var commit string
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, key, st); err != nil {
			return err
		}
		if st.Spec.Suspend {
			return fmt.Errorf("SyncTarget %s is suspended: converge resume %s -n %s lets it sync again (and unpins it)",
				key, key.Name, key.Namespace)
		}
		if commit, err = resolveRollbackCommit(st, o.to); err != nil {
			return err
		}
		base := st.DeepCopy()
		if err := pin(st, commit); err != nil {
			return err
		}
		setAnnotation(st, convergev1.RequestedAtAnnotation, requested)
		return c.Patch(ctx, st, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	})
	if err != nil {
		return fmt.Errorf("rolling back %s: %w", key, err)
	}
	from := recordedRef(st)
	if _, err := fmt.Fprintf(out, "pinned SyncTarget %s to commit %s (converge resume restores %s)\n",
		key, commit, describeRef(from)); err != nil {
		return err
	}
	if !o.wait.wait {
		return nil
	}
	return waitForSync(ctx, &o.cli, out, key, requested, o.wait.timeout)
}

// resolveRollbackCommit finds the full commit SHA that rev names for st: a revision
// string, a full SHA, or a prefix of at least 7 hex digits of a commit that st's history
// (or its status) mentions, matching one commit only.
func resolveRollbackCommit(st *convergev1.SyncTarget, rev string) (string, error) {
	rev = strings.TrimSpace(rev)
	if strings.Contains(rev, ":") {
		r, err := sources.ParseRevision(rev)
		if err != nil {
			return "", usageError(err)
		}
		return r.Commit, nil
	}
	prefix := strings.ToLower(rev)
	for _, ch := range prefix {
		if (ch < '0' || ch > '9') && (ch < 'a' || ch > 'f') {
			return "", usageError(fmt.Errorf("--to %q is neither a revision (main@sha1:<hex>) nor a commit SHA", rev))
		}
	}
	if len(prefix) == 40 || len(prefix) == 64 {
		return prefix, nil
	}
	if len(prefix) < minSHAPrefix {
		return "", usageError(fmt.Errorf("--to %q is too short: give at least %d hex digits of the commit", rev, minSHAPrefix))
	}
	matches := map[string]bool{}
	for _, r := range knownRevisions(st) {
		if parsed, err := sources.ParseRevision(r); err == nil && strings.HasPrefix(parsed.Commit, prefix) {
			matches[parsed.Commit] = true
		}
	}
	switch len(matches) {
	case 0:
		return "", fmt.Errorf("no commit starting with %s in the history of %s (see converge history %s)",
			prefix, client.ObjectKeyFromObject(st), st.Name)
	case 1:
		for c := range matches {
			return c, nil
		}
	}
	all := make([]string, 0, len(matches))
	for c := range matches {
		all = append(all, c)
	}
	sort.Strings(all)
	return "", fmt.Errorf("%s is ambiguous in the history of %s: it starts %s; give more digits",
		prefix, client.ObjectKeyFromObject(st), strings.Join(all, ", "))
}

// knownRevisions are the revisions st's status mentions: its history and its last ones.
func knownRevisions(st *convergev1.SyncTarget) []string {
	revs := []string{st.Status.LastAppliedRevision, st.Status.LastHealthyRevision,
		st.Status.LastAttemptedRevision, st.Status.LastFetchedRevision}
	for _, e := range st.Status.History {
		revs = append(revs, e.Revision)
	}
	return revs
}

// pin points st at commit, recording the ref it followed unless a ref recorded by an
// earlier rollback is there already: that one, the ref before any pin, is what resume
// restores. It refuses when the annotation does not describe st: a recorded ref on a
// SyncTarget that follows something other than a commit was left behind by someone
// changing the ref by hand, and overwriting or keeping it would both guess.
func pin(st *convergev1.SyncTarget, commit string) error {
	key := client.ObjectKeyFromObject(st)
	if raw, ok := st.Annotations[PinnedFromAnnotation]; ok {
		if _, err := parsePinnedFrom(raw); err != nil {
			return fmt.Errorf("SyncTarget %s: %w; fix or remove the annotation first", key, err)
		}
		if st.Spec.Source.Ref.Commit == "" {
			return fmt.Errorf("SyncTarget %s follows %s, not a pinned commit, yet records %s=%s: "+
				"remove the annotation (or run converge resume) first", key, describeRef(st.Spec.Source.Ref),
				PinnedFromAnnotation, raw)
		}
	} else {
		b, err := json.Marshal(st.Spec.Source.Ref)
		if err != nil {
			return err
		}
		setAnnotation(st, PinnedFromAnnotation, string(b))
	}
	st.Spec.Source.Ref = convergev1.GitRef{Commit: commit}
	return nil
}

func parsePinnedFrom(raw string) (convergev1.GitRef, error) {
	var ref convergev1.GitRef
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ref); err != nil {
		return ref, fmt.Errorf("annotation %s is not a ref: %w", PinnedFromAnnotation, err)
	}
	if ref == (convergev1.GitRef{}) {
		return ref, fmt.Errorf("annotation %s records an empty ref", PinnedFromAnnotation)
	}
	return ref, nil
}

// recordedRef is the ref st's annotation records, or its current ref.
func recordedRef(st *convergev1.SyncTarget) convergev1.GitRef {
	if ref, err := parsePinnedFrom(st.Annotations[PinnedFromAnnotation]); err == nil {
		return ref
	}
	return st.Spec.Source.Ref
}

// describeRef says what a ref follows: branch main, tag v1.2.0, commit 0a1b2c3…
func describeRef(r convergev1.GitRef) string {
	return sources.Ref(r).String()
}

func setAnnotation(st *convergev1.SyncTarget, key, value string) {
	if st.Annotations == nil {
		st.Annotations = map[string]string{}
	}
	st.Annotations[key] = value
}

// resumeOptions are the flags of `converge resume`.
type resumeOptions struct {
	cli  cliOptions
	wait waitOptions
}

func newResumeCommand() *cobra.Command {
	o := &resumeOptions{}
	cmd := &cobra.Command{
		Use:   "resume NAME",
		Short: "Unpin and un-suspend a SyncTarget, and wait for it to sync",
		Long: `Undo converge rollback and converge suspend: restore the ref recorded in the annotation
` + PinnedFromAnnotation + ` (if any), remove the annotation, set spec.suspend to false, and
ask for a sync. With --wait (the default) it waits for the sync like converge reconcile.`,
		Example:           `  converge resume shop -n team-a`,
		Args:              usageArgs(cobra.ExactArgs(1)),
		ValidArgsFunction: completeSyncTargets(&o.cli),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), args[0])
		},
	}
	o.cli.BindFlags(cmd.Flags(), false)
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
	var did []string
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		did = did[:0]
		if err := c.Get(ctx, key, st); err != nil {
			return err
		}
		base := st.DeepCopy()
		if raw, ok := st.Annotations[PinnedFromAnnotation]; ok {
			ref, err := parsePinnedFrom(raw)
			if err != nil {
				return fmt.Errorf("%w; set spec.source.ref and remove the annotation by hand", err)
			}
			st.Spec.Source.Ref = ref
			delete(st.Annotations, PinnedFromAnnotation)
			did = append(did, "following "+describeRef(ref)+" again")
		}
		if st.Spec.Suspend {
			st.Spec.Suspend = false
			did = append(did, "no longer suspended")
		}
		setAnnotation(st, convergev1.RequestedAtAnnotation, requested)
		return c.Patch(ctx, st, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	})
	if err != nil {
		return fmt.Errorf("resuming %s: %w", key, err)
	}
	if len(did) == 0 {
		did = append(did, "neither pinned nor suspended; requested a reconcile")
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
	cmd := &cobra.Command{
		Use:   "suspend NAME",
		Short: "Stop syncing a SyncTarget until converge resume",
		Long: `Set spec.suspend on a SyncTarget: the daemon leaves it, and the objects it applied, alone
until converge resume.`,
		Example:           `  converge suspend shop -n team-a`,
		Args:              usageArgs(cobra.ExactArgs(1)),
		ValidArgsFunction: completeSyncTargets(&o.cli),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), args[0])
		},
	}
	o.cli.BindFlags(cmd.Flags(), false)
	return cmd
}

func (o *suspendOptions) run(ctx context.Context, out io.Writer, name string) error {
	st, c, err := getSyncTarget(ctx, &o.cli, name)
	if err != nil {
		return err
	}
	key := client.ObjectKeyFromObject(st)
	if err := c.Patch(ctx, st, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":true}}`))); err != nil {
		return fmt.Errorf("suspending %s: %w", key, err)
	}
	_, err = fmt.Fprintf(out, "suspended SyncTarget %s\n", key)
	return err
}
