package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	"github.com/fluxcd/cli-utils/pkg/object"
	"github.com/fluxcd/pkg/ssa"
	ssautils "github.com/fluxcd/pkg/ssa/utils"
	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/config"
	"github.com/converge-gitops/converge/sync/apply"
)

// installNamespace is where the daemon runs.
const installNamespace = "converge-system"

// nameLabel marks every object of the install (app.kubernetes.io/name: converge).
const nameLabel = "app.kubernetes.io/name"

// installOptions are the flags of `converge install`.
type installOptions struct {
	cli         cliOptions // only the connection flags: the namespace is converge-system
	export      bool
	multiTenant bool
	image       string
	wait        bool
	timeout     time.Duration
	// pollInterval is how often --wait reads the Deployment.
	pollInterval time.Duration
	// build is this binary's version, which picks the default image.
	build build
}

func newInstallCommand() *cobra.Command {
	o := &installOptions{pollInterval: time.Second, build: currentBuild()}
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Install converge: the SyncTarget CRD, RBAC and the daemon in converge-system",
		Long: `Install converge into the cluster with server-side apply (field manager converge): the
SyncTarget CRD, the namespace converge-system, the daemon's service account, RBAC, its
Deployment running 'converge serve' and the Service of its push webhook. Running it again
updates the install; switching between the default and the multi-tenant install removes
what the other one granted.

By default the daemon may apply anything, as Flux's controllers may, unless a SyncTarget
names a service account to impersonate. With --multi-tenant the daemon itself may only
read SyncTargets and the Secrets they name, write their status and events, and impersonate
service accounts; SyncTargets naming none impersonate converge-tenant-default, which has
no rights.

The daemon's image is, unless --image names another, the image of this binary's version:
` + config.Image + `:<version> (a "+" in the version becomes "-"), pinned to its
digest when the binary was stamped with one (-X main.installImage, see README.md). A dev
build, stamped with no version, keeps the tag of config/default.

--wait then waits, up to --timeout, until the daemon's Deployment has rolled out, printing
its progress; when it does not, it says why the pods are stuck (an image that cannot be
pulled, a crash loop).

--export prints the manifests instead; for a dev build without --image exactly what
'kustomize build config/default' (or config/multi-tenant) of the converge repository gives.`,
		Example: `  converge install
  converge install --multi-tenant
  converge install --wait
  converge install --export > converge.yaml
  converge install --image registry.example.com/converge:v1.2.3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	o.cli.kube.BindFlags(cmd.Flags())
	cmd.Flags().BoolVar(&o.export, "export", false, "print the manifests as YAML instead of applying them")
	cmd.Flags().BoolVar(&o.multiTenant, "multi-tenant", false,
		"install the locked-down daemon: it acts only as the service accounts SyncTargets name")
	cmd.Flags().StringVar(&o.image, "image", "", "image of the daemon, e.g. registry.example.com/converge:v1.2.3 (default: "+
		defaultImageHelp(o.build)+")")
	cmd.Flags().BoolVar(&o.wait, "wait", false, "wait until the daemon's Deployment has rolled out")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 2*time.Minute, "how long to wait for the CRD and namespace to be ready, and with --wait for the rollout")
	return cmd
}

func (o *installOptions) overlays() (want, other string) {
	if o.multiTenant {
		return config.MultiTenant, config.Default
	}
	return config.Default, config.MultiTenant
}

func (o *installOptions) run(ctx context.Context, out io.Writer) error {
	overlay, other := o.overlays()
	image := o.image
	if image == "" {
		image = defaultImage(o.build, installImage)
	}
	manifests, err := config.Build(overlay, image)
	if err != nil {
		return err
	}
	if o.export {
		_, err := out.Write(manifests)
		return err
	}
	objects, err := ssautils.ReadObjects(bytes.NewReader(manifests))
	if err != nil {
		return fmt.Errorf("reading the manifests: %w", err)
	}
	c, _, err := o.cli.Client()
	if err != nil {
		return err
	}
	if err := o.install(ctx, c, out, objects, other); err != nil || !o.wait {
		return err
	}
	for _, u := range objects {
		if u.GetKind() == "Deployment" && u.GetNamespace() == installNamespace {
			if err := waitRollout(ctx, c, out, u, o.pollInterval, o.timeout); err != nil {
				return err
			}
		}
	}
	return nil
}

// install applies objects, CRDs, namespaces and cluster roles first, waited for (the CRD
// Established), then the rest; and deletes what of the other install it does not have.
// Every change is printed, also those made before a failure.
func (o *installOptions) install(ctx context.Context, c client.Client, out io.Writer,
	objects []*unstructured.Unstructured, other string) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout+time.Minute)
	defer cancel()
	var werr error
	report := func(format string, args ...any) {
		if werr == nil {
			_, werr = fmt.Fprintf(out, format, args...)
		}
	}
	rm := ssa.NewResourceManager(c, polling.NewStatusPoller(c, c.RESTMapper(), polling.Options{}),
		ssa.Owner{Field: apply.FieldManager, Group: convergev1.GroupVersion.Group})
	opts := ssa.DefaultApplyOptions()
	opts.WaitInterval = 500 * time.Millisecond
	opts.WaitTimeout = o.timeout
	cs, err := rm.ApplyAllStaged(ctx, objects, opts)
	count := map[ssa.Action]int{}
	if cs != nil {
		for _, e := range cs.Entries {
			count[e.Action]++
			report("%s %s\n", e.Subject, e.Action)
		}
	}
	if err != nil {
		return fmt.Errorf("installing converge: %w", err)
	}
	deleted, err := o.removeOther(ctx, c, objects, other)
	for _, d := range deleted {
		report("%s %s\n", d, ssa.DeletedAction)
	}
	if err != nil {
		return err
	}
	kind := "default"
	if o.multiTenant {
		kind = "multi-tenant"
	}
	report("converge installed (%s) in %s: %d created, %d configured, %d unchanged, %d deleted; image %s\n",
		kind, installNamespace, count[ssa.CreatedAction], count[ssa.ConfiguredAction], count[ssa.UnchangedAction], len(deleted),
		daemonImage(objects))
	return werr
}

// defaultImage is the daemon's image `converge install` deploys without --image: the
// stamped installImage, else the image of b's version; "" (config/default's tag) for a
// dev build.
func defaultImage(b build, stamped string) string {
	if stamped != "" {
		return stamped
	}
	if b.Version == "dev" {
		return ""
	}
	return config.Image + ":" + imageTag(b.Version)
}

func defaultImageHelp(b build) string {
	if img := defaultImage(b, installImage); img != "" {
		return img + ", the image of this version"
	}
	return config.Image + " with the tag of config/default: this is a dev build"
}

// imageTag is the image tag of a version: characters a tag may not hold ("+" of semver
// build metadata) become "-", as in tools/image.
func imageTag(version string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
			return r
		}
		return '-'
	}, version)
}

// daemonImage is the image of the daemon's container in the install.
func daemonImage(objects []*unstructured.Unstructured) string {
	for _, u := range objects {
		if u.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			if m, ok := c.(map[string]any); ok {
				if img, ok := m["image"].(string); ok {
					return img
				}
			}
		}
	}
	return "unknown"
}

// removeOther deletes the objects of the other install that this one does not have —
// the cluster-admin binding when going multi-tenant — so that switching takes the rights
// of the previous install away. Only objects labelled as converge's are deleted.
func (o *installOptions) removeOther(ctx context.Context, c client.Client, objects []*unstructured.Unstructured,
	other string) ([]string, error) {
	manifests, err := config.Build(other, "")
	if err != nil {
		return nil, err
	}
	others, err := ssautils.ReadObjects(bytes.NewReader(manifests))
	if err != nil {
		return nil, fmt.Errorf("reading the manifests: %w", err)
	}
	keep := map[object.ObjMetadata]bool{}
	for _, u := range objects {
		keep[object.UnstructuredToObjMetadata(u)] = true
	}
	var deleted []string
	for _, u := range others {
		if keep[object.UnstructuredToObjMetadata(u)] {
			continue
		}
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(u.GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKeyFromObject(u), live); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return deleted, fmt.Errorf("reading %s: %w", ssautils.FmtUnstructured(u), err)
		}
		if live.GetLabels()[nameLabel] != "converge" {
			continue
		}
		uid := live.GetUID()
		if err := c.Delete(ctx, live, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return deleted, fmt.Errorf("deleting %s: %w", ssautils.FmtUnstructured(u), err)
		}
		deleted = append(deleted, ssautils.FmtUnstructured(u))
	}
	return deleted, nil
}
