package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/diff"
	"github.com/converge-gitops/converge/sync/cluster"
)

// diffOptions are the flags of `converge diff`.
type diffOptions struct {
	cli      cliOptions
	output   outputOptions
	source   diffSourceOptions
	markdown bool
	from     string
}

func newDiffCommand() *cobra.Command {
	o := &diffOptions{}
	cmd := &cobra.Command{
		Use:   "diff [PATH] [--target NAME [--path DIR | --revision REF]]",
		Short: "Show what converge would create, change and prune in the cluster",
		Long: `Render a directory, or a SyncTarget's source, exactly as the daemon would, and compare it with
the cluster through a server-side dry-run apply with the converge field manager.

converge diff PATH renders PATH (confined to its Git work tree, as the daemon confines a render
to its checkout) with no owner labels and never prunes; a chart directory is rendered as
converge build renders it, with helm template's flags (-f, --set, --set-string, --set-file,
--release-name, --kube-version, --api-versions). With --target NAME the SyncTarget's
settings apply: its target namespace and owner labels, its spec.postBuild variables (the
ConfigMaps and Secrets of substituteFrom read with your own rights), and its inventory for pruning; its source is
fetched at its ref (with the credentials of its secretRef, read with your own), at --revision REF
(a branch, tag, full commit SHA or converge revision), or replaced by the local --path DIR (or
PATH), rendered as its spec.path would be.

With --target NAME --from REV, two revisions of the SyncTarget's source are compared with each
other instead of with the cluster: --from REV and --revision REF (default: its ref), each
rendered as above; an object only in the second is created, one only in the first pruned. Values
read from Secrets or SOPS files are redacted wherever they appear.

Each object an apply would touch gets a header (+ create, ~ change, - prune) and a unified diff of
its live state against its state after the apply; a summary line follows. Secret values are always
masked. Exit status: 0 no changes, 1 changes, 2 error — usable as a CI gate.`,
		Example: `  converge diff deploy/prod --target-namespace shop
  converge diff --target shop -n team-a
  converge diff --target shop -n team-a --revision feature/new-db
  converge diff --target shop -n team-a --path ./deploy/prod --markdown > comment.md
  converge diff --target shop -n team-a --from main@sha1:1a2b3c4d5e6f... --revision main`,
		ValidArgsFunction: diffCompleteDirs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), args)
		},
	}
	o.cli.BindFlags(cmd.Flags(), false)
	o.output.BindFlags(cmd)
	o.source.BindFlags(cmd.Flags(), true)
	cmd.Flags().BoolVar(&o.markdown, "markdown", false, "print a summary for a pull-request comment (a table of changes, the diffs folded)")
	cmd.Flags().StringVar(&o.from, "from", "", "with --target: compare the rendering of this revision with --revision's (default: its ref) instead of with the cluster")
	_ = cmd.RegisterFlagCompletionFunc("target", diffCompleteTargets(&o.cli))
	return cmd
}

func (o *diffOptions) run(ctx context.Context, out io.Writer, args []string) error {
	if err := o.output.Validate(); err != nil {
		return err
	}
	if o.markdown && o.output.format != outputTable {
		return usageError(errors.New("--markdown and --output exclude each other"))
	}
	if err := o.source.complete(args); err != nil {
		return err
	}
	if o.from != "" && (o.source.target == "" || o.source.path != "") {
		return usageError(errors.New("--from needs --target, and compares two revisions: not with --path"))
	}
	c, _, err := o.cli.Client()
	if err != nil {
		return diffFailed(err)
	}
	if o.from != "" {
		return o.compare(ctx, out, c)
	}
	in, err := o.source.load(ctx, &o.cli, c)
	if err != nil {
		return diffFailed(err)
	}
	defer func() { _ = in.Close() }()

	if in.cluster != nil { // a SyncTarget's objects are compared with its cluster
		c = in.cluster
	}
	objects, err := diff.Render(ctx, c.RESTMapper(), in.render)
	if err != nil {
		return diffFailed(err)
	}
	res, err := diff.Compute(ctx, c, objects, in.options)
	if err != nil {
		return diffFailed(err)
	}
	return o.print(out, res, in.title)
}

// compare prints what changes between two revisions of the SyncTarget's source.
func (o *diffOptions) compare(ctx context.Context, out io.Writer, c client.Client) error {
	st, err := o.source.readTarget(ctx, &o.cli, c)
	if err != nil {
		return diffFailed(err)
	}
	cfg, err := o.cli.kube.restConfig()
	if err != nil {
		return diffFailed(err)
	}
	res, revs, err := diff.Revisions(ctx, c, cfg, st, o.from, o.source.revision)
	if err != nil {
		return diffFailed(err)
	}
	return o.print(out, res, fmt.Sprintf("converge diff: SyncTarget `%s/%s` from `%s` to `%s`", st.Namespace, st.Name, revs[0], revs[1]))
}

// print writes res as asked, and exits with 1 when it holds changes.
func (o *diffOptions) print(out io.Writer, res *diff.Result, title string) error {
	var err error
	switch {
	case o.markdown:
		err = diff.WriteMarkdown(out, res, title)
	case o.output.format == outputJSON || o.output.format == outputYAML:
		objs := res.Objects
		if objs == nil {
			objs = []diff.Object{}
		}
		err = printStructured(out, o.output.format, objs)
	default:
		err = diff.WriteText(out, res, diffColors(colorizer(isTerminal(out))))
	}
	if err != nil {
		return diffFailed(err)
	}
	if res.HasChanges() {
		return &exitError{code: 1}
	}
	return nil
}

// diffFailed makes err exit with 2, as kubectl diff does on errors (1 means changes).
func diffFailed(err error) error {
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	return &exitError{code: 2, err: err}
}

func diffColors(c colorizer) diff.Colors {
	paint := func(color string) func(string) string {
		return func(s string) string { return c.wrap(color, s) }
	}
	return diff.Colors{
		Create: paint(ansiBold + ansiGreen), Change: paint(ansiBold + ansiYellow), Prune: paint(ansiBold + ansiRed),
		Added: paint(ansiGreen), Removed: paint(ansiRed), Hunk: paint(ansiCyan), Files: paint(ansiBold),
	}
}

// diffSourceOptions are the flags of diff and build that say what to render.
type diffSourceOptions struct {
	target          string
	path            string
	revision        string
	targetNamespace string
	withRevision    bool
	chart           templateFlags
}

func (o *diffSourceOptions) BindFlags(fs *pflag.FlagSet, withRevision bool) {
	o.withRevision = withRevision
	fs.StringVar(&o.target, "target", "", "use the settings of this SyncTarget (in -n NAMESPACE): target namespace, owner labels, inventory, source")
	fs.StringVar(&o.path, "path", "", "with --target: render this local directory in place of the SyncTarget's spec.path")
	if withRevision {
		fs.StringVar(&o.revision, "revision", "", "with --target: fetch this branch, tag, full commit SHA or revision of the SyncTarget's repository")
	}
	fs.StringVar(&o.targetNamespace, "target-namespace", "", "without --target: set the namespace of every namespaced object")
	o.chart.BindFlags(fs)
}

// complete checks the flags against the arguments; PATH is --path with --target.
func (o *diffSourceOptions) complete(args []string) error {
	if len(args) > 1 {
		return usageError(fmt.Errorf("expected at most one PATH, got %d arguments", len(args)))
	}
	if len(args) == 1 {
		if o.path != "" {
			return usageError(errors.New("give the directory either as PATH or as --path, not both"))
		}
		o.path = args[0]
	}
	repo, err := o.chart.fromRepository()
	if err != nil {
		return err
	}
	if o.target == "" {
		switch {
		case o.revision != "":
			return usageError(errors.New("--revision needs --target"))
		case repo && o.path != "":
			return usageError(errors.New("give either a PATH or --chart-repository, not both"))
		case o.path == "" && !repo:
			return usageError(errors.New("expected a PATH to render, --chart-repository URL --chart NAME, or --target NAME"))
		}
		return nil
	}
	if o.path != "" && o.revision != "" {
		return usageError(errors.New("--path and --revision exclude each other"))
	}
	if o.targetNamespace != "" {
		return usageError(errors.New("--target-namespace cannot be used with --target: the SyncTarget's applies"))
	}
	if flag := o.chart.given(); flag != "" {
		return usageError(errors.New(flag + " cannot be used with --target: the SyncTarget's spec.helm and its cluster's capabilities apply"))
	}
	return nil
}

// diffInput is what to render and how to compare it.
type diffInput struct {
	render   diff.RenderOptions
	options  diff.Options
	title    string
	checkout *diff.Checkout
	// cluster is the client of the cluster the SyncTarget deploys to, nil when no
	// SyncTarget is named.
	cluster client.Client
	release func()
}

func (in *diffInput) Close() error {
	if in.release != nil {
		in.release()
	}
	return in.checkout.Close()
}

// load finds what to render: the local path, or the SyncTarget's settings and source.
// c may be nil when no SyncTarget is named.
func (o *diffSourceOptions) load(ctx context.Context, cli *cliOptions, c client.Client) (*diffInput, error) {
	if repo, _ := o.chart.fromRepository(); repo {
		return o.loadChart(ctx)
	}
	if o.target == "" {
		return o.loadPath()
	}
	in := &diffInput{}
	st, err := o.readTarget(ctx, cli, c)
	if err != nil {
		return nil, err
	}
	ns := st.Namespace
	in.options = diff.OptionsFor(st)
	cfg, err := cli.kube.restConfig()
	if err != nil {
		return nil, err
	}
	on, release, err := cluster.ForCaller(ctx, c, cfg, st, true)
	if err != nil {
		return nil, err
	}
	in.release = release
	if in.cluster, err = on.Client(""); err != nil {
		return nil, err
	}
	if in.render, err = diff.TargetRenderOptions(ctx, c, on, st, "", ""); err != nil {
		return nil, err
	}
	if o.path != "" {
		if in.render.Root, in.render.Path, err = diff.LocalRoot(o.path); err != nil {
			return nil, err
		}
		in.title = fmt.Sprintf("converge diff: SyncTarget `%s/%s` with `%s`", ns, st.Name, o.path)
		return in, diff.UseCapabilities(&in.render, on)
	}
	if in.checkout, err = diff.Fetch(ctx, c, st, o.revision); err != nil {
		return nil, err
	}
	in.render.Root, in.render.Path = in.checkout.Dir, st.Spec.Path
	in.title = fmt.Sprintf("converge diff: SyncTarget `%s/%s` at `%s`", ns, st.Name, in.checkout.Revision)
	return in, diff.UseCapabilities(&in.render, on)
}

// readTarget reads the SyncTarget --target names.
func (o *diffSourceOptions) readTarget(ctx context.Context, cli *cliOptions, c client.Client) (*convergev1.SyncTarget, error) {
	ns, err := cli.Namespace()
	if err != nil {
		return nil, err
	}
	st := &convergev1.SyncTarget{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: o.target}, st); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("SyncTarget %s/%s not found", ns, o.target)
		}
		return nil, fmt.Errorf("reading SyncTarget %s/%s: %w", ns, o.target, err)
	}
	return st, nil
}

// loadPath renders the local PATH, a chart directory as helm template would.
func (o *diffSourceOptions) loadPath() (*diffInput, error) {
	root, rel, err := diff.LocalRoot(o.path)
	if err != nil {
		return nil, err
	}
	in := &diffInput{render: diff.RenderOptions{Root: root, Path: rel, TargetNamespace: o.targetNamespace},
		title: fmt.Sprintf("converge diff `%s`", o.path)}
	if in.render.Helm, err = o.chart.helmOptions(root, rel, o.targetNamespace); err != nil {
		return nil, err
	}
	return in, nil
}

// loadChart fetches the chart of --chart-repository and renders it as helm template would.
func (o *diffSourceOptions) loadChart(ctx context.Context) (*diffInput, error) {
	co, err := o.chart.fetch(ctx)
	if err != nil {
		return nil, err
	}
	in := &diffInput{checkout: co,
		render: diff.RenderOptions{Root: co.Dir, Path: ".", TargetNamespace: o.targetNamespace},
		title:  fmt.Sprintf("converge diff: chart `%s` %s of `%s`", o.chart.chart, co.Revision, o.chart.repository)}
	if in.render.Helm, err = o.chart.helmOptions(co.Dir, ".", o.targetNamespace); err != nil {
		_ = co.Close()
		return nil, err
	}
	return in, nil
}

// diffCompleteDirs completes PATH with directories.
func diffCompleteDirs(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return nil, cobra.ShellCompDirectiveFilterDirs
}

// diffCompleteTargets completes --target with the SyncTargets of the namespace.
func diffCompleteTargets(o *cliOptions) cobra.CompletionFunc {
	complete := completeSyncTargets(o)
	return func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return complete(cmd, nil, toComplete)
	}
}
