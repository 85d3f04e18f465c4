package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
)

// getOptions are the flags of `converge get`.
type getOptions struct {
	cli    cliOptions
	output outputOptions
	watch  bool
	set    string
}

func newGetCommand() *cobra.Command {
	o := &getOptions{}
	cmd := &cobra.Command{
		Use:   "get [NAME]",
		Short: "List SyncTargets: readiness, revision, health, last sync",
		Long: `List SyncTargets, or show one: whether it is Ready, the revision in the cluster, the health
of what it applied, how long ago it last synced, and what happened.

-w keeps watching and prints a row again whenever it changes.`,
		Example: `  converge get
  converge get -A
  converge get shop -n team-a -o yaml
  converge get -w
  converge get --set previews    # a set's SyncTargets, and the pull requests of its previews`,
		Args:              usageArgs(cobra.MaximumNArgs(1)),
		ValidArgsFunction: completeSyncTargets(&o.cli),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), name)
		},
	}
	o.cli.BindFlags(cmd.Flags(), true)
	o.output.BindFlags(cmd)
	cmd.Flags().BoolVarP(&o.watch, "watch", "w", false, "after listing, watch for changes and print each changed row")
	cmd.Flags().StringVar(&o.set, "set", "", "list the SyncTargets the SyncTargetSet of this name generated, then the pull requests of its previews")
	return cmd
}

// usageArgs makes a wrong number of arguments a usage error (exit code 2).
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError(err)
		}
		return nil
	}
}

func (o *getOptions) run(ctx context.Context, out, errOut io.Writer, name string) error {
	ns, err := o.namespace(name)
	if err != nil {
		return err
	}
	c, cfg, err := o.cli.Client()
	if err != nil {
		return err
	}
	opts := []client.ListOption{client.InNamespace(ns)}
	if name != "" {
		opts = append(opts, client.MatchingFields{"metadata.name": name})
	}
	if o.set != "" {
		opts = append(opts, client.MatchingLabels{convergev1.SetLabel: o.set})
	}
	p := &syncTargetPrinter{out: out, format: o.output.format, allNamespaces: o.cli.allNamespaces, now: time.Now}
	listed := func(items []convergev1.SyncTarget) (bool, error) {
		switch {
		case name != "" && len(items) == 0:
			return true, notFound(ns, name)
		case len(items) == 0 && p.format == outputTable:
			_, err := fmt.Fprintln(errOut, noneFound(ns))
			return false, err
		}
		return false, p.printList(items, name != "")
	}

	if !o.watch {
		list := &convergev1.SyncTargetList{}
		if err := c.List(ctx, list, opts...); err != nil {
			return fmt.Errorf("listing SyncTargets: %w", err)
		}
		if _, err := listed(list.Items); err != nil || o.set == "" || p.format != outputTable {
			return err
		}
		return printSetPullRequests(ctx, c, out, client.ObjectKey{Namespace: ns, Name: o.set}, list.Items)
	}
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: cliScheme()})
	if err != nil {
		return fmt.Errorf("connecting to the cluster: %w", err)
	}
	return followSyncTargets(ctx, syncTargetListWatch(wc, opts...), listed,
		func(typ watch.EventType, st *convergev1.SyncTarget) (bool, error) {
			return false, p.printChange(typ, st)
		})
}

// namespace checks the flags and the argument and returns the namespace to list, "" for all.
func (o *getOptions) namespace(name string) (string, error) {
	if err := o.output.Validate(); err != nil {
		return "", err
	}
	if o.cli.allNamespaces {
		if o.set != "" {
			return "", usageError(errors.New("--set names a SyncTargetSet of one namespace: use -n NAMESPACE, not -A"))
		}
		if name != "" {
			return "", usageError(errors.New("a SyncTarget cannot be named together with -A; use -n NAMESPACE"))
		}
		return "", nil
	}
	return o.cli.Namespace()
}

func notFound(ns, name string) error {
	return fmt.Errorf("SyncTarget %s/%s not found", ns, name)
}

func noneFound(ns string) string {
	if ns == "" {
		return "No SyncTargets found."
	}
	return fmt.Sprintf("No SyncTargets found in namespace %s.", ns)
}

// syncTargetPrinter prints SyncTargets as a table or as objects, and, when watching,
// the rows that changed.
type syncTargetPrinter struct {
	out           io.Writer
	format        string
	allNamespaces bool
	now           func() time.Time

	table   alignedTable
	printed map[client.ObjectKey]shownRow // what was shown of each SyncTarget, to skip repeats
}

func (p *syncTargetPrinter) printList(items []convergev1.SyncTarget, single bool) error {
	sort.Slice(items, func(i, j int) bool {
		if items[i].Namespace != items[j].Namespace {
			return items[i].Namespace < items[j].Namespace
		}
		return items[i].Name < items[j].Name
	})
	if p.printed == nil {
		p.printed = map[client.ObjectKey]shownRow{}
	}
	rows := [][]string{syncTargetHeader(p.allNamespaces)}
	for i := range items {
		row := syncTargetRow(&items[i], p.now(), p.allNamespaces)
		rows = append(rows, row)
		p.printed[client.ObjectKeyFromObject(&items[i])] = shownRow{resourceVersion: items[i].ResourceVersion,
			identity: rowIdentity(&items[i], row)}
	}
	if p.format != outputTable {
		if single {
			return printStructured(p.out, p.format, forOutput(&items[0]))
		}
		list := &convergev1.SyncTargetList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}}
		for i := range items {
			list.Items = append(list.Items, *forOutput(&items[i]))
		}
		return printStructured(p.out, p.format, list)
	}
	return p.table.write(p.out, rows)
}

// printChange prints a SyncTarget that changed while watching, unless nothing shown changed
// or it is older than what was shown: a follow replays its first list, which the table may
// show newer.
func (p *syncTargetPrinter) printChange(typ watch.EventType, st *convergev1.SyncTarget) error {
	if p.printed == nil {
		p.printed = map[client.ObjectKey]shownRow{}
	}
	key := client.ObjectKeyFromObject(st)
	row := syncTargetRow(st, p.now(), p.allNamespaces)
	if typ == watch.Deleted {
		row[len(row)-1] = "(deleted)"
		delete(p.printed, key)
	} else {
		shown, seen := p.printed[key]
		now := shownRow{resourceVersion: st.ResourceVersion, identity: rowIdentity(st, row)}
		if seen && !newerResourceVersion(now.resourceVersion, shown.resourceVersion) {
			return nil
		}
		p.printed[key] = now
		if seen && p.format == outputTable && now.identity == shown.identity {
			return nil
		}
	}
	if p.format != outputTable {
		if p.format == outputYAML {
			if _, err := fmt.Fprintln(p.out, "---"); err != nil {
				return err
			}
		}
		return printStructured(p.out, p.format, forOutput(st))
	}
	if len(p.table.widths) == 0 { // nothing listed at first: the header comes with the first row
		return p.table.write(p.out, [][]string{syncTargetHeader(p.allNamespaces), row})
	}
	return p.table.write(p.out, [][]string{row})
}

// shownRow is what the printer showed of a SyncTarget.
type shownRow struct {
	resourceVersion string
	identity        string // rowIdentity of its row
}

// newerResourceVersion tells whether resource version a is newer than b. Resource versions
// are integers a server may compare (KEP 5504); where they are not, any other one, or an
// unknown one, counts as newer.
func newerResourceVersion(a, b string) bool {
	c, err := resourceversion.CompareResourceVersion(a, b)
	if err != nil {
		return a != b || a == ""
	}
	return c > 0
}

// rowIdentity is what a watch compares to decide whether a row changed: its cells, with the
// age of the last sync replaced by its time, so that a row is not printed again only
// because time passed.
func rowIdentity(st *convergev1.SyncTarget, row []string) string {
	t := lastSyncTime(st)
	return strings.Join(row[:len(row)-2], "\x00") + "\x00" + t.String() + "\x00" + row[len(row)-1]
}

// forOutput is st as -o yaml|json prints it: with its kind, without managed fields.
func forOutput(st *convergev1.SyncTarget) *convergev1.SyncTarget {
	out := st.DeepCopy()
	out.APIVersion = convergev1.GroupVersion.String()
	out.Kind = convergev1.SyncTargetKind
	out.ManagedFields = nil
	return out
}

func syncTargetHeader(allNamespaces bool) []string {
	h := []string{"NAME", "READY", "REVISION", "HEALTH", "CLUSTER", "LAST SYNC", "MESSAGE"}
	if allNamespaces {
		h = append([]string{"NAMESPACE"}, h...)
	}
	return h
}

// syncTargetRow is one row of `converge get`.
func syncTargetRow(st *convergev1.SyncTarget, now time.Time, allNamespaces bool) []string {
	ready, health := "-", "-"
	msg := ""
	if c := apimeta.FindStatusCondition(st.Status.Conditions, convergev1.ReadyCondition); c != nil {
		ready, msg = string(c.Status), c.Message
		if c.Status == metav1.ConditionFalse && c.Reason != "" {
			msg = c.Reason + ": " + c.Message // RolledBack, HealthCheckFailed… first: the cell may be cut
		}
	}
	if c := apimeta.FindStatusCondition(st.Status.Conditions, convergev1.HealthyCondition); c != nil {
		health = string(c.Status)
	}
	// While a sync runs, what it is doing says more than the outcome of the previous one.
	if c := apimeta.FindStatusCondition(st.Status.Conditions, convergev1.ReconcilingCondition); c != nil &&
		c.Status == metav1.ConditionTrue && c.Message != "" {
		msg = c.Message
	}
	if st.Spec.Suspend {
		ready = "Suspended"
		msg = strings.TrimSuffix("suspended; "+msg, "; ")
	}
	if !st.DeletionTimestamp.IsZero() {
		msg = strings.TrimSuffix("deleting; "+msg, "; ")
	}
	lastSync := "-"
	if t := lastSyncTime(st); !t.IsZero() {
		lastSync = humanAge(t, now)
	}
	row := []string{st.Name, ready, orDash(shortRevision(st.Status.LastAppliedRevision)), health,
		clusterOf(st), lastSync, tableMessage(msg)}
	if allNamespaces {
		row = append([]string{st.Namespace}, row...)
	}
	return row
}

// clusterOf names the cluster a SyncTarget deploys to: the name of its kubeconfig
// Secret, or "in-cluster" when it deploys to the cluster the daemon runs in.
func clusterOf(st *convergev1.SyncTarget) string {
	if st.Spec.KubeConfig == nil || st.Spec.KubeConfig.SecretRef.Name == "" {
		return "in-cluster"
	}
	return st.Spec.KubeConfig.SecretRef.Name
}

// lastSyncTime is when the newest sync attempt ended (or began, if it has not ended).
func lastSyncTime(st *convergev1.SyncTarget) time.Time {
	if len(st.Status.History) == 0 {
		return time.Time{}
	}
	e := st.Status.History[0]
	if e.FinishedAt != nil && !e.FinishedAt.IsZero() {
		return e.FinishedAt.Time
	}
	return e.StartedAt.Time
}

// humanAge prints how long ago t was, the way kubectl prints ages: 12s, 5m30s, 3h, 2d.
func humanAge(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return duration.HumanDuration(now.Sub(t))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shortRevision abbreviates a revision to its first 7 hex digits: main@sha1:0a1b2c3.
func shortRevision(rev string) string { return sources.ShortRevision(rev) }

var longSHA = regexp.MustCompile(`\b(sha1:[0-9a-f]{7})[0-9a-f]{33}\b|\b(sha256:[0-9a-f]{7})[0-9a-f]{57}\b`)

// maxTableMessage bounds a message in a table cell; -o yaml shows it whole.
const maxTableMessage = 200

// tableMessage is a message fit for a table cell: one line, revisions abbreviated.
func tableMessage(msg string) string {
	msg = longSHA.ReplaceAllString(msg, "$1$2")
	if msg == "" {
		return "-"
	}
	return oneLine(msg, maxTableMessage)
}

// alignedTable writes rows through a tabwriter and remembers the widths of its columns,
// so that rows written later (by a watch) line up with the ones written before.
type alignedTable struct {
	widths []int
}

func (t *alignedTable) write(out io.Writer, rows [][]string) error {
	for _, row := range rows {
		for i, cell := range row[:len(row)-1] { // the last column is not padded
			n := utf8.RuneCountInString(cell)
			if i >= len(t.widths) {
				t.widths = append(t.widths, n)
			}
			t.widths[i] = max(t.widths[i], n)
		}
	}
	tw := tabwriter.NewWriter(out, 0, 8, 3, ' ', 0)
	for _, row := range rows {
		cells := make([]string, len(row))
		for i, cell := range row {
			if i < len(row)-1 {
				cell += strings.Repeat(" ", t.widths[i]-utf8.RuneCountInString(cell))
			}
			cells[i] = cell
		}
		if _, err := fmt.Fprintln(tw, strings.Join(cells, "\t")); err != nil {
			return err
		}
	}
	return tw.Flush()
}

// followSyncTargets calls listed with the SyncTargets lw lists, then changed with each change,
// until one of them is done or fails, or ctx ends (it returns nil then: Ctrl-C, a deadline).
// The informer of client-go's watchtools.UntilWithSync resumes a watch that drops where it
// left off, and lists again when the server no longer has that point: what changed meanwhile
// comes as changes and deletions. Where the informer would retry for ever, giveUp ends the
// follow.
//
// The first list comes from the informer's store once synced, and the informer then replays
// it as events: changed must skip what is not newer than what it saw (printChange does).
func followSyncTargets(ctx context.Context, lw cache.ListerWatcherWithContext,
	listed func([]convergev1.SyncTarget) (bool, error),
	changed func(watch.EventType, *convergev1.SyncTarget) (bool, error)) error {
	follow, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	follow = logr.NewContext(follow, logr.Discard()) // the informer's retries are not the user's business
	var failed error                                 // what listed or changed returned
	_, err := watchtools.UntilWithSync(follow, giveUp(lw, stop), &convergev1.SyncTarget{},
		func(store cache.Store) (done bool, err error) {
			var items []convergev1.SyncTarget
			for _, obj := range store.List() {
				items = append(items, *obj.(*convergev1.SyncTarget))
			}
			done, failed = listed(items)
			return done, failed
		},
		func(ev watch.Event) (done bool, err error) {
			if st, ok := ev.Object.(*convergev1.SyncTarget); ok {
				done, failed = changed(ev.Type, st)
			}
			return done, failed
		})
	switch {
	case failed != nil:
		return failed
	case err == nil || ctx.Err() != nil:
		return nil
	case follow.Err() != nil:
		return context.Cause(follow)
	}
	return err
}

// syncTargetListWatch lists and watches through c the SyncTargets opts select.
func syncTargetListWatch(c client.WithWatch, opts ...client.ListOption) cache.ListerWatcherWithContext {
	with := func(o metav1.ListOptions) []client.ListOption {
		return append(opts[:len(opts):len(opts)], &client.ListOptions{Raw: &o, Limit: o.Limit, Continue: o.Continue})
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			list := &convergev1.SyncTargetList{}
			if err := c.List(ctx, list, with(o)...); err != nil {
				return nil, err
			}
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, &convergev1.SyncTargetList{}, with(o)...)
		},
	}
}

// maxFollowFailures is how many list or watch calls in a row may fail before `get -w` gives up.
const maxFollowFailures = 5

// giveUp wraps lw so that the follow ends (stop, with the error as cause) where an informer
// would retry for ever: the server refuses (unauthorized, forbidden); the first call cannot
// reach it, or the first list fails; or maxFollowFailures+1 calls in a row fail. A first
// watch the server answers with an error is the informer asking for a watch-list the server
// may not serve; it lists then.
func giveUp(lw cache.ListerWatcherWithContext, stop context.CancelCauseFunc) *cache.ListWatch {
	var (
		mu       sync.Mutex
		answered bool // a call succeeded
		failures int  // in a row
	)
	check := func(what string, err error) error {
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			answered, failures = true, 0
			return nil
		}
		failures++
		var status apierrors.APIStatus
		first := !answered && (what == "listing" || !errors.As(err, &status))
		if first || failures > maxFollowFailures || apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			if !answered {
				what = "listing" // a watch-list, to the user the first list
			}
			stop(fmt.Errorf("%s SyncTargets: %w", what, err))
		}
		return err
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			list, err := lw.ListWithContext(ctx, o)
			return list, check("listing", err)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w, err := lw.WatchWithContext(ctx, o)
			return w, check("watching", err)
		},
	}
}
