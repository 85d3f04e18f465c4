package main

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/spf13/pflag"

	"github.com/converge-gitops/converge/sync/helm"
	"github.com/converge-gitops/converge/sync/render"
)

// defaultReleaseName is the release name of a chart rendered without --release-name, as
// helm template names it.
const defaultReleaseName = "release-name"

// templateFlags are helm template's flags, for a chart directory rendered without --target.
type templateFlags struct {
	values      helm.Flags
	releaseName string
	kubeVersion string
	apiVersions []string
	fs          *pflag.FlagSet
}

func (c *templateFlags) BindFlags(fs *pflag.FlagSet) {
	c.fs = fs
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
	for _, name := range []string{"values", "set", "set-string", "set-file", "release-name", "kube-version", "api-versions"} {
		if f := c.fs.Lookup(name); f != nil && f.Changed {
			return "--" + name
		}
	}
	return ""
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
