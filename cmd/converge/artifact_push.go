package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/converge-gitops/converge/sources/charts"
)

// pushArtifactOptions are the flags of `converge push artifact`.
type pushArtifactOptions struct {
	registry    registryOptions
	output      outputOptions
	path        string
	source      string
	revision    string
	annotations []string
}

// pushedArtifact is what `converge push artifact -o json` prints.
type pushedArtifact struct {
	Repository string `json:"repository"`
	Tag        string `json:"tag"`
	Digest     string `json:"digest"`
	Source     string `json:"source,omitempty"`
	Revision   string `json:"revision,omitempty"`
}

func newPushCommand() *cobra.Command {
	return registryVerb("push", "Push configuration to an OCI registry", newPushArtifactCommand())
}

func newPushArtifactCommand() *cobra.Command {
	o := &pushArtifactOptions{}
	cmd := &cobra.Command{
		Use:   "artifact oci://REGISTRY/REPOSITORY:TAG --path DIR",
		Short: "Pack a directory as a configuration artifact and push it to an OCI registry",
		Long: `Pack the files of --path — a kustomization, plain YAML or a chart directory; .git left out,
a link packed as the file it leads to inside the directory — as an OCI artifact and push it under
TAG. The same files pack to the same digest, which is printed.

The manifest is annotated with org.opencontainers.image.source (--source) and
org.opencontainers.image.revision (--revision); in a Git work tree they default to the URL of its
origin remote and to <branch>@sha1:<commit>. --annotation adds others.

Credentials: --creds USER:PASSWORD, --username with --password-stdin or $` + registryPasswordEnv + `,
else what docker login stored. A registry on a loopback address is reached over plain HTTP;
any other over HTTPS.`,
		Example: `  converge push artifact oci://ghcr.io/org/app-config:$(git rev-parse --short HEAD) --path deploy/prod
  echo "$TOKEN" | converge push artifact oci://ghcr.io/org/app-config:latest --path deploy --username org --password-stdin
  converge push artifact oci://localhost:5000/app:dev --path . --annotation org.opencontainers.image.description=dev -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), args[0])
		},
	}
	o.registry.BindFlags(cmd.Flags())
	o.output.BindFlags(cmd)
	cmd.Flags().StringVar(&o.path, "path", "", "the directory to pack")
	cmd.Flags().StringVar(&o.source, "source", "", "the source URL annotated (default: the Git origin's URL)")
	cmd.Flags().StringVar(&o.revision, "revision", "", "the revision annotated (default: <branch>@sha1:<commit> of the Git work tree)")
	cmd.Flags().StringArrayVar(&o.annotations, "annotation", nil, "an annotation of the manifest, KEY=VALUE (repeatable)")
	_ = cmd.MarkFlagDirname("path")
	return cmd
}

func (o *pushArtifactOptions) run(ctx context.Context, in io.Reader, out, errOut io.Writer, ref string) error {
	if err := o.output.Validate(); err != nil {
		return err
	}
	if o.path == "" {
		return usageError(errors.New("--path is needed: the directory to pack"))
	}
	meta, err := o.meta()
	if err != nil {
		return err
	}
	dst, err := o.registry.artifactSource(in, ref)
	if err != nil {
		return err
	}
	a, err := charts.PackArtifact(o.path, meta)
	if err != nil {
		return err
	}
	r, err := newArtifactClient().PushArtifact(ctx, dst, a)
	if err != nil {
		return err
	}
	if o.output.format != outputTable {
		return printStructured(out, o.output.format, pushedArtifact{Repository: dst.Repository, Tag: r.Version, Digest: r.Digest,
			Source: meta.Source, Revision: meta.Revision})
	}
	files := "files"
	if a.Files == 1 {
		files = "file"
	}
	_, _ = fmt.Fprintf(errOut, "pushed %s:%s (%d %s, %d bytes)\n", dst.Repository, r.Version, a.Files, files, a.Bytes)
	_, err = fmt.Fprintln(out, r.Digest)
	return err
}

// meta is what the manifest says of the artifact's origin: the flags, else the Git work
// tree's.
func (o *pushArtifactOptions) meta() (charts.ArtifactMeta, error) {
	meta := charts.ArtifactMeta{Source: o.source, Revision: o.revision}
	if meta.Source == "" || meta.Revision == "" {
		source, revision := gitDefaults(o.path)
		meta.Source = cmp.Or(meta.Source, source)
		meta.Revision = cmp.Or(meta.Revision, revision)
	}
	for _, kv := range o.annotations {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return meta, usageError(fmt.Errorf("--annotation %q is not KEY=VALUE", kv))
		}
		if meta.Annotations == nil {
			meta.Annotations = map[string]string{}
		}
		meta.Annotations[k] = v
	}
	return meta, nil
}
