package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
)

// getOptions are the flags of `converge get`.
type getOptions struct {
	cli    cliOptions
	output outputOptions
	watch  bool
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
  converge get -w`,
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
	if err := o.output.Validate(); err != nil {
		return err
	}
	if name != "" && o.cli.allNamespaces {
		return usageError(errors.New("a SyncTarget cannot be named together with -A; use -n NAMESPACE"))
	}
	ns := ""
	if !o.cli.allNamespaces {
		var err error
		if ns, err = o.cli.Namespace(); err != nil {
			return err
		}
	}
	c, cfg, err := o.cli.Client()
	if err != nil {
		return err
	}
	opts := []client.ListOption{client.InNamespace(ns)}
	if name != "" {
		opts = append(opts, client.MatchingFields{"metadata.name": name})
	}
	p := &syncTargetPrinter{out: out, format: o.output.format, allNamespaces: o.cli.allNamespaces, now: time.Now}

	if !o.watch {
		list := &convergev1.SyncTargetList{}
		if err := c.List(ctx, list, opts...); err != nil {
			return fmt.Errorf("listing SyncTargets: %w", err)
		}
		if name != "" && len(list.Items) == 0 {
			return notFound(ns, name)
		}
		if len(list.Items) == 0 && p.format == outputTable {
			_, err := fmt.Fprintln(errOut, noneFound(ns))
			return err
		}
		return p.printList(list.Items, name != "")
	}

	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: cliScheme()})
	if err != nil {
		return fmt.Errorf("connecting to the cluster: %w", err)
	}
	for ev := range followSyncTargets(ctx, wc, opts...) {
		switch {
		case ev.err != nil:
			return ev.err
		case ev.listed:
			if name != "" && len(ev.items) == 0 {
				return notFound(ns, name)
			}
			if len(ev.items) == 0 && p.format == outputTable {
				if _, err := fmt.Fprintln(errOut, noneFound(ns)); err != nil {
					return err
				}
				continue
			}
			if err := p.printList(ev.items, name != ""); err != nil {
				return err
			}
		default:
			if err := p.printChange(ev.typ, ev.object); err != nil {
				return err
			}
		}
	}
	return nil // the context ended: Ctrl-C
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
	printed map[client.ObjectKey]string // what was shown of each SyncTarget, to skip repeats
}

func (p *syncTargetPrinter) printList(items []convergev1.SyncTarget, single bool) error {
	sort.Slice(items, func(i, j int) bool {
		if items[i].Namespace != items[j].Namespace {
			return items[i].Namespace < items[j].Namespace
		}
		return items[i].Name < items[j].Name
	})
	if p.printed == nil {
		p.printed = map[client.ObjectKey]string{}
	}
	if p.format != outputTable {
		for i := range items {
			p.printed[client.ObjectKeyFromObject(&items[i])] = items[i].ResourceVersion
		}
		if single {
			return printStructured(p.out, p.format, forOutput(&items[0]))
		}
		list := &convergev1.SyncTargetList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}}
		for i := range items {
			list.Items = append(list.Items, *forOutput(&items[i]))
		}
		return printStructured(p.out, p.format, list)
	}
	rows := [][]string{syncTargetHeader(p.allNamespaces)}
	for i := range items {
		row := syncTargetRow(&items[i], p.now(), p.allNamespaces)
		rows = append(rows, row)
		p.printed[client.ObjectKeyFromObject(&items[i])] = rowIdentity(&items[i], row)
	}
	return p.table.write(p.out, rows)
}

// printChange prints a SyncTarget that changed while watching, unless nothing shown changed.
func (p *syncTargetPrinter) printChange(typ watch.EventType, st *convergev1.SyncTarget) error {
	if p.printed == nil {
		p.printed = map[client.ObjectKey]string{}
	}
	key := client.ObjectKeyFromObject(st)
	if p.format != outputTable {
		if typ != watch.Deleted && p.printed[key] == st.ResourceVersion {
			return nil
		}
		p.printed[key] = st.ResourceVersion
		if p.format == outputYAML {
			if _, err := fmt.Fprintln(p.out, "---"); err != nil {
				return err
			}
		}
		return printStructured(p.out, p.format, forOutput(st))
	}
	row := syncTargetRow(st, p.now(), p.allNamespaces)
	if typ == watch.Deleted {
		row[len(row)-1] = "(deleted)"
		delete(p.printed, key)
	} else {
		id := rowIdentity(st, row)
		if p.printed[key] == id {
			return nil
		}
		p.printed[key] = id
	}
	if len(p.table.widths) == 0 { // nothing listed at first: the header comes with the first row
		return p.table.write(p.out, [][]string{syncTargetHeader(p.allNamespaces), row})
	}
	return p.table.write(p.out, [][]string{row})
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
	h := []string{"NAME", "READY", "REVISION", "HEALTH", "LAST SYNC", "MESSAGE"}
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
	row := []string{st.Name, ready, orDash(shortRevision(st.Status.LastAppliedRevision)), health, lastSync,
		tableMessage(msg)}
	if allNamespaces {
		row = append([]string{st.Namespace}, row...)
	}
	return row
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
func shortRevision(rev string) string {
	r, err := sources.ParseRevision(rev)
	if err != nil {
		return rev
	}
	algo, _, _ := strings.Cut(strings.TrimPrefix(rev, r.Ref+"@"), ":")
	short := algo + ":" + r.Commit[:7]
	if r.Ref == "" {
		return short
	}
	return r.Ref + "@" + short
}

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

// syncTargetEvent is what followSyncTargets reports: first the list, then each change.
type syncTargetEvent struct {
	listed bool // items holds what the first list returned
	items  []convergev1.SyncTarget
	typ    watch.EventType // Added, Modified or Deleted
	object *convergev1.SyncTarget
	err    error // the end: the follow failed
}

// followSyncTargets lists the SyncTargets opts select and then follows their changes,
// resuming a watch that ends and listing again when its resourceVersion is too old. The
// channel closes when ctx ends, or after an event with err.
func followSyncTargets(ctx context.Context, c client.WithWatch, opts ...client.ListOption) <-chan syncTargetEvent {
	ch := make(chan syncTargetEvent)
	send := func(ev syncTargetEvent) bool {
		select {
		case ch <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	go func() {
		defer close(ch)
		known := map[client.ObjectKey]bool{}
		list := func(first bool) (string, bool) {
			l := &convergev1.SyncTargetList{}
			if err := c.List(ctx, l, opts...); err != nil {
				if ctx.Err() == nil {
					send(syncTargetEvent{err: fmt.Errorf("listing SyncTargets: %w", err)})
				}
				return "", false
			}
			if first {
				for i := range l.Items {
					known[client.ObjectKeyFromObject(&l.Items[i])] = true
				}
				return l.ResourceVersion, send(syncTargetEvent{listed: true, items: l.Items})
			}
			seen := map[client.ObjectKey]bool{}
			for i := range l.Items {
				key := client.ObjectKeyFromObject(&l.Items[i])
				seen[key] = true
				if !send(syncTargetEvent{typ: watch.Modified, object: &l.Items[i]}) {
					return "", false
				}
			}
			for key := range known {
				if !seen[key] {
					gone := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
					if !send(syncTargetEvent{typ: watch.Deleted, object: gone}) {
						return "", false
					}
				}
			}
			known = seen
			return l.ResourceVersion, true
		}
		rv, ok := list(true)
		failures := 0
		for ok {
			w, err := c.Watch(ctx, &convergev1.SyncTargetList{}, append(opts[:len(opts):len(opts)],
				&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})...)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					rv, ok = list(false)
					continue
				}
				if failures++; failures > 5 || apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
					send(syncTargetEvent{err: fmt.Errorf("watching SyncTargets: %w", err)})
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Duration(failures) * time.Second):
				}
				continue
			}
			failures = 0
			relist := false
			for ev := range w.ResultChan() {
				switch ev.Type {
				case watch.Added, watch.Modified, watch.Deleted:
					st, isST := ev.Object.(*convergev1.SyncTarget)
					if !isST {
						continue
					}
					rv = st.ResourceVersion
					key := client.ObjectKeyFromObject(st)
					if ev.Type == watch.Deleted {
						delete(known, key)
					} else {
						known[key] = true
					}
					if !send(syncTargetEvent{typ: ev.Type, object: st}) {
						w.Stop()
						return
					}
				case watch.Bookmark:
					if m, err := apimeta.Accessor(ev.Object); err == nil {
						rv = m.GetResourceVersion()
					}
				case watch.Error:
					relist = true
				}
				if relist {
					break
				}
			}
			w.Stop()
			if ctx.Err() != nil {
				return
			}
			if relist {
				rv, ok = list(false)
			}
		}
	}()
	return ch
}
