package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/spf13/pflag"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/diff"
	"github.com/converge-gitops/converge/sync/helm"
	"github.com/converge-gitops/converge/sync/render"
)

// defaultReleaseName is the release name of a chart rendered without --release-name, as
// helm template names it.
const defaultReleaseName = "release-name"

// templateFlags are helm template's flags, for a chart directory rendered without --target.
type templateFlags struct {
	// repository, chart and version name a chart of a chart repository to render instead
	// of a PATH (helm template --repo URL NAME --version V).
	repository, chart, version string
	values                     helm.Flags
	releaseName                string
	kubeVersion                string
	apiVersions                []string
	fs                         *pflag.FlagSet
}

func (c *templateFlags) BindFlags(fs *pflag.FlagSet) {
	c.fs = fs
	fs.StringVar(&c.repository, "chart-repository", "", "render a chart of this chart repository (https:// with index.yaml, or oci://) instead of a PATH; with --chart")
	fs.StringVar(&c.chart, "chart", "", "with --chart-repository: the chart's name")
	fs.StringVar(&c.version, "chart-version", "", "with --chart-repository: an exact version or a semver range (default: the newest)")
	fs.StringArrayVarP(&c.values.Files, "values", "f", nil, "a chart directory: a values file (repeatable; later files win)")
	fs.StringArrayVar(&c.values.Set, "set", nil, "a chart directory: set a value, name=value[,name=value] (repeatable)")
	fs.StringArrayVar(&c.values.SetString, "set-string", nil, "a chart directory: set a string value, name=value (repeatable)")
	fs.StringArrayVar(&c.values.SetFile, "set-file", nil, "a chart directory: set a value to a file's content, name=path (repeatable)")
	fs.StringVar(&c.releaseName, "release-name", defaultReleaseName, "a chart directory: the release's name (.Release.Name)")
	fs.StringVar(&c.kubeVersion, "kube-version", "", "a chart directory: .Capabilities.KubeVersion (default: the Kubernetes release converge is built with)")
	fs.StringSliceVar(&c.apiVersions, "api-versions", nil, "a chart directory: API versions added to .Capabilities.APIVersions, group/version or group/version/Kind (repeatable)")
}

// given names the first chart flag set, "" when none is.
func (c *templateFlags) given() string {
	for _, name := range []string{"chart-repository", "chart", "chart-version", "values", "set", "set-string", "set-file",
		"release-name", "kube-version", "api-versions"} {
		if f := c.fs.Lookup(name); f != nil && f.Changed {
			return "--" + name
		}
	}
	return ""
}

// fromRepository reports whether a chart of a chart repository is asked for, and checks
// the chart flags together.
func (c *templateFlags) fromRepository() (bool, error) {
	switch {
	case c.repository == "" && c.chart == "" && c.version == "":
		return false, nil
	case c.repository == "" || c.chart == "":
		return false, usageError(errors.New("--chart-repository and --chart go together (--chart-version with them)"))
	}
	return true, nil
}

// fetch fetches the chart of --chart-repository and --chart at --chart-version, as a
// SyncTarget with that spec.chart would (nothing is read from a cluster: no credentials).
func (c *templateFlags) fetch(ctx context.Context) (*diff.Checkout, error) {
	st := &convergev1.SyncTarget{Spec: convergev1.SyncTargetSpec{
		Chart: &convergev1.ChartSource{Repository: c.repository, Name: c.chart, Version: c.version}}}
	return diff.Fetch(ctx, nil, st, "")
}

// helmOptions are the render options of the chart at root/rel as helm template renders it
// with these flags, its release in namespace (its objects without one get it).
func (c *templateFlags) helmOptions(root, rel, namespace string) (*render.HelmOptions, error) {
	if !render.IsChart(root, rel) {
		if flag := c.given(); flag != "" {
			return nil, usageError(errors.New(flag + " is for a chart directory, and " + rel + " holds no Chart.yaml"))
		}
		return nil, nil
	}
	vals, err := c.values.Values()
	if err != nil {
		return nil, err
	}
	inline, err := json.Marshal(vals)
	if err != nil {
		return nil, err
	}
	if namespace == "" {
		namespace = "default"
	}
	if strings.TrimSpace(c.releaseName) == "" {
		return nil, usageError(errors.New("--release-name must not be empty"))
	}
	return &render.HelmOptions{ReleaseName: c.releaseName, Namespace: namespace, Inline: inline,
		KubeVersion: c.kubeVersion, APIVersions: c.apiVersions}, nil
}
