package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/health"
	"github.com/converge-gitops/converge/internal/diff"
	"github.com/converge-gitops/converge/sync/apply"
	"github.com/converge-gitops/converge/sync/cluster"
	"github.com/converge-gitops/converge/sync/hooks"
)

// testEvents are the hook events of a chart's tests ("test-success" is Helm 2's name).
var testEvents = []string{"test", "test-success"}

// chartTestOptions are the flags of `converge test`.
type chartTestOptions struct {
	cli     cliOptions
	timeout time.Duration
}

func newChartTestCommand() *cobra.Command {
	o := &chartTestOptions{}
	cmd := &cobra.Command{
		Use:   "test NAME",
		Short: "Run the tests of the Helm chart a SyncTarget deployed",
		Long: `Run the test hooks (helm.sh/hook: test) of the chart a SyncTarget deployed, as helm test does:
the chart of the SyncTarget's last applied revision is fetched and rendered as the daemon renders
it, with its tests included, and each test is applied with your credentials, waited for (a Job
until it completes, a Pod until it succeeds) and deleted as its hook-delete-policy says.
Every test runs, in hook-weight order; a line per test gives its result and duration.
The exit code is 1 when a test failed.`,
		Example: `  converge test shop -n team-a
  converge test shop -n team-a --timeout 10m`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd, args[0])
		},
		ValidArgsFunction: completeSyncTargets(&o.cli),
	}
	o.cli.BindFlags(cmd.Flags(), false)
	cmd.Flags().DurationVar(&o.timeout, "timeout", 5*time.Minute, "bound on running every test, from the start of the first")
	return cmd
}

func (o *chartTestOptions) run(cmd *cobra.Command, name string) error {
	if o.timeout <= 0 {
		return usageError(errors.New("--timeout must be positive"))
	}
	c, cfg, err := o.cli.Client()
	if err != nil {
		return err
	}
	ns, err := o.cli.Namespace()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	st := &convergev1.SyncTarget{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, st); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("SyncTarget %s/%s not found", ns, name)
		}
		return fmt.Errorf("reading SyncTarget %s/%s: %w", ns, name, err)
	}
	// The tests of a SyncTarget of a remote cluster run there, as its chart deploys there.
	on, release, err := cluster.ForCaller(ctx, c, cfg, st, true)
	if err != nil {
		return err
	}
	defer release()
	there, err := on.Client("")
	if err != nil {
		return err
	}
	tests, err := chartTests(ctx, c, on, st)
	if err != nil {
		return err
	}
	if len(tests) == 0 {
		_, err := fmt.Fprintf(cmd.OutOrStdout(), "SyncTarget %s/%s: the chart has no tests\n", ns, name)
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	checker, err := on.Checker("")
	if err != nil {
		return err
	}
	return runChartTests(ctx, testRunner(there, checker, o.timeout), cmd.OutOrStdout(), tests)
}

// testRunner runs tests with c, through the apply engine, waited by checker.
func testRunner(c client.Client, checker *health.Checker, timeout time.Duration) hooks.Runner {
	return hooks.Runner{
		Client: c,
		Apply: func(ctx context.Context, objects []*unstructured.Unstructured) (apply.Result, error) {
			return apply.Applier{}.Apply(ctx, c, objects, nil, timeout, apply.Options{})
		},
		Wait: func(ctx context.Context, objects, observed []*unstructured.Unstructured) error {
			refs := make([]health.ObjectRef, 0, len(objects))
			for _, o := range objects {
				refs = append(refs, health.RefForObject(o))
			}
			_, err := checker.Wait(ctx, refs, health.Options{Timeout: timeout, Exprs: hooks.WaitRules(nil), Observed: observed})
			return err
		},
	}
}

// chartTests renders the chart of st's last applied revision with its tests, its source
// and values read with c, for the cluster on (its lookups and capabilities), and returns
// the test hooks, in the order they run.
func chartTests(ctx context.Context, c client.Client, on cluster.Cluster, st *convergev1.SyncTarget) ([]hooks.Hook, error) {
	key := st.Namespace + "/" + st.Name
	rev := st.Status.LastAppliedRevision
	if rev == "" {
		return nil, fmt.Errorf("SyncTarget %s has applied no revision yet: there is nothing to test", key)
	}
	co, err := diff.Fetch(ctx, c, st, rev)
	if err != nil {
		return nil, fmt.Errorf("fetching %s of SyncTarget %s: %w", rev, key, err)
	}
	defer func() { _ = co.Close() }()
	if _, err := os.Stat(filepath.Join(co.Dir, filepath.FromSlash(st.Spec.Path), "Chart.yaml")); err != nil {
		return nil, fmt.Errorf("SyncTarget %s deploys no Helm chart: %q of %s holds no Chart.yaml", key, st.Spec.Path, rev)
	}
	ro, err := diff.TargetRenderOptions(ctx, c, on, st, co.Dir, st.Spec.Path)
	if err == nil {
		err = diff.UseCapabilities(&ro, on)
	}
	if err != nil {
		return nil, err
	}
	ro.Helm.IncludeTests, ro.Helm.DisableHooks = true, false
	objects, err := diff.Render(ctx, on.Mapper(), ro)
	if err != nil {
		return nil, fmt.Errorf("rendering %s of SyncTarget %s: %w", rev, key, err)
	}
	_, all := hooks.Split(objects)
	var tests []hooks.Hook
	seen := map[*unstructured.Unstructured]bool{}
	for _, event := range testEvents {
		for _, h := range hooks.For(all, event) {
			if !seen[h.Object] {
				seen[h.Object] = true
				tests = append(tests, h)
			}
		}
	}
	return tests, nil
}

// runChartTests runs every test, one after the other, and prints a line for each; the
// error says how many failed.
func runChartTests(ctx context.Context, r hooks.Runner, out io.Writer, tests []hooks.Hook) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(w, "TEST\tRESULT\tDURATION\tMESSAGE")
	failed := 0
	for _, h := range tests {
		start := time.Now()
		err := r.Run(ctx, []hooks.Hook{h}, testEvent(h))
		result, message := "Succeeded", ""
		if err != nil {
			failed++
			result, message = "Failed", testFailure(ctx, err)
		}
		_, _ = fmt.Fprintf(w, "%s/%s\t%s\t%s\t%s\n", h.Object.GetKind(), h.Object.GetName(), result,
			time.Since(start).Round(100*time.Millisecond), message)
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d tests failed", failed, len(tests))
	}
	return nil
}

// testEvent is the test event h runs at.
func testEvent(h hooks.Hook) string {
	if h.RunsAt(testEvents[0]) {
		return testEvents[0]
	}
	return testEvents[1]
}

// testFailure is why a test failed, without the hook's name the line already gives.
func testFailure(ctx context.Context, err error) string {
	// client-go's rate limiter refuses a request that would wait past the deadline before
	// the deadline comes, with an error that does not wrap the context's.
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "would exceed context deadline") {
		return "timed out (--timeout)"
	}
	if multi, ok := err.(interface{ Unwrap() []error }); ok {
		if errs := multi.Unwrap(); len(errs) > 1 {
			return errs[len(errs)-1].Error()
		}
	}
	return err.Error()
}
