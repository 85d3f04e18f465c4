package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/convert"
)

// convertOptions are the flags of `converge convert`.
type convertOptions struct {
	cli         cliOptions
	fromCluster bool
	output      string
	cleanUp     bool
}

func newConvertCommand() *cobra.Command {
	o := &convertOptions{}
	cmd := &cobra.Command{
		Use:   "convert [FILE|DIR|-]... [--from-cluster [-n NS | -A]]",
		Short: "Print the converge objects equivalent to Flux and Argo CD objects",
		Long: `Read Flux objects (GitRepository, Kustomization, HelmRepository, OCIRepository, HelmRelease,
Alert, Provider) and Argo CD objects (Application, ApplicationSet) and print the equivalent
converge objects as YAML: SyncTargets, SyncTargetSets and Notifiers, sorted by kind,
namespace and name. Nothing is applied.

The objects are read from YAML or JSON files (multi-document), from directories walked
recursively (hidden directories, symbolic links and the patches a kustomization.yaml names
are left out), from standard input (-), or with --from-cluster from the cluster of the
kubeconfig (kinds not installed are skipped). Other objects are ignored.

Each object is preceded by a comment naming what it was made from, and every field that
converge does not have, or that behaves differently, is commented "# converge convert:".
What could not be carried over is listed on standard error, and the exit code is then 2,
after everything that could be converted was printed. See docs/migration.md.

With --clean-up every SyncTarget printed (and every SyncTargetSet's template) is annotated
converge.dev/clean-up-other-tools: enabled: when converge takes over the objects Flux,
Helm or Argo CD made, it also removes the labels and annotations those tools left on them.`,
		Example: `  converge convert clusters/production
  kustomize build apps/staging | converge convert -
  converge convert --from-cluster -A > converge.yaml`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), args)
		},
	}
	o.cli.BindFlags(cmd.Flags(), true)
	cmd.Flags().BoolVar(&o.fromCluster, "from-cluster", false, "list the Flux and Argo CD objects of the cluster instead of reading files")
	cmd.Flags().StringVarP(&o.output, "output", "o", outputYAML, "output format: yaml")
	cmd.Flags().BoolVar(&o.cleanUp, "clean-up", false,
		"annotate the SyncTargets "+convergev1.CleanUpOtherToolsAnnotation+": "+convergev1.EnabledValue+
			" so that a takeover removes the old tool's labels and annotations")
	return cmd
}

func (o *convertOptions) run(ctx context.Context, in io.Reader, out, errOut io.Writer, args []string) error {
	if o.output != outputYAML {
		return usageError(fmt.Errorf("--output must be yaml, not %q", o.output))
	}
	objs, problems, err := o.read(ctx, in, args)
	if err != nil {
		return err
	}
	res := convert.Convert(objs)
	if o.cleanUp {
		res.CleanUpOtherTools()
	}
	res.Problems = append(problems, res.Problems...)
	if err := convert.Print(out, res); err != nil {
		return err
	}
	failed := res.Failed()
	for _, p := range res.Problems {
		level := "warning"
		if !p.Warning {
			level = "not converted"
		}
		_, _ = fmt.Fprintf(errOut, "%s: %s\n", level, p)
	}
	if len(res.Objects) == 0 {
		_, _ = fmt.Fprintln(errOut, "no Flux or Argo CD object was converted")
	}
	if failed {
		return &exitError{code: 2, err: errors.New("some fields or objects could not be carried over (listed above)")}
	}
	return nil
}

// read gathers the input objects: from the cluster, or from the paths (standard input
// when there are none).
func (o *convertOptions) read(ctx context.Context, in io.Reader, args []string) ([]*unstructured.Unstructured, []convert.Problem, error) {
	if o.fromCluster {
		if len(args) > 0 {
			return nil, nil, usageError(errors.New("--from-cluster takes no FILE or DIR"))
		}
		return o.list(ctx)
	}
	if o.cli.namespace != "" || o.cli.allNamespaces {
		return nil, nil, usageError(errors.New("-n and -A go with --from-cluster"))
	}
	if len(args) == 0 {
		if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			return nil, nil, usageError(errors.New("give FILE, DIR or - (standard input), or --from-cluster"))
		}
		args = []string{"-"}
	}
	input := &convert.Input{Stdin: in}
	for _, a := range args {
		if err := input.Read(a); err != nil {
			return nil, nil, err
		}
	}
	return input.Objects, input.Problems, nil
}

func (o *convertOptions) list(ctx context.Context) ([]*unstructured.Unstructured, []convert.Problem, error) {
	ns := ""
	if !o.cli.allNamespaces {
		var err error
		if ns, err = o.cli.Namespace(); err != nil {
			return nil, nil, err
		}
	}
	cfg, err := o.cli.kube.restConfig()
	if err != nil {
		return nil, nil, err
	}
	objs, err := convert.FromCluster(ctx, cfg, ns)
	return objs, nil, err
}
