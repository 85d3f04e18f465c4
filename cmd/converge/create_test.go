package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/gittest"
	"github.com/converge-gitops/converge/sources"
)

// createRun runs the converge CLI in-process without a cluster (for --export and refusals).
func createRun(args ...string) (stdout, stderr string, code int) {
	return createRunIn(nil, args...)
}

// createRunIn is createRun with stdin as the command's standard input (nil: the process's).
func createRunIn(stdin io.Reader, args ...string) (stdout, stderr string, code int) {
	var out, errOut bytes.Buffer
	cmd := newRootCommand()
	cmd.SetArgs(args)
	cmd.SetIn(stdin)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		return out.String(), "converge: " + err.Error() + "\n", exitCode(err)
	}
	return out.String(), errOut.String(), 0
}

// TestCreateSyncTargetExport: --export prints what the flags describe, and nothing more:
// no status, no empty fields, no creationTimestamp.
func TestCreateSyncTargetExport(t *testing.T) {
	for name, args := range map[string][]string{
		"synctarget-minimal.yaml": {"--url", "https://github.com/acme/shop", "--branch", "main"},
		"synctarget-full.yaml": {"--url", "git@github.com:acme/shop.git", "--semver", ">=1.0.0 <2.0.0",
			"--path", "deploy/prod", "--target-namespace", "shop", "--interval", "90s", "--prune",
			"--secret-ref", "shop-git", "--webhook-secret-ref", "shop-hook", "--depends-on", "infra",
			"--depends-on", "base/crds", "--timeout", "10m", "--service-account", "shop-deployer",
			"--max-deletions", "25%"},
		"synctarget-schedule.yaml": {"--url", "ssh://git@example.com/shop", "--ref-name", "refs/pull/7/head",
			"--schedule", "CRON_TZ=Europe/Paris 0 6 * * MON-FRI", "--max-deletions", "3"},
	} {
		t.Run(name, func(t *testing.T) {
			out, errOut, code := createRun(append([]string{"create", "synctarget", "shop", "-n", "team-a", "--export"}, args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			stGolden(t, filepath.Join("create", name), out)
			var st convergev1.SyncTarget
			if err := yaml.UnmarshalStrict([]byte(out), &st); err != nil {
				t.Fatalf("the export does not read back as a SyncTarget: %v", err)
			}
		})
	}
}

// TestCreateExportNeedsNoCluster: without -n nor a kubeconfig, --export prints the object in
// the namespace "default"; without --export the missing kubeconfig is an error.
func TestCreateExportNeedsNoCluster(t *testing.T) {
	g := NewWithT(t)
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	args := []string{"create", "st", "shop", "--url", "https://github.com/acme/shop", "--branch", "main"}
	out, errOut, code := createRun(append(args, "--export")...)
	g.Expect(code).To(Equal(0), errOut)
	g.Expect(out).To(ContainSubstring("\n  namespace: default\n"))
	out, errOut, code = createRun(args...)
	g.Expect(code).To(Equal(1))
	g.Expect(out).To(BeEmpty())
	g.Expect(errOut).To(ContainSubstring("loading the kubeconfig"))
}

// TestCreateSyncTargetRefused: each class of rule of the CRD refuses a SyncTarget with the
// API server's wording, exit code 2 and nothing printed.
func TestCreateSyncTargetRefused(t *testing.T) {
	const prefix = `SyncTarget.converge.dev "shop" is invalid: `
	for _, tc := range refusedSyncTargets() {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			out, errOut, code := createRun(append([]string{"create", "st", "shop", "-n", "team-a", "--export"}, tc.args...)...)
			g.Expect(code).To(Equal(2))
			g.Expect(out).To(BeEmpty())
			g.Expect(errOut).To(Equal("converge: " + prefix + tc.want + "\n"))
		})
	}
}

// refusedSyncTarget is a command line the CRD refuses, and the API server's message.
type refusedSyncTarget struct {
	name string
	args []string
	want string
}

func refusedSyncTargets() []refusedSyncTarget {
	url := []string{"--url", "https://github.com/acme/shop"}
	with := func(more ...string) []string { return append(append([]string{}, url...), more...) }
	return []refusedSyncTarget{
		{name: "two ref kinds", args: with("--branch", "main", "--tag", "v1"),
			want: "spec.source.ref: Invalid value: exactly one of branch, tag, semver, commit or name must be set"},
		{name: "no ref", args: url,
			want: "spec.source.ref: Invalid value: exactly one of branch, tag, semver, commit or name must be set"},
		{name: "bad url", args: []string{"--url", "ftp://example.com/shop", "--branch", "main"},
			want: `spec.source.url: Invalid value: "ftp://example.com/shop": must be an https://, http:// or ssh:// URL, or the scp-like form user@host:path`},
		{name: "interval and schedule", args: with("--branch", "main", "--interval", "5m", "--schedule", "@hourly"),
			want: "spec.source: Invalid value: interval and schedule are mutually exclusive"},
		{name: "path with ..", args: with("--branch", "main", "--path", "deploy/../../etc"),
			want: `spec.path: Invalid value: "deploy/../../etc": must be a relative path inside the repository, without '..'`},
		{name: "bad cron", args: with("--branch", "main", "--schedule", "0 25 * * *"),
			want: `spec.source.schedule: Invalid value: "0 25 * * *": must be a cron expression: five fields (minute hour day-of-month month day-of-week) or a descriptor such as @hourly or @every 1h, optionally after CRON_TZ=<zone>`},
		{name: "maxDeletions 150%", args: with("--branch", "main", "--max-deletions", "150%"),
			want: `spec.maxDeletions: Invalid value: "150%": must be a count (0 or more) or a percentage from 0% to 100%`},
		{name: "negative maxDeletions", args: with("--branch", "main", "--max-deletions", "-1"),
			want: `spec.maxDeletions: Invalid value: -1: must be a count (0 or more) or a percentage from 0% to 100%`},
		{name: "zero interval", args: with("--branch", "main", "--interval", "0s"),
			want: `spec.source.interval: Invalid value: "0s": must be a positive duration such as 30s, 5m or 1h30m`},
		{name: "short commit", args: with("--commit", "abc1234"),
			want: `spec.source.ref.commit: Invalid value: "abc1234": spec.source.ref.commit in body should match '^([0-9a-f]{40}|[0-9a-f]{64})$'`},
		{name: "target namespace", args: with("--branch", "main", "--target-namespace", "Shop"),
			want: `spec.targetNamespace: Invalid value: "Shop": spec.targetNamespace in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'`},
		{name: "long dependency namespace", args: with("--branch", "main", "--depends-on", strings.Repeat("n", 64)+"/infra"),
			want: `[spec.dependsOn[0].namespace: Too long: may not be more than 63 bytes, <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]`},
	}
}

// sshCredentials writes an SSH identity and a known_hosts file and returns their paths.
func sshCredentials(t *testing.T) (keyFile, knownHostsFile string) {
	t.Helper()
	dir := t.TempDir()
	key, _ := gittest.NewSSHKey(t, "")
	_, hostKey := gittest.NewSSHKey(t, "")
	keyFile, knownHostsFile = filepath.Join(dir, "id"), filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(knownHostsFile, append([]byte("example.com "), ssh.MarshalAuthorizedKey(hostKey)...), 0o600); err != nil {
		t.Fatal(err)
	}
	return keyFile, knownHostsFile
}

// TestCreateSecretExport: the Secrets hold the keys the daemon reads, in clear text.
func TestCreateSecretExport(t *testing.T) {
	t.Run("https", func(t *testing.T) {
		out, errOut, code := createRun("create", "secret", "git", "shop-git", "-n", "team-a", "--export",
			"--url", "https://github.com/acme/shop", "--username", "bot", "--password", "s3cret")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		stGolden(t, "create/secret-git-https.yaml", out)
	})
	t.Run("webhook", func(t *testing.T) {
		out, errOut, code := createRun("create", "secret", "webhook", "shop-hook", "-n", "team-a", "--export", "--token", "t0ken")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		stGolden(t, "create/secret-webhook.yaml", out)
	})
	t.Run("ssh", func(t *testing.T) {
		g := NewWithT(t)
		keyFile, knownHosts := sshCredentials(t)
		out, errOut, code := createRun("create", "secret", "git", "shop-git", "-n", "team-a", "--export",
			"--url", "ssh://git@example.com/shop", "--ssh-key-file", keyFile, "--known-hosts-file", knownHosts)
		g.Expect(code).To(Equal(0), errOut)
		var secret corev1.Secret
		g.Expect(yaml.UnmarshalStrict([]byte(out), &secret)).To(Succeed())
		key, _ := os.ReadFile(keyFile)
		g.Expect(secret.StringData).To(HaveKeyWithValue(sources.SecretIdentity, string(key)))
		g.Expect(secret.StringData).To(HaveKey(sources.SecretKnownHosts))
		g.Expect(secret.StringData).To(HaveLen(2))
	})
}

// TestCreateSecretRefused: a Secret the daemon would refuse is refused, with its reason and
// without the credentials.
func TestCreateSecretRefused(t *testing.T) {
	keyFile, knownHosts := sshCredentials(t)
	https := []string{"--url", "https://github.com/acme/shop"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{name: "password without username", args: append([]string{"--password", "s3cret"}, https...),
			want: `the daemon would refuse this secret: invalid source: the secret has a "password" but no "username"`},
		{name: "bearer token and username", args: append([]string{"--username", "bot", "--bearer-token", "s3cret"}, https...),
			want: `the daemon would refuse this secret: invalid source: the secret sets both "bearerToken" and "username"; use one`},
		{name: "ssh without known_hosts", args: []string{"--url", "ssh://git@example.com/shop", "--ssh-key-file", keyFile},
			want: `the daemon would refuse this secret: invalid source: the secret has no "known_hosts", required for ssh: host keys are never accepted blindly`},
		{name: "a CA file without a certificate", args: append([]string{"--username", "bot", "--password", "s3cret", "--ca-file", knownHosts}, https...),
			want: `the daemon would refuse this secret: invalid source: "ca.crt" holds no PEM certificate`},
		{name: "no credentials", args: https,
			want: "no credentials: give --username and --password, --bearer-token, or --ssh-key-file and --known-hosts-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			out, errOut, code := createRun(append([]string{"create", "secret", "git", "shop-git", "-n", "team-a", "--export"}, tc.args...)...)
			g.Expect(code).To(Equal(2))
			g.Expect(out).To(BeEmpty())
			g.Expect(errOut).To(Equal("converge: " + tc.want + "\n"))
			g.Expect(errOut).NotTo(ContainSubstring("s3cret"))
		})
	}
}

// TestCreateAgainstAPIServer runs `converge create` against a real API server: a
// SyncTarget is applied and shown by get, a second run with other flags updates it, an
// invalid one is refused with exactly the API server's causes and leaves nothing, and an
// SSH Secret is applied that the daemon accepts.
func TestCreateAgainstAPIServer(t *testing.T) {
	t.Parallel()
	a := startAPIServer(t)
	a.namespace(t, "team-a")
	ctx := context.Background()
	base := []string{"create", "synctarget", "shop", "-n", "team-a", "--url", "https://github.com/acme/shop", "--branch", "main"}

	t.Run("create, get, update", func(t *testing.T) {
		g := NewWithT(t)
		out, errOut, code := cliRun(ctx, a.kubeconfig, append(base, "--path", "deploy", "--prune")...)
		g.Expect(code).To(Equal(0), errOut)
		g.Expect(out).To(Equal("SyncTarget team-a/shop applied\n"))
		out, errOut, code = cliRun(ctx, a.kubeconfig, "get", "shop", "-n", "team-a", "-o", "yaml")
		g.Expect(code).To(Equal(0), errOut)
		g.Expect(out).To(ContainSubstring("path: deploy\n"))
		g.Expect(out).To(ContainSubstring("url: https://github.com/acme/shop\n"))

		_, errOut, code = cliRun(ctx, a.kubeconfig, append(base, "--path", "deploy/prod")...)
		g.Expect(code).To(Equal(0), errOut)
		st := &convergev1.SyncTarget{}
		g.Expect(a.c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "shop"}, st)).To(Succeed())
		g.Expect(st.Spec.Path).To(Equal("deploy/prod"))
		g.Expect(st.Spec.Prune).To(BeFalse(), "a flag left out is unset")
		g.Expect(st.Spec.Timeout.Duration.String()).To(Equal("5m0s"), "the CRD's defaults still apply")
	})

	t.Run("chart", func(t *testing.T) { createChartAgainstServer(t, a) })

	t.Run("refused as the API server refuses, nothing applied", func(t *testing.T) { createRefusedLikeServer(t, a) })

	t.Run("https secret, password from stdin", func(t *testing.T) {
		g := NewWithT(t)
		var out, errOut bytes.Buffer
		cmd := newRootCommand()
		cmd.SetArgs([]string{"create", "secret", "git", "stdin-git", "-n", "team-a", "--kubeconfig", a.kubeconfig,
			"--url", "https://github.com/acme/shop", "--username", "bot", "--password-stdin"})
		cmd.SetIn(strings.NewReader("s3cret pass\r\n"))
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		g.Expect(cmd.ExecuteContext(ctx)).To(Succeed(), errOut.String())
		g.Expect(out.String()).To(Equal("Secret team-a/stdin-git applied\n"))
		secret := &corev1.Secret{}
		g.Expect(a.c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "stdin-git"}, secret)).To(Succeed())
		g.Expect(secret.Data).To(Equal(map[string][]byte{
			sources.SecretUsername: []byte("bot"), sources.SecretPassword: []byte("s3cret pass"),
		}), "the password as read, less its trailing CRLF")
	})

	t.Run("ssh secret", func(t *testing.T) {
		g := NewWithT(t)
		keyFile, knownHosts := sshCredentials(t)
		url := "ssh://git@example.com/shop"
		_, errOut, code := cliRun(ctx, a.kubeconfig, "create", "secret", "git", "shop-git", "-n", "team-a",
			"--url", url, "--ssh-key-file", keyFile, "--known-hosts-file", knownHosts)
		g.Expect(code).To(Equal(0), errOut)
		secret := &corev1.Secret{}
		g.Expect(a.c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "shop-git"}, secret)).To(Succeed())
		_, err := sources.AuthFromSecret(secret.Data, url)
		g.Expect(err).NotTo(HaveOccurred())

		// Switching to HTTPS credentials drops the SSH keys.
		_, errOut, code = cliRun(ctx, a.kubeconfig, "create", "secret", "git", "shop-git", "-n", "team-a",
			"--url", "https://github.com/acme/shop", "--bearer-token", "t0ken")
		g.Expect(code).To(Equal(0), errOut)
		g.Expect(a.c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "shop-git"}, secret)).To(Succeed())
		g.Expect(secret.Data).To(Equal(map[string][]byte{sources.SecretBearerToken: []byte("t0ken")}))
	})
}

// createRefusedLikeServer: each refused SyncTarget leaves nothing in the cluster, and the
// API server, sent the same SyncTarget, gives the same causes.
func createRefusedLikeServer(t *testing.T, a *apiServer) {
	ctx := context.Background()
	for _, tc := range refusedSyncTargets() {
		g := NewWithT(t)
		name := "refused"
		args := append([]string{"create", "st", name, "-n", "team-a"}, tc.args...)
		_, errOut, code := cliRun(ctx, a.kubeconfig, args...)
		g.Expect(code).To(Equal(2), tc.name)
		getErr := a.c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: name}, &convergev1.SyncTarget{})
		g.Expect(apierrors.IsNotFound(getErr)).To(BeTrue(), "%s: nothing applied, got %v", tc.name, getErr)

		// The same SyncTarget sent to the API server directly: the same causes.
		st := flagsSyncTarget(t, name, tc.args)
		serverErr := a.c.Create(ctx, st, client.DryRunAll)
		g.Expect(causes(serverErr)).To(Equal(causes(validateSyncTarget(st))), tc.name+": "+errOut)
	}
}

// flagsSyncTarget builds the SyncTarget the flags of `converge create st NAME` describe,
// without validating it.
func flagsSyncTarget(t *testing.T, name string, args []string) *convergev1.SyncTarget {
	t.Helper()
	o := &createSyncTargetOptions{}
	cmd := &cobra.Command{Use: "synctarget"}
	o.bindFlags(cmd)
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	st, err := o.syncTarget(cmd, "team-a", name)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// causes lists the field and message of each cause of an Invalid error, sorted.
func causes(err error) []string {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return []string{"not an Invalid error: " + errorString(err)}
	}
	var out []string
	for _, c := range status.Status().Details.Causes {
		out = append(out, c.Field+": "+c.Message)
	}
	sort.Strings(out)
	return out
}

func errorString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestCreateChartExport: a chart of a chart repository exports spec.chart and spec.helm,
// the values files merged in order, and no source at all; a chart in Git exports spec.helm.
func TestCreateChartExport(t *testing.T) {
	dir := t.TempDir()
	base, prod := filepath.Join(dir, "base.yaml"), filepath.Join(dir, "prod.yaml")
	writeFile(t, base, "replicaCount: 2\nimage:\n  tag: \"6.5\"\n  pullPolicy: Always\n")
	writeFile(t, prod, "image:\n  tag: \"6.6\"\ningress: {enabled: true}\n")
	for name, args := range map[string][]string{
		"synctarget-chart.yaml": {"--chart-repository", "oci://ghcr.io/stefanprodan/charts", "--chart", "podinfo",
			"--chart-version", ">=6.5 <7", "--chart-secret", "ghcr", "--interval", "10m", "--release-name", "web",
			"--values", base, "--values", prod, "--values-from", "secret/podinfo-secrets:values.yaml",
			"--values-from", "ConfigMap/podinfo-defaults", "--crds", "Create"},
		"synctarget-chart-in-git.yaml": {"--url", "https://github.com/acme/shop", "--branch", "main",
			"--path", "charts/shop", "--helm"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			out, errOut, code := createRun(append([]string{"create", "synctarget", "shop", "-n", "team-a", "--export"}, args...)...)
			g.Expect(code).To(Equal(0), errOut)
			stGolden(t, filepath.Join("create", name), out)
			var st convergev1.SyncTarget
			g.Expect(yaml.UnmarshalStrict([]byte(out), &st)).To(Succeed())
			g.Expect(st.Spec.Helm).NotTo(BeNil())
			if st.IsChart() {
				g.Expect(out).NotTo(ContainSubstring("source:"))
				g.Expect(string(st.Spec.Helm.Values.Raw)).To(Equal(
					`{"image":{"pullPolicy":"Always","tag":"6.6"},"ingress":{"enabled":true},"replicaCount":2}`))
			}
		})
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCreateChartRefused: chart flags the command cannot express, or the CRD refuses, are
// refused with exit code 2 and nothing printed.
func TestCreateChartRefused(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "list.yaml")
	writeFile(t, list, "- a\n- b\n")
	chart := []string{"--chart-repository", "https://charts.example.com", "--chart", "shop"}
	with := func(more ...string) []string { return append(append([]string{}, chart...), more...) }
	const invalid = `SyncTarget.converge.dev "shop" is invalid: `
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{name: "chart and url", args: with("--url", "https://github.com/acme/shop"),
			want: "--chart-repository and --chart follow a chart repository: --url, --secret-ref and --webhook-secret-ref are for Git"},
		{name: "values-from without a kind", args: with("--values-from", "shop-values"),
			want: `--values-from "shop-values": want KIND/NAME[:KEY], KIND ConfigMap or Secret`},
		{name: "values-from of a Deployment", args: with("--values-from", "deployment/shop"),
			want: `--values-from "deployment/shop": want KIND/NAME[:KEY], KIND ConfigMap or Secret`},
		{name: "missing values file", args: with("--values", filepath.Join(dir, "none.yaml")),
			want: "--values " + filepath.Join(dir, "none.yaml") + ": open " + filepath.Join(dir, "none.yaml") + ": no such file or directory"},
		{name: "values file not a map", args: with("--values", list),
			want: "--values " + list + ": not a YAML map of values: error unmarshaling JSON: while decoding JSON: json: cannot unmarshal array into Go value of type map[string]interface {}"},
		{name: "chart without repository", args: []string{"--chart", "shop"},
			want: invalid + `spec.chart.repository: Invalid value: "": must be an https://, http:// or oci:// URL`},
		{name: "chart with a path", args: with("--path", "deploy"),
			want: invalid + "spec: Invalid value: path applies to a Git source, not to a chart"},
		{name: "bad repository", args: []string{"--chart-repository", "ftp://charts.example.com", "--chart", "shop"},
			want: invalid + `spec.chart.repository: Invalid value: "ftp://charts.example.com": must be an https://, http:// or oci:// URL`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			out, errOut, code := createRun(append([]string{"create", "st", "shop", "-n", "team-a", "--export"}, tc.args...)...)
			g.Expect(code).To(Equal(2), errOut)
			g.Expect(out).To(BeEmpty())
			g.Expect(errOut).To(Equal("converge: " + tc.want + "\n"))
		})
	}
}

// createChartAgainstServer: a chart SyncTarget applied by the CLI is accepted by the API
// server as it is, with no spec.source; switching it to Git drops spec.chart.
func createChartAgainstServer(t *testing.T, a *apiServer) {
	g := NewWithT(t)
	ctx := context.Background()
	_, errOut, code := cliRun(ctx, a.kubeconfig, "create", "st", "podinfo", "-n", "team-a",
		"--chart-repository", "oci://ghcr.io/stefanprodan/charts", "--chart", "podinfo", "--chart-version", "6.5.x",
		"--values-from", "secret/podinfo-values")
	g.Expect(code).To(Equal(0), errOut)
	st := &convergev1.SyncTarget{}
	g.Expect(a.c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "podinfo"}, st)).To(Succeed())
	g.Expect(st.Spec.Chart).NotTo(BeNil())
	g.Expect(st.Spec.Chart.Version).To(Equal("6.5.x"))
	g.Expect(st.Spec.Source.URL).To(BeEmpty())
	g.Expect(st.Spec.Helm.ValuesFrom).To(Equal([]convergev1.ValuesReference{{Kind: "Secret", Name: "podinfo-values"}}))
	g.Expect(st.CRDPolicy()).To(Equal(convergev1.CRDsCreateReplace))

	_, errOut, code = cliRun(ctx, a.kubeconfig, "create", "st", "podinfo", "-n", "team-a",
		"--url", "https://github.com/acme/podinfo", "--branch", "main", "--path", "charts/podinfo", "--helm")
	g.Expect(code).To(Equal(0), errOut)
	g.Expect(a.c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "podinfo"}, st)).To(Succeed())
	g.Expect(st.Spec.Chart).To(BeNil())
	g.Expect(st.Spec.Source.URL).To(Equal("https://github.com/acme/podinfo"))
	g.Expect(st.Spec.Helm).NotTo(BeNil())
}

// TestGitSecretFlags: --password-stdin and --bearer-token-stdin read standard input less one
// trailing newline, exclude their flag and each other, refuse an empty value; without a
// flag the environment variable gives the value, and a flag wins over it.
func TestGitSecretFlags(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		args                  []string
		stdin                 string
		env                   map[string]string
		password, bearerToken string
		fromEnv               []string
		err                   string
	}{
		{name: "password from stdin, LF", args: []string{"--password-stdin"}, stdin: "s3cret\n", password: "s3cret"},
		{name: "password from stdin, CRLF", args: []string{"--password-stdin"}, stdin: "s3cret\r\n", password: "s3cret"},
		{name: "password from stdin, no newline", args: []string{"--password-stdin"}, stdin: " s3cret ", password: " s3cret "},
		{name: "one newline only is removed", args: []string{"--password-stdin"}, stdin: "s3cret\n\n", password: "s3cret\n"},
		{name: "stdin wins over the variable", args: []string{"--password-stdin"}, stdin: "s3cret\n",
			env: map[string]string{gitPasswordEnv: "from-env"}, password: "s3cret"},
		{name: "bearer token from stdin", args: []string{"--bearer-token-stdin"}, stdin: "t0ken\n", bearerToken: "t0ken"},
		{name: "stdin is not read without the flag", stdin: "s3cret\n"},
		{name: "password from the variable", env: map[string]string{gitPasswordEnv: "from-env"},
			password: "from-env", fromEnv: []string{gitPasswordEnv}},
		{name: "bearer token from the variable", env: map[string]string{gitBearerTokenEnv: "t0ken-env"},
			bearerToken: "t0ken-env", fromEnv: []string{gitBearerTokenEnv}},
		{name: "the flag wins over the variable", args: []string{"--password", "from-flag", "--bearer-token", "t0ken"},
			env: map[string]string{gitPasswordEnv: "from-env", gitBearerTokenEnv: "t0ken-env"}, password: "from-flag", bearerToken: "t0ken"},
		{name: "an empty flag wins over the variable too", args: []string{"--password", ""},
			env: map[string]string{gitPasswordEnv: "from-env"}},
		{name: "--passphrase counts as --password", args: []string{"--passphrase", "phrase"},
			env: map[string]string{gitPasswordEnv: "from-env"}},
		{name: "password stdin and bearer token variable", args: []string{"--password-stdin"}, stdin: "s3cret",
			env: map[string]string{gitBearerTokenEnv: "t0ken-env"}, password: "s3cret", bearerToken: "t0ken-env",
			fromEnv: []string{gitBearerTokenEnv}},
		{name: "--password and --password-stdin", args: []string{"--password", "s3cret", "--password-stdin"}, stdin: "s3cret\n",
			err: "--password and --password-stdin exclude each other: give one"},
		{name: "--passphrase and --password-stdin", args: []string{"--passphrase", "s3cret", "--password-stdin"}, stdin: "s3cret\n",
			err: "--passphrase and --password-stdin exclude each other: give one"},
		{name: "--bearer-token and --bearer-token-stdin", args: []string{"--bearer-token", "t0ken", "--bearer-token-stdin"},
			stdin: "t0ken\n", err: "--bearer-token and --bearer-token-stdin exclude each other: give one"},
		{name: "both stdin flags", args: []string{"--password-stdin", "--bearer-token-stdin"}, stdin: "s3cret\n",
			err: "--password-stdin and --bearer-token-stdin exclude each other: standard input is read once"},
		{name: "empty stdin", args: []string{"--password-stdin"},
			err: "--password-stdin: the password read from standard input is empty"},
		{name: "a newline only", args: []string{"--bearer-token-stdin"}, stdin: "\r\n",
			err: "--bearer-token-stdin: the bearer token read from standard input is empty"},
		{name: "too much on stdin", args: []string{"--password-stdin"}, stdin: strings.Repeat("x", maxSecretInput+1),
			err: "--password-stdin: standard input holds more than 65536 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			var s gitSecretFlags
			cmd := &cobra.Command{Use: "git"}
			s.bindFlags(cmd.Flags(), "password")
			var passphrase string
			cmd.Flags().StringVar(&passphrase, "passphrase", "", "")
			g.Expect(cmd.ParseFlags(tc.args)).To(Succeed())
			err := s.resolve(cmd.Flags(), strings.NewReader(tc.stdin), func(k string) string { return tc.env[k] }, "passphrase")
			if tc.err != "" {
				g.Expect(err).To(MatchError(tc.err))
				g.Expect(exitCode(err)).To(Equal(2), "a usage error")
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(s.password).To(Equal(tc.password))
			g.Expect(s.bearerToken).To(Equal(tc.bearerToken))
			g.Expect(s.fromEnv).To(Equal(tc.fromEnv))
		})
	}
}

// TestCreateSecretGitSecretInput: `converge create secret git` stores the password read from
// standard input or taken from $CONVERGE_GIT_PASSWORD, byte for byte; --password wins over
// the variable; the refusals say which flags and name the variable a refused value came from.
// Not parallel: it sets environment variables.
func TestCreateSecretGitSecretInput(t *testing.T) {
	https := []string{"create", "secret", "git", "shop-git", "-n", "team-a", "--export", "--url", "https://github.com/acme/shop"}
	exported := func(t *testing.T, stdin string, args ...string) map[string]string {
		t.Helper()
		g := NewWithT(t)
		out, errOut, code := createRunIn(strings.NewReader(stdin), append(https, args...)...)
		g.Expect(code).To(Equal(0), errOut)
		var secret corev1.Secret
		g.Expect(yaml.UnmarshalStrict([]byte(out), &secret)).To(Succeed())
		return secret.StringData
	}

	t.Run("stdin", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(exported(t, "s3cret\n", "--username", "bot", "--password-stdin")).To(Equal(map[string]string{
			sources.SecretUsername: "bot", sources.SecretPassword: "s3cret"}))
		g.Expect(exported(t, "t0ken\r\n", "--bearer-token-stdin")).To(Equal(map[string]string{
			sources.SecretBearerToken: "t0ken"}))
	})

	t.Run("refused", func(t *testing.T) {
		for _, tc := range []struct {
			stdin string
			args  []string
			want  string
		}{
			{"s3cret\n", []string{"--username", "bot", "--password", "s3cret", "--password-stdin"},
				"--password and --password-stdin exclude each other: give one"},
			{"", []string{"--username", "bot", "--password-stdin"},
				"--password-stdin: the password read from standard input is empty"},
			{"s3cret\n", []string{"--password-stdin", "--bearer-token-stdin"},
				"--password-stdin and --bearer-token-stdin exclude each other: standard input is read once"},
		} {
			g := NewWithT(t)
			out, errOut, code := createRunIn(strings.NewReader(tc.stdin), append(https, tc.args...)...)
			g.Expect(code).To(Equal(2))
			g.Expect(out).To(BeEmpty())
			g.Expect(errOut).To(Equal("converge: " + tc.want + "\n"))
		}
	})

	t.Run("environment", func(t *testing.T) {
		g := NewWithT(t)
		t.Setenv(gitPasswordEnv, "env-s3cret")
		g.Expect(exported(t, "", "--username", "bot")).To(Equal(map[string]string{
			sources.SecretUsername: "bot", sources.SecretPassword: "env-s3cret"}))
		g.Expect(exported(t, "", "--username", "bot", "--password", "flag-s3cret")).To(Equal(map[string]string{
			sources.SecretUsername: "bot", sources.SecretPassword: "flag-s3cret"}), "the flag wins")
		g.Expect(exported(t, "stdin-s3cret", "--username", "bot", "--password-stdin")).To(Equal(map[string]string{
			sources.SecretUsername: "bot", sources.SecretPassword: "stdin-s3cret"}), "stdin wins")

		// A password from the environment with a bearer token: refused, naming the variable.
		_, errOut, code := createRunIn(nil, append(https, "--bearer-token", "t0ken")...)
		g.Expect(code).To(Equal(2))
		g.Expect(errOut).To(Equal(`converge: the daemon would refuse this secret: invalid source: the secret has a "password" but no "username"` +
			" (taken from the environment: $" + gitPasswordEnv + ")\n"))

		t.Setenv(gitPasswordEnv, "")
		t.Setenv(gitBearerTokenEnv, "env-t0ken")
		g.Expect(exported(t, "")).To(Equal(map[string]string{sources.SecretBearerToken: "env-t0ken"}))
	})
}
