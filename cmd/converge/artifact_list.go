package main

import (
	"context"
	"errors"
	"io"

	"github.com/spf13/cobra"
)

// listArtifactsOptions are the flags of `converge list artifacts`.
type listArtifactsOptions struct {
	registry registryOptions
	output   outputOptions
}

func newListCommand() *cobra.Command {
	return registryVerb("list", "List configuration in an OCI registry", newListArtifactsCommand())
}

func newListArtifactsCommand() *cobra.Command {
	o := &listArtifactsOptions{}
	cmd := &cobra.Command{
		Use:   "artifacts oci://REGISTRY/REPOSITORY",
		Short: "List the tags of an artifact repository with their digests, sources and revisions",
		Long: `List the tags of an OCI repository in name order (at most 200; the tags cosign writes for its
signatures and attestations left out), each with the digest of its manifest and the source and
revision the manifest is annotated with. Credentials as for converge push artifact.`,
		Example: `  converge list artifacts oci://ghcr.io/org/app-config
  converge list artifacts oci://localhost:5000/app -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), args[0])
		},
	}
	o.registry.BindFlags(cmd.Flags())
	o.output.BindFlags(cmd)
	return cmd
}

func (o *listArtifactsOptions) run(ctx context.Context, in io.Reader, out io.Writer, ref string) error {
	if err := o.output.Validate(); err != nil {
		return err
	}
	src, err := o.registry.artifactSource(in, ref)
	if err != nil {
		return err
	}
	if src.Tag != "" || src.Digest != "" {
		return usageError(errors.New("list a repository, oci://REGISTRY/REPOSITORY, without a tag or digest"))
	}
	list, err := newArtifactClient().ListArtifacts(ctx, src)
	if err != nil {
		return err
	}
	if o.output.format != outputTable {
		return printStructured(out, o.output.format, list)
	}
	rows := [][]string{{"TAG", "DIGEST", "SOURCE", "REVISION"}}
	for _, a := range list {
		rows = append(rows, []string{forgeText(a.Tag), a.Digest, orDash(forgeText(a.Source)), orDash(forgeText(a.Revision))})
	}
	var t alignedTable
	return t.write(out, rows)
}
