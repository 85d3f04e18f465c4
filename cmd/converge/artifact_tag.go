package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// tagArtifactOptions are the flags of `converge tag artifact`.
type tagArtifactOptions struct {
	registry registryOptions
	output   outputOptions
	tag      string
}

// taggedArtifact is what `converge tag artifact -o json` prints.
type taggedArtifact struct {
	Repository string `json:"repository"`
	Tag        string `json:"tag"`
	Digest     string `json:"digest"`
}

func newTagCommand() *cobra.Command {
	return registryVerb("tag", "Tag configuration in an OCI registry", newTagArtifactCommand())
}

func newTagArtifactCommand() *cobra.Command {
	o := &tagArtifactOptions{}
	cmd := &cobra.Command{
		Use:   "artifact oci://REGISTRY/REPOSITORY:TAG --tag NEW",
		Short: "Tag an artifact of an OCI registry again, in the same repository",
		Long: `Give the manifest oci://REGISTRY/REPOSITORY:TAG (or @sha256:<digest>) names the tag NEW too —
to promote what was tested, for instance — and print its digest. Nothing is downloaded but
the manifest. Credentials as for converge push artifact.`,
		Example: `  converge tag artifact oci://ghcr.io/org/app-config:3f2a9c1 --tag production`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), args[0])
		},
	}
	o.registry.BindFlags(cmd.Flags())
	o.output.BindFlags(cmd)
	cmd.Flags().StringVar(&o.tag, "tag", "", "the new tag")
	return cmd
}

func (o *tagArtifactOptions) run(ctx context.Context, in io.Reader, out io.Writer, ref string) error {
	if err := o.output.Validate(); err != nil {
		return err
	}
	if o.tag == "" {
		return usageError(errors.New("--tag is needed: the new tag"))
	}
	src, err := o.registry.artifactSource(in, ref)
	if err != nil {
		return err
	}
	r, err := newArtifactClient().TagArtifact(ctx, src, o.tag)
	if err != nil {
		return err
	}
	if o.output.format != outputTable {
		return printStructured(out, o.output.format, taggedArtifact{Repository: src.Repository, Tag: r.Version, Digest: r.Digest})
	}
	_, err = fmt.Fprintln(out, r.Digest)
	return err
}
