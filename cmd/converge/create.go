package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	chartloader "helm.sh/helm/v4/pkg/chart/v2/loader"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/crdvalidate"
	"github.com/converge-gitops/converge/sources"
)

// cliFieldManager owns the fields `converge create` applies.
const cliFieldManager = "converge-cli"

// webhookTokenKey is the key of a webhook Secret the daemon reads.
const webhookTokenKey = "token"

func newCreateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create or update a SyncTarget or a Secret it uses, or print it with --export",
		Args:  usageArgs(cobra.NoArgs),
	}
	cmd.AddCommand(newCreateSyncTargetCommand(), newCreateSecretCommand())
	return cmd
}

// createSyncTargetOptions are the flags of `converge create synctarget`.
type createSyncTargetOptions struct {
	cli                                       cliOptions
	export                                    bool
	url, branch, tag, semver, commit, refName string
	path, targetNamespace, schedule           string
	secretRef, webhookSecretRef               string
	serviceAccount, maxDeletions              string
	interval, timeout                         time.Duration
	prune                                     bool
	dependsOn                                 []string
	chart                                     chartFlags
}

// chartFlags are the flags of `converge create synctarget` for a Helm chart: one of a
// chart repository (spec.chart), and how it renders (spec.helm).
type chartFlags struct {
	repository, name, version, secret string
	releaseName, crds                 string
	values, valuesFrom                []string
	helm                              bool
}

// maxValuesFile bounds a --values file read into spec.helm.values.
const maxValuesFile = 1 << 20

func newCreateSyncTargetCommand() *cobra.Command {
	o := &createSyncTargetOptions{}
	cmd := &cobra.Command{
		Use:     "synctarget NAME",
		Aliases: []string{"st"},
		Short:   "Create or update a SyncTarget (server-side apply), or print it with --export",
		Long: `Build a SyncTarget from the flags, check it against the rules of the CRD this converge
carries (those the API server enforces once it is installed, with its messages), then
server-side apply it as "` + cliFieldManager + `":
running the command again with other flags updates the SyncTarget, and a flag left out is unset.
An invalid SyncTarget is refused and nothing is sent to the cluster.

--export prints the SyncTarget as YAML instead, for committing to Git.

A Helm chart of a chart repository (https:// serving index.yaml, or oci://) is followed with
--chart-repository and --chart instead of --url; --interval and --schedule then poll the
chart repository. A chart kept in Git is --url with a --path holding its Chart.yaml; --helm
says so (any Helm flag implies it). --values files are read here, on this machine, and
merged in order into spec.helm.values, stored in the SyncTarget in clear text: keep secret
values in a Secret and name it with --values-from instead.`,
		Example: `  converge create synctarget shop --url https://github.com/acme/shop --branch main --path deploy --prune
  converge create st shop --url git@github.com:acme/shop.git --semver '>=1.0.0 <2.0.0' --secret-ref shop-git
  converge create st shop --url https://github.com/acme/shop --tag v1.2.3 --export > shop.yaml
  converge create st podinfo --chart-repository oci://ghcr.io/stefanprodan/charts --chart podinfo \
      --chart-version '>=6.5 <7' --values prod-values.yaml --values-from secret/podinfo-secrets:values.yaml
  converge create st shop --url https://github.com/acme/shop --branch main --path charts/shop --helm --crds Skip`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd, args[0])
		},
	}
	o.bindFlags(cmd)
	return cmd
}

func (o *createSyncTargetOptions) bindFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	o.cli.BindFlags(fs, false)
	fs.BoolVar(&o.export, "export", false, "print the SyncTarget as YAML instead of applying it")
	fs.StringVar(&o.url, "url", "", "URL of the Git repository (https://, http://, ssh:// or user@host:path)")
	fs.StringVar(&o.branch, "branch", "", "branch to follow")
	fs.StringVar(&o.tag, "tag", "", "tag to follow")
	fs.StringVar(&o.semver, "semver", "", "semver range; the highest matching tag is followed")
	fs.StringVar(&o.commit, "commit", "", "full commit SHA to pin")
	fs.StringVar(&o.refName, "ref-name", "", "fully qualified ref to follow, e.g. refs/pull/7/head")
	fs.StringVar(&o.path, "path", "", "path inside the repository to render (default: its root)")
	fs.StringVar(&o.targetNamespace, "target-namespace", "", "namespace set on every namespaced object rendered")
	fs.DurationVar(&o.interval, "interval", 0, "interval between polls of the repository (default 1m)")
	fs.StringVar(&o.schedule, "schedule", "", "cron schedule of the polls, instead of --interval")
	fs.StringVar(&o.secretRef, "secret-ref", "", "Secret with the credentials of the repository")
	fs.StringVar(&o.webhookSecretRef, "webhook-secret-ref", "", "Secret whose \"token\" signs push webhooks")
	fs.StringArrayVar(&o.dependsOn, "depends-on", nil, "SyncTarget (NAME or NAMESPACE/NAME) that must be Ready first; repeatable")
	fs.BoolVar(&o.prune, "prune", false, "delete the objects applied before once they leave Git")
	fs.DurationVar(&o.timeout, "timeout", 0, "bound on applying and health checking one revision (default 5m)")
	fs.StringVar(&o.serviceAccount, "service-account", "", "service account impersonated for every apply and prune")
	fs.StringVar(&o.maxDeletions, "max-deletions", "", "most objects one revision may prune: a count or a percentage such as 25%")
	o.chart.bindFlags(cmd)
}

func (c *chartFlags) bindFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&c.repository, "chart-repository", "", "URL of a chart repository (https:// with index.yaml, or oci://), instead of --url")
	fs.StringVar(&c.name, "chart", "", "name of the chart in --chart-repository")
	fs.StringVar(&c.version, "chart-version", "", "exact chart version or semver range (default: the newest)")
	fs.StringVar(&c.secret, "chart-secret", "", "Secret with the credentials of the chart repository")
	fs.BoolVar(&c.helm, "helm", false, "render --path as a Helm chart kept in Git (set by any other Helm flag)")
	fs.StringVar(&c.releaseName, "release-name", "", "Helm release name (default: the SyncTarget's name)")
	fs.StringArrayVar(&c.values, "values", nil,
		"local YAML values file, read now and merged in order into spec.helm.values (stored in clear text); repeatable")
	fs.StringArrayVar(&c.valuesFrom, "values-from", nil,
		"values from a ConfigMap or Secret of the namespace, KIND/NAME[:KEY] (KEY default values.yaml); repeatable")
	fs.StringVar(&c.crds, "crds", "", "what happens to the chart's crds/: CreateReplace (default), Create or Skip")
}

func (o *createSyncTargetOptions) run(cmd *cobra.Command, name string) error {
	ns, err := createNamespace(&o.cli, o.export)
	if err != nil {
		return err
	}
	st, err := o.syncTarget(cmd, ns, name)
	if err != nil {
		return err
	}
	if err := validateSyncTarget(st); err != nil {
		return err
	}
	obj, err := exportable(st)
	if err != nil {
		return err
	}
	if o.export {
		return printYAML(cmd.OutOrStdout(), obj)
	}
	if err := applyObject(cmd.Context(), &o.cli, obj); err != nil {
		return err
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "SyncTarget %s/%s applied\n", ns, name)
	return err
}

// syncTarget builds the SyncTarget the flags describe. It only refuses what the flags
// cannot express; the rules of the API are checked by validateSyncTarget.
func (o *createSyncTargetOptions) syncTarget(cmd *cobra.Command, ns, name string) (*convergev1.SyncTarget, error) {
	st := &convergev1.SyncTarget{
		TypeMeta:   metav1.TypeMeta{APIVersion: convergev1.GroupVersion.String(), Kind: convergev1.SyncTargetKind},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
	}
	if err := o.source(cmd, &st.Spec); err != nil {
		return nil, err
	}
	if cmd.Flags().Changed("timeout") {
		st.Spec.Timeout = &metav1.Duration{Duration: o.timeout}
	}
	st.Spec.Path, st.Spec.TargetNamespace, st.Spec.Prune = o.path, o.targetNamespace, o.prune
	st.Spec.ServiceAccountName = o.serviceAccount
	if o.maxDeletions != "" {
		v := intstr.Parse(o.maxDeletions)
		st.Spec.MaxDeletions = &v
	}
	for _, d := range o.dependsOn {
		ref, err := parseDependency(d)
		if err != nil {
			return nil, err
		}
		st.Spec.DependsOn = append(st.Spec.DependsOn, ref)
	}
	return st, nil
}

// source sets spec.source, or spec.chart when a chart flag is given (the polls of
// --interval and --schedule go to the one set), and spec.helm.
func (o *createSyncTargetOptions) source(cmd *cobra.Command, spec *convergev1.SyncTargetSpec) error {
	var interval *metav1.Duration
	if cmd.Flags().Changed("interval") {
		interval = &metav1.Duration{Duration: o.interval}
	}
	helm, err := o.chart.helmSpec()
	if err != nil {
		return err
	}
	spec.Helm = helm
	c := o.chart
	if c.repository != "" || c.name != "" || c.version != "" || c.secret != "" {
		spec.Chart = &convergev1.ChartSource{Repository: c.repository, Name: c.name, Version: c.version,
			SecretRef: localRef(c.secret), Interval: interval, Schedule: convergev1.CronSchedule(o.schedule)}
		if o.url != "" || o.secretRef != "" || o.webhookSecretRef != "" {
			return usageError(fmt.Errorf("--chart-repository and --chart follow a chart repository: --url, --secret-ref and --webhook-secret-ref are for Git"))
		}
		return nil
	}
	src := &spec.Source
	src.URL, src.Schedule, src.Interval = o.url, convergev1.CronSchedule(o.schedule), interval
	src.Ref = convergev1.GitRef{Branch: o.branch, Tag: o.tag, SemVer: o.semver, Commit: o.commit, Name: o.refName}
	src.SecretRef, src.WebhookSecretRef = localRef(o.secretRef), localRef(o.webhookSecretRef)
	return nil
}

// helmSpec is spec.helm as the Helm flags describe it: nil when none is given.
func (c *chartFlags) helmSpec() (*convergev1.HelmSpec, error) {
	if !c.helm && c.releaseName == "" && c.crds == "" && len(c.values) == 0 && len(c.valuesFrom) == 0 {
		return nil, nil
	}
	h := &convergev1.HelmSpec{ReleaseName: c.releaseName, CRDs: convergev1.CRDPolicy(c.crds)}
	for _, s := range c.valuesFrom {
		ref, err := parseValuesFrom(s)
		if err != nil {
			return nil, err
		}
		h.ValuesFrom = append(h.ValuesFrom, ref)
	}
	values, err := readValues(c.values)
	if err != nil || values == nil {
		return h, err
	}
	raw, err := json.Marshal(values)
	if err != nil {
		return nil, err
	}
	h.Values = &apiextensionsv1.JSON{Raw: raw}
	return h, nil
}

// parseValuesFrom reads KIND/NAME[:KEY]; KIND is ConfigMap or Secret, in any case.
func parseValuesFrom(s string) (convergev1.ValuesReference, error) {
	kindName, key, _ := strings.Cut(s, ":")
	kind, name, ok := strings.Cut(kindName, "/")
	kinds := map[string]string{"configmap": "ConfigMap", "cm": "ConfigMap", "secret": "Secret"}
	if !ok || kinds[strings.ToLower(kind)] == "" || name == "" || strings.HasSuffix(s, ":") {
		return convergev1.ValuesReference{}, usageError(fmt.Errorf("--values-from %q: want KIND/NAME[:KEY], KIND ConfigMap or Secret", s))
	}
	return convergev1.ValuesReference{Kind: kinds[strings.ToLower(kind)], Name: name, ValuesKey: key}, nil
}

// readValues reads YAML values files and merges them in order, as helm -f does: maps
// merge key by key, any other value of a later file replaces the earlier one.
func readValues(files []string) (map[string]any, error) {
	var out map[string]any
	for _, file := range files {
		b, err := readBounded(file, maxValuesFile)
		if err != nil {
			return nil, usageError(fmt.Errorf("--values %s: %w", file, err))
		}
		var values map[string]any
		if err := yaml.Unmarshal(b, &values); err != nil {
			return nil, usageError(fmt.Errorf("--values %s: not a YAML map of values: %w", file, err))
		}
		out = chartloader.MergeMaps(out, values)
	}
	return out, nil
}

func readBounded(file string, limit int64) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(b)) > limit {
		err = fmt.Errorf("larger than %d bytes", limit)
	}
	return b, err
}

// createNamespace is -n, else the namespace of the kubeconfig context; with --export, which
// needs no cluster, also "default" when there is no kubeconfig at all.
func createNamespace(o *cliOptions, export bool) (string, error) {
	if o.namespace == "" && export {
		if _, _, err := o.kube.clientConfig().Namespace(); clientcmd.IsEmptyConfig(err) {
			return "default", nil
		}
	}
	return o.Namespace()
}

func localRef(name string) *convergev1.LocalObjectReference {
	if name == "" {
		return nil
	}
	return &convergev1.LocalObjectReference{Name: name}
}

// parseDependency reads NAME or NAMESPACE/NAME.
func parseDependency(s string) (convergev1.DependencyReference, error) {
	parts := strings.Split(s, "/")
	switch {
	case len(parts) == 1 && s != "":
		return convergev1.DependencyReference{Name: s}, nil
	case len(parts) == 2 && parts[0] != "" && parts[1] != "":
		return convergev1.DependencyReference{Namespace: parts[0], Name: parts[1]}, nil
	}
	return convergev1.DependencyReference{}, usageError(fmt.Errorf("--depends-on %q: want NAME or NAMESPACE/NAME", s))
}

// validateSyncTarget checks st as the API server would on create (package crdvalidate:
// its metadata, the schema of the CRD the binary carries and its CEL rules). The error
// reads like the API server's: `SyncTarget.converge.dev "NAME" is invalid: …`.
func validateSyncTarget(st *convergev1.SyncTarget) error {
	v, err := crdvalidate.For(convergev1.SyncTargetKind)
	if err != nil {
		return err
	}
	obj, err := exportable(st)
	if err != nil {
		return err
	}
	errs := v.Errors(context.Background(), obj)
	if len(errs) == 0 {
		return nil
	}
	return usageError(apierrors.NewInvalid(schema.GroupKind{Group: convergev1.GroupVersion.Group, Kind: convergev1.SyncTargetKind}, st.Name, errs))
}

// exportable is obj as it is applied and exported: apiVersion, kind, metadata and spec
// (or a Secret's type and data), without status or empty fields.
func exportable(obj runtime.Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("converting the object: %w", err)
	}
	delete(m, "status")
	if meta, ok := m["metadata"].(map[string]any); ok {
		delete(meta, "creationTimestamp")
	}
	return &unstructured.Unstructured{Object: m}, nil
}

func printYAML(out io.Writer, obj *unstructured.Unstructured) error {
	b, err := yaml.Marshal(obj.Object)
	if err != nil {
		return fmt.Errorf("printing the object: %w", err)
	}
	_, err = out.Write(append([]byte("---\n"), b...))
	return err
}

// applyObject server-side applies obj as the CLI's field manager, taking over fields
// another manager set: the flags say what the object must be.
func applyObject(ctx context.Context, o *cliOptions, obj *unstructured.Unstructured) error {
	c, _, err := o.Client()
	if err != nil {
		return err
	}
	err = c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(cliFieldManager), client.ForceOwnership)
	if err != nil {
		return fmt.Errorf("applying %s %s/%s: %w", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

func newCreateSecretCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secret",
		Short: "Create or update a Secret a SyncTarget uses, or print it with --export",
		Args:  usageArgs(cobra.NoArgs),
	}
	cmd.AddCommand(newCreateGitSecretCommand(), newCreateWebhookSecretCommand())
	return cmd
}

// createGitSecretOptions are the flags of `converge create secret git`.
type createGitSecretOptions struct {
	cli                                    cliOptions
	export                                 bool
	url, username                          string
	sshKeyFile, knownHostsFile, passphrase string
	caFile                                 string
	gitSecretFlags
}

// The environment variables the password and the bearer token of git credentials are taken
// from when none of their flags is given.
const (
	gitPasswordEnv    = "CONVERGE_GIT_PASSWORD"
	gitBearerTokenEnv = "CONVERGE_GIT_BEARER_TOKEN"
)

// maxSecretInput bounds what --password-stdin and --bearer-token-stdin read.
const maxSecretInput = 64 << 10

// gitSecretInputHelp, in the help of the commands that take git credentials, says how to give
// the password and the bearer token without showing them to other users.
const gitSecretInputHelp = `--password and --bearer-token show the secret to other users of the machine (ps) and
leave it in the shell history. Prefer --password-stdin or --bearer-token-stdin, which read
it from standard input (one trailing newline removed; one of the two only, standard input
is read once), or the environment variables ` + gitPasswordEnv + ` and
` + gitBearerTokenEnv + `, read when no flag gives the value (a flag wins over its variable).`

// gitSecretFlags are the password (or SSH key passphrase) and the bearer token of git
// credentials: given as a flag, read from standard input, or taken from the environment.
type gitSecretFlags struct {
	password, bearerToken           string
	passwordStdin, bearerTokenStdin bool
	// fromEnv names the environment variables a value was taken from.
	fromEnv []string
}

func (s *gitSecretFlags) bindFlags(fs *pflag.FlagSet, password string) {
	fs.StringVar(&s.password, "password", "", password+
		"; visible to other users (ps, shell history): prefer --password-stdin or $"+gitPasswordEnv)
	fs.BoolVar(&s.passwordStdin, "password-stdin", false,
		"read the password (or the SSH key's passphrase) from standard input")
	fs.StringVar(&s.bearerToken, "bearer-token", "",
		"HTTP bearer token; visible to other users (ps, shell history): prefer --bearer-token-stdin or $"+gitBearerTokenEnv)
	fs.BoolVar(&s.bearerTokenStdin, "bearer-token-stdin", false, "read the HTTP bearer token from standard input")
}

// resolve reads the value of --password-stdin or --bearer-token-stdin from stdin, and takes
// a value none of whose flags is given from its environment variable (getenv). samePassword
// names other flags that set the password's key (--passphrase): they count as --password.
func (s *gitSecretFlags) resolve(fs *pflag.FlagSet, stdin io.Reader, getenv func(string) string, samePassword ...string) error {
	if s.passwordStdin && s.bearerTokenStdin {
		return usageError(errors.New("--password-stdin and --bearer-token-stdin exclude each other: standard input is read once"))
	}
	for _, v := range []struct {
		what, stdinFlag, env string
		flags                []string
		stdin                bool
		value                *string
	}{
		{"password", "password-stdin", gitPasswordEnv, append([]string{"password"}, samePassword...), s.passwordStdin, &s.password},
		{"bearer token", "bearer-token-stdin", gitBearerTokenEnv, []string{"bearer-token"}, s.bearerTokenStdin, &s.bearerToken},
	} {
		given := ""
		for _, f := range v.flags {
			if fs.Changed(f) {
				given = f
				break
			}
		}
		switch {
		case v.stdin && given != "":
			return usageError(fmt.Errorf("--%s and --%s exclude each other: give one", given, v.stdinFlag))
		case v.stdin:
			val, err := readSecretInput(stdin, v.stdinFlag, v.what)
			if err != nil {
				return err
			}
			*v.value = val
		case given == "":
			if val := getenv(v.env); val != "" {
				*v.value = val
				s.fromEnv = append(s.fromEnv, v.env)
			}
		}
	}
	return nil
}

// envNote names the environment variables values were taken from, for an error those values
// may have caused; "" when none.
func (s *gitSecretFlags) envNote() string {
	if len(s.fromEnv) == 0 {
		return ""
	}
	return " (taken from the environment: $" + strings.Join(s.fromEnv, ", $") + ")"
}

// readSecretInput reads a secret from r as docker login --password-stdin does: all of it,
// less one trailing newline (\n or \r\n). An empty secret is refused.
func readSecretInput(r io.Reader, flag, what string) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxSecretInput+1))
	if err != nil {
		return "", fmt.Errorf("--%s: reading standard input: %w", flag, err)
	}
	if len(b) > maxSecretInput {
		return "", usageError(fmt.Errorf("--%s: standard input holds more than %d bytes", flag, maxSecretInput))
	}
	val := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if val == "" {
		return "", usageError(fmt.Errorf("--%s: the %s read from standard input is empty", flag, what))
	}
	return val, nil
}

func newCreateGitSecretCommand() *cobra.Command {
	o := &createGitSecretOptions{}
	cmd := &cobra.Command{
		Use:   "git NAME",
		Short: "Create or update the credentials Secret of a repository (spec.source.secretRef)",
		Long: `Create or update (server-side apply) a Secret with the credentials of a Git repository, in the
keys the daemon reads: username and password, or bearerToken, for HTTPS (optionally ca.crt); identity,
known_hosts (and password, the key's passphrase) for SSH. The Secret is checked as the daemon checks
it for --url, and refused with the daemon's reason if the daemon would refuse it.

--export prints the Secret as YAML instead, to stdout only: it holds the credentials in clear text
(stringData), so encrypt it (e.g. with SOPS) before committing it anywhere.

` + gitSecretInputHelp,
		Example: `  echo "$TOKEN" | converge create secret git shop-git --url https://github.com/acme/shop --username bot --password-stdin
  CONVERGE_GIT_BEARER_TOKEN="$TOKEN" converge create secret git shop-git --url https://github.com/acme/shop
  converge create secret git shop-git --url ssh://git@github.com/acme/shop --ssh-key-file ./id_ed25519 --known-hosts-file ./known_hosts`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd, args[0])
		},
	}
	fs := cmd.Flags()
	o.cli.BindFlags(fs, false)
	fs.BoolVar(&o.export, "export", false, "print the Secret as YAML (credentials in clear text) instead of applying it")
	fs.StringVar(&o.url, "url", "", "URL of the repository the credentials are for (required: they are checked for its protocol)")
	fs.StringVar(&o.username, "username", "", "HTTP basic auth user")
	o.bindFlags(fs, "HTTP basic auth password")
	fs.StringVar(&o.sshKeyFile, "ssh-key-file", "", "file of the SSH private key")
	fs.StringVar(&o.knownHostsFile, "known-hosts-file", "", "known_hosts file with the SSH server's host keys")
	fs.StringVar(&o.passphrase, "passphrase", "",
		"passphrase of the SSH private key; visible to other users (ps, shell history): prefer --password-stdin or $"+gitPasswordEnv)
	fs.StringVar(&o.caFile, "ca-file", "", "PEM file of the certificate authorities the HTTPS server is checked against")
	_ = cmd.MarkFlagRequired("url")
	return cmd
}

func (o *createGitSecretOptions) run(cmd *cobra.Command, name string) error {
	// The passphrase goes to the password's key: --password-stdin and $CONVERGE_GIT_PASSWORD
	// give it too.
	if err := o.resolve(cmd.Flags(), cmd.InOrStdin(), os.Getenv, "passphrase"); err != nil {
		return err
	}
	data, err := o.data()
	if err != nil {
		return err
	}
	if _, err := sources.AuthFromSecret(data, o.url); err != nil {
		return usageError(fmt.Errorf("the daemon would refuse this secret: %w%s", err, o.envNote()))
	}
	return createSecret(cmd, &o.cli, o.export, name, data)
}

// data is the Secret's data the flags describe.
func (o *createGitSecretOptions) data() (map[string][]byte, error) {
	if o.passphrase != "" && o.password != "" {
		return nil, usageError(fmt.Errorf("--passphrase (ssh) and --password (https) exclude each other"))
	}
	password := o.password
	if o.passphrase != "" {
		password = o.passphrase // the daemon reads an SSH key's passphrase from "password"
	}
	data := map[string][]byte{}
	for key, val := range map[string]string{
		sources.SecretUsername: o.username, sources.SecretPassword: password, sources.SecretBearerToken: o.bearerToken,
	} {
		if val != "" {
			data[key] = []byte(val)
		}
	}
	for key, file := range map[string]string{
		sources.SecretIdentity: o.sshKeyFile, sources.SecretKnownHosts: o.knownHostsFile, sources.SecretCACert: o.caFile,
	} {
		if file == "" {
			continue
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, usageError(fmt.Errorf("reading %s: %w", file, err))
		}
		data[key] = b
	}
	if len(data) == 0 {
		return nil, usageError(fmt.Errorf("no credentials: give --username and --password, --bearer-token, or --ssh-key-file and --known-hosts-file"))
	}
	return data, nil
}

// createWebhookSecretOptions are the flags of `converge create secret webhook`.
type createWebhookSecretOptions struct {
	cli    cliOptions
	export bool
	token  string
}

func newCreateWebhookSecretCommand() *cobra.Command {
	o := &createWebhookSecretOptions{}
	cmd := &cobra.Command{
		Use:     "webhook NAME",
		Short:   "Create or update the Secret whose token signs push webhooks (spec.source.webhookSecretRef)",
		Example: `  converge create secret webhook shop-hook --token "$(openssl rand -hex 32)"`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.token == "" {
				return usageError(fmt.Errorf("--token must not be empty"))
			}
			return createSecret(cmd, &o.cli, o.export, args[0], map[string][]byte{webhookTokenKey: []byte(o.token)})
		},
	}
	o.cli.BindFlags(cmd.Flags(), false)
	cmd.Flags().BoolVar(&o.export, "export", false, "print the Secret as YAML (token in clear text) instead of applying it")
	cmd.Flags().StringVar(&o.token, "token", "", "shared secret the Git host signs its webhooks with")
	_ = cmd.MarkFlagRequired("token")
	return cmd
}

// createSecret applies an Opaque Secret with data, or prints it with export.
func createSecret(cmd *cobra.Command, o *cliOptions, export bool, name string, data map[string][]byte) error {
	ns, err := createNamespace(o, export)
	if err != nil {
		return err
	}
	secret := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Type:       corev1.SecretTypeOpaque,
	}
	if errs := apivalidation.ValidateObjectMeta(&secret.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata")); len(errs) > 0 {
		return usageError(apierrors.NewInvalid(schema.GroupKind{Kind: "Secret"}, name, errs))
	}
	if export {
		secret.StringData = textData(data)
	}
	if secret.StringData == nil {
		secret.Data = data
	}
	obj, err := exportable(secret)
	if err != nil {
		return err
	}
	if export {
		return printYAML(cmd.OutOrStdout(), obj)
	}
	if err := applyObject(cmd.Context(), o, obj); err != nil {
		return err
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "Secret %s/%s applied\n", ns, name)
	return err
}

// textData is data as strings, or nil if a value is not UTF-8 text.
func textData(data map[string][]byte) map[string]string {
	out := make(map[string]string, len(data))
	for k, v := range data {
		if !utf8.Valid(v) {
			return nil
		}
		out[k] = string(v)
	}
	return out
}
