// Command image builds the OCI image of the converge daemon without a Docker daemon: it
// cross-compiles a static converge binary per platform (CGO_ENABLED=0, -trimpath, no build
// id), puts it on an empty (scratch) base with Mozilla's CA roots and a non-root user
// 65532, and writes a multi-platform OCI image index to an OCI image layout, an OCI
// archive of that layout and, with -push, to a registry. The build is reproducible: every
// timestamp is the commit time (SOURCE_DATE_EPOCH), tar entries are sorted with fixed
// owners and modes, so two builds of one commit with one Go toolchain give one digest.
//
// `make image` runs it; see README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		o         Options
		platforms string
		image     string
		out       string
		push      bool
	)
	flag.StringVar(&o.Root, "root", "../..", "the converge repository")
	flag.StringVar(&platforms, "platforms", "linux/amd64,linux/arm64", "comma-separated platforms to build")
	flag.StringVar(&o.Version, "version", "", "the version to stamp (default: git describe --tags --always --dirty, or dev)")
	flag.StringVar(&o.Revision, "revision", "", "the commit to stamp (default: git rev-parse HEAD)")
	flag.StringVar(&o.SourceDateEpoch, "source-date-epoch", os.Getenv("SOURCE_DATE_EPOCH"),
		"Unix time of every timestamp in the image (default: $SOURCE_DATE_EPOCH, else the commit time)")
	flag.StringVar(&image, "image", DefaultRepository, "image reference; without a tag, the version is the tag")
	flag.StringVar(&out, "out", "", "directory of the OCI layout (out/oci) and archive (out/converge.oci.tar); default ROOT/bin/image")
	flag.BoolVar(&push, "push", false, "push the image index to the registry of -image")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	ps, err := ParsePlatforms(platforms)
	if err != nil {
		return err
	}
	o.Platforms = ps
	o.Log = os.Stderr
	if out == "" {
		out = o.Root + "/bin/image"
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := o.Complete(ctx); err != nil {
		return err
	}
	ref, err := Reference(image, o.Version)
	if err != nil {
		return err
	}
	idx, err := Build(ctx, o)
	if err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	created, err := o.created()
	if err != nil {
		return err
	}
	if err := WriteOutputs(out, ref, idx, created); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "image %s@%s (%s): %s/oci, %s/converge.oci.tar\n", ref, digest, strings.Join(platformNames(ps), ", "), out, out)
	if push {
		pushed, err := Push(ctx, ref, idx)
		if err != nil {
			return err
		}
		if err := os.WriteFile(out+"/pushed", []byte(pushed+"\n"), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "pushed %s\n", pushed)
	}
	return nil
}
