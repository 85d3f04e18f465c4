package main

import (
	"context"
	"errors"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-gitops/converge/internal/diff"
)

// buildOptions are the flags of `converge build`.
type buildOptions struct {
	cli    cliOptions
	source diffSourceOptions
	// decrypt prints the values of Secrets decrypted with the SyncTarget's keys; without
	// it they are masked.
	decrypt bool
}

func newBuildCommand() *cobra.Command {
	o := &buildOptions{}
	cmd := &cobra.Command{
		Use:   "build [PATH | --chart-repository URL --chart NAME] [--target NAME [--path DIR | --revision REF]]",
		Short: "Print the manifests converge would apply, as multi-document YAML",
		Long: `Render a directory exactly as the daemon would — kustomize or plain manifests, confined to its
Git work tree — and print the objects as multi-document YAML, in the order converge applies them.

Without --target nothing is read from the cluster; --target-namespace sets the namespace of every
namespaced object.

A directory holding a Chart.yaml is rendered as helm template renders it, with its flags:
-f/--values, --set, --set-string, --set-file (merged in that order, as Helm merges them),
--release-name (default release-name), --kube-version and --api-versions (.Capabilities; without
them, those helm template assumes); objects without a namespace get --target-namespace (default
"default"), and a dependency that is not vendored under charts/ is named. --chart-repository URL
--chart NAME [--chart-version V] renders a chart of a chart repository (https:// with index.yaml,
or oci://) the same way, fetched as a SyncTarget of that spec.chart fetches it.

With --target NAME the SyncTarget's settings apply (target namespace, owner labels,
spec.postBuild variables and spec.decryption, a chart's spec.helm with the capabilities of the
cluster it deploys to), and PATH (or --path) is rendered as its spec.path would be; without a
PATH its source is fetched at its ref or at --revision REF.

The variables and the SOPS decryption keys are read with your own credentials. Secrets are printed
with their values masked, as converge diff shows them, unless --decrypt is given; a variable taken
from a Secret and used in another kind of object is printed as substituted. Without --target an
encrypted file is an error.`,
		Example: `  converge build deploy/prod
  converge build deploy/prod --target-namespace shop | kubeconform -
  converge build ./charts/shop -f env/prod.yaml --set replicaCount=3 --release-name shop
  converge build ./charts/shop --api-versions monitoring.coreos.com/v1 --kube-version v1.35.0
  converge build --chart-repository https://stefanprodan.github.io/podinfo --chart podinfo --chart-version 6.x
  converge build --target shop -n team-a ./deploy/prod
  converge build --target shop -n team-a --decrypt`,
		ValidArgsFunction: diffCompleteDirs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), args)
		},
	}
	o.cli.BindFlags(cmd.Flags(), false)
	o.source.BindFlags(cmd.Flags(), true)
	cmd.Flags().BoolVar(&o.decrypt, "decrypt", false, "with --target: print the values of Secrets decrypted from SOPS files in plaintext instead of masked")
	_ = cmd.RegisterFlagCompletionFunc("target", diffCompleteTargets(&o.cli))
	return cmd
}

func (o *buildOptions) run(ctx context.Context, out io.Writer, args []string) error {
	if err := o.source.complete(args); err != nil {
		return err
	}
	if o.decrypt && o.source.target == "" {
		return usageError(errors.New("--decrypt needs --target: the keys are the SyncTarget's"))
	}
	var c client.Client
	var mapper meta.RESTMapper
	if o.source.target != "" {
		var err error
		if c, _, err = o.cli.Client(); err != nil {
			return diffFailed(err)
		}
		mapper = c.RESTMapper()
	}
	in, err := o.source.load(ctx, &o.cli, c)
	if err != nil {
		return diffFailed(err)
	}
	defer func() { _ = in.Close() }()
	objects, err := diff.Render(ctx, mapper, in.render)
	if err != nil {
		return diffFailed(err)
	}
	if in.render.Decryption != nil && !o.decrypt {
		objects = diff.MaskSecrets(objects)
	}
	if err := diff.WriteManifests(out, objects); err != nil {
		return diffFailed(err)
	}
	return nil
}
