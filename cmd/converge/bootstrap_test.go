package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh/knownhosts"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/gittest"
	"github.com/converge-gitops/converge/internal/localcluster"
	"github.com/converge-gitops/converge/internal/localcluster/clustertest"
	"github.com/converge-gitops/converge/sources"
)

// runBootstrap runs `converge bootstrap git` in-process and returns its output and error.
func runBootstrap(kubeconfig string, args ...string) (string, error) {
	return runBootstrapIn(kubeconfig, nil, args...)
}

// runBootstrapIn is runBootstrap with stdin as the command's standard input (nil: the process's).
func runBootstrapIn(kubeconfig string, stdin io.Reader, args ...string) (string, error) {
	cmd := newRootCommand()
	cmd.SetIn(stdin)
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append([]string{"bootstrap", "git", "--kubeconfig", kubeconfig}, args...))
	err := cmd.Execute()
	return out.String(), err
}

// writeTemp writes content to a file of the test's temporary directory.
func writeTemp(t *testing.T, name string, content []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, content, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestBootstrap: `converge bootstrap git` commits the install and a SyncTarget to the
// repository (HTTPS basic auth, SSH with known_hosts), applies them with the credentials
// Secret to the cluster, changes nothing when run again, and refuses to overwrite a file it
// did not write or to talk to an SSH server whose host key known_hosts does not hold.
func TestBootstrap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster := clustertest.Start(t, localcluster.Options{}) // no CRD: bootstrap brings it
	c, err := client.New(cluster.Config, client.Options{Scheme: cliScheme()})
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{Username: "bot", Password: "s3cret-pass"})
	const installFile = "clusters/dev/converge-system/install.yaml"
	const stFile = "clusters/dev/converge-system/synctarget.yaml"

	t.Run("https into an empty repository, then again", func(t *testing.T) {
		g := NewWithT(t)
		repo := gittest.NewRepo(t, root, "fleet")
		url := srv.RepoURL(repo)
		args := []string{"--url", url, "--branch", "main", "--path", "clusters/dev",
			"--username", "bot", "--password", "s3cret-pass", "--interval", "30s"}
		out, err := runBootstrap(cluster.Kubeconfig, args...)
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Expect(out).NotTo(ContainSubstring("s3cret-pass"))

		head := repo.Head(t, "main")
		install := gittest.Git(t, repo.Dir, "show", "main:"+installFile)
		st := gittest.Git(t, repo.Dir, "show", "main:"+stFile)
		for _, f := range []string{install, st} {
			g.Expect(f).To(HavePrefix("# Written by converge bootstrap; edits are overwritten by the next bootstrap.\n"))
		}
		g.Expect(install).To(ContainSubstring(strings.TrimSpace(string(runCommand(t, "install", "--export")))))
		g.Expect(st).To(ContainSubstring("kind: SyncTarget"))
		g.Expect(gittest.Git(t, repo.Dir, "log", "-p", "main")).NotTo(ContainSubstring("s3cret-pass"),
			"credentials never go into the repository")

		// The cluster: the install, the Secret and the SyncTarget following the repository.
		crd := &unstructured.Unstructured{}
		crd.SetAPIVersion("apiextensions.k8s.io/v1")
		crd.SetKind("CustomResourceDefinition")
		g.Expect(c.Get(ctx, client.ObjectKey{Name: "synctargets.converge.dev"}, crd)).To(Succeed())
		g.Expect(c.Get(ctx, client.ObjectKey{Name: "converge-system"}, &corev1.Namespace{})).To(Succeed())
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "converge-system", Name: "converge"}, &appsv1.Deployment{})).To(Succeed())
		secret := &corev1.Secret{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "converge-system", Name: "converge-git-credentials"}, secret)).To(Succeed())
		g.Expect(secret.Data).To(Equal(map[string][]byte{"username": []byte("bot"), "password": []byte("s3cret-pass")}))
		target := &convergev1.SyncTarget{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "converge-system", Name: "converge"}, target)).To(Succeed())
		g.Expect(target.Spec.Source.URL).To(Equal(url))
		g.Expect(target.Spec.Source.Ref.Branch).To(Equal("main"))
		g.Expect(target.Spec.Path).To(Equal("clusters/dev"))
		g.Expect(target.Spec.Prune).To(BeTrue())
		g.Expect(target.Spec.Source.SecretRef).To(Equal(&convergev1.LocalObjectReference{Name: "converge-git-credentials"}))
		g.Expect(target.Spec.Source.Interval.Duration.String()).To(Equal("30s"))

		// Again: no commit, nothing changed in the cluster.
		out, err = runBootstrap(cluster.Kubeconfig, args...)
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Expect(repo.Head(t, "main")).To(Equal(head))
		g.Expect(out).To(ContainSubstring("up to date"))
		g.Expect(out).NotTo(MatchRegexp(`(?m)^\S+ (created|configured|deleted)$`), "bootstrapping again changes nothing")
	})

	t.Run("https with the password from stdin", func(t *testing.T) {
		g := NewWithT(t)
		repo := gittest.NewRepo(t, root, "from-stdin")
		// The server takes s3cret-pass only: the CRLF must not reach it, nor the Secret.
		out, err := runBootstrapIn(cluster.Kubeconfig, strings.NewReader("s3cret-pass\r\n"), "--url", srv.RepoURL(repo),
			"--path", "clusters/stdin", "--username", "bot", "--password-stdin")
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Expect(gittest.Git(t, repo.Dir, "show", "main:clusters/stdin/converge-system/synctarget.yaml")).To(
			ContainSubstring("path: clusters/stdin"))
		secret := &corev1.Secret{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "converge-system", Name: "converge-git-credentials"}, secret)).To(Succeed())
		g.Expect(secret.Data).To(Equal(map[string][]byte{"username": []byte("bot"), "password": []byte("s3cret-pass")}))
	})

	t.Run("a file it did not write is not overwritten", func(t *testing.T) {
		g := NewWithT(t)
		repo := gittest.NewRepo(t, root, "foreign")
		head := repo.Commit(t, "main", map[string]string{installFile: "apiVersion: v1\nkind: ConfigMap\n"})
		out, err := runBootstrap(cluster.Kubeconfig, "--url", srv.RepoURL(repo), "--path", "clusters/dev",
			"--username", "bot", "--password", "s3cret-pass")
		g.Expect(err).To(MatchError(ContainSubstring(installFile + " on branch main was not written by converge bootstrap")))
		g.Expect(err.Error()).NotTo(ContainSubstring("s3cret-pass"))
		g.Expect(repo.Head(t, "main")).To(Equal(head), "nothing pushed")
		g.Expect(out).NotTo(ContainSubstring("created"), "nothing applied")
	})

	t.Run("https with a bearer token and --ca-file", func(t *testing.T) {
		g := NewWithT(t)
		tlsRoot := t.TempDir()
		tlsSrv := gittest.NewHTTPServer(t, tlsRoot, gittest.HTTPOptions{BearerToken: "t0ken", TLS: true})
		repo := gittest.NewRepo(t, tlsRoot, "tls")
		first := repo.Commit(t, "main", map[string]string{"README.md": "fleet\n"})
		args := []string{"--url", tlsSrv.RepoURL(repo), "--path", "clusters/tls", "--bearer-token", "t0ken"}
		out, err := runBootstrap(cluster.Kubeconfig, args...)
		g.Expect(err).To(MatchError(ContainSubstring("certificate")), "the system's CAs do not know the server: %s", out)
		g.Expect(repo.Head(t, "main")).To(Equal(first))

		out, err = runBootstrap(cluster.Kubeconfig, append(args, "--ca-file", writeTemp(t, "ca.crt", tlsSrv.CACert()))...)
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Expect(repo.Head(t, "main")).NotTo(Equal(first))
		g.Expect(gittest.Git(t, repo.Dir, "show", "main:clusters/tls/converge-system/synctarget.yaml")).To(
			ContainSubstring("path: clusters/tls"))
	})

	t.Run("ssh with known_hosts, and a wrong host key refused", func(t *testing.T) {
		g := NewWithT(t)
		key, pub := gittest.NewSSHKey(t, "")
		sshSrv := gittest.NewSSHServer(t, root, pub)
		repo := gittest.NewRepo(t, root, "over-ssh")
		first := repo.Commit(t, "main", map[string]string{"README.md": "fleet\n"})
		keyFile := writeTemp(t, "id", key)
		_, otherKey := gittest.NewSSHKey(t, "")
		wrong := writeTemp(t, "known_hosts", []byte(knownhosts.Line([]string{sshSrv.Addr}, otherKey)+"\n"))
		args := []string{"--url", sshSrv.RepoURL(repo), "--path", "clusters/ssh", "--ssh-key-file", keyFile}

		out, err := runBootstrap(cluster.Kubeconfig, append(args, "--known-hosts-file", wrong)...)
		g.Expect(err).To(MatchError(sources.ErrHostKeyMismatch), out)
		g.Expect(err).To(MatchError(ContainSubstring("known_hosts has a different key for [127.0.0.1]:")))
		g.Expect(err).To(MatchError(ContainSubstring("--known-hosts-file")))
		t.Logf("wrong known_hosts: %v", err)
		g.Expect(repo.Head(t, "main")).To(Equal(first), "nothing pushed")
		g.Expect(sshSrv.Stats().ReceivePack).To(BeZero())

		out, err = runBootstrap(cluster.Kubeconfig, args...)
		g.Expect(err).To(MatchError(ContainSubstring("known_hosts")), "known_hosts is required for ssh: %s", out)
		t.Logf("no known_hosts: %v", err)

		good := writeTemp(t, "known_hosts", sshSrv.KnownHosts())
		out, err = runBootstrap(cluster.Kubeconfig, append(args, "--known-hosts-file", good)...)
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Expect(repo.Head(t, "main")).NotTo(Equal(first))
		g.Expect(gittest.Git(t, repo.Dir, "show", "main:README.md")).To(Equal("fleet"), "the branch's files are kept")
		g.Expect(gittest.Git(t, repo.Dir, "show", "main:clusters/ssh/converge-system/synctarget.yaml")).To(
			ContainSubstring("url: " + sshSrv.RepoURL(repo)))
		secret := &corev1.Secret{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "converge-system", Name: "converge-git-credentials"}, secret)).To(Succeed())
		g.Expect(secret.Data).To(HaveKeyWithValue("identity", key))
		g.Expect(strings.TrimSpace(string(secret.Data["known_hosts"]))).To(Equal(strings.TrimSpace(string(sshSrv.KnownHosts()))))
		g.Expect(secret.Data).NotTo(HaveKey("username"), "the Secret holds only what this bootstrap was given")
	})
}

// TestBootstrapThenServe: after `converge bootstrap git`, the real `converge serve` (run
// out of the cluster: the installed Deployment's pods are only simulated here) follows the
// bootstrapped path with the Secret bootstrap applied, and the SyncTarget becomes Ready on
// the bootstrapped revision: the daemon applies its own install and SyncTarget from Git.
func TestBootstrapThenServe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := NewWithT(t)
	cluster := clustertest.Start(t, localcluster.Options{Workloads: true, Nodes: 1})
	c, err := client.New(cluster.Config, client.Options{Scheme: cliScheme()})
	g.Expect(err).NotTo(HaveOccurred())
	root := t.TempDir()
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{Username: "bot", Password: "s3cret-pass"})
	repo := gittest.NewRepo(t, root, "fleet")
	out, err := runBootstrap(cluster.Kubeconfig, "--url", srv.RepoURL(repo), "--path", "clusters/dev",
		"--username", "bot", "--password", "s3cret-pass")
	g.Expect(err).NotTo(HaveOccurred(), out)
	head := repo.Head(t, "main")

	d := serve(t, cluster.Kubeconfig)
	target := &convergev1.SyncTarget{}
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "converge-system", Name: "converge"}, target)).To(Succeed())
		g.Expect(target.Status.LastAppliedRevision).To(Equal("main@sha1:"+head), "%+v", target.Status)
		g.Expect(apimeta.IsStatusConditionTrue(target.Status.Conditions, convergev1.ReadyCondition)).To(BeTrue(),
			"%+v", target.Status.Conditions)
	}).WithTimeout(90*time.Second).WithPolling(500*time.Millisecond).Should(Succeed(), d.describe)
	g.Expect(daemonOutput(d)).NotTo(ContainSubstring("s3cret-pass"))
}

// TestBootstrapCommit: the git half of bootstrap, without a cluster: it commits both files
// through the daemon's git client, commits nothing when run again, refuses a file it did not
// write, a branch missing from a repository that has others, and an SSH server whose key
// --known-hosts-file does not hold, saying which flag to look at.
func TestBootstrapCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := NewWithT(t)
	root := t.TempDir()
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{Username: "bot", Password: "s3cret-pass"})
	repo := gittest.NewRepo(t, root, "fleet")
	first := repo.Commit(t, "main", map[string]string{"README.md": "fleet"})
	prepared := func(url, branch string, edit func(*bootstrapOptions)) *bootstrapOptions {
		o := &bootstrapOptions{install: installOptions{build: currentBuild()}, url: url, branch: branch,
			path: "/clusters/dev/", interval: time.Minute, authorName: "converge bootstrap", authorEmail: "converge@localhost"}
		if edit != nil {
			edit(o)
		}
		g.Expect(o.prepare()).To(Succeed())
		return o
	}
	basic := func(o *bootstrapOptions) { o.username, o.password = "bot", "s3cret-pass" }

	o := prepared(srv.RepoURL(repo), "main", basic)
	commit, err := o.commit(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(repo.Head(t, "main")).To(Equal(commit))
	g.Expect(gittest.Git(t, repo.Dir, "rev-parse", commit+"^")).To(Equal(first))
	g.Expect(gittest.Git(t, repo.Dir, "show", "main:clusters/dev/converge-system/synctarget.yaml")).To(
		HavePrefix(strings.TrimSpace(bootstrapMarker)))
	g.Expect(gittest.Git(t, repo.Dir, "log", "-1", "--format=%an <%ae>: %s", "main")).To(Equal(
		"converge bootstrap <converge@localhost>: converge bootstrap: install converge and follow clusters/dev"))

	commit, err = prepared(srv.RepoURL(repo), "main", basic).commit(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(commit).To(BeEmpty(), "the branch holds both files already")

	_, err = prepared(srv.RepoURL(repo), "prod", basic).commit(ctx)
	g.Expect(err).To(MatchError(sources.ErrRefNotFound))
	g.Expect(err).To(MatchError(ContainSubstring("--branch")))

	foreign := gittest.NewRepo(t, root, "foreign")
	head := foreign.Commit(t, "main", map[string]string{"clusters/dev/converge-system/install.yaml": "kind: ConfigMap"})
	_, err = prepared(srv.RepoURL(foreign), "main", basic).commit(ctx)
	g.Expect(err).To(MatchError(ContainSubstring("was not written by converge bootstrap")))
	g.Expect(foreign.Head(t, "main")).To(Equal(head))

	key, pub := gittest.NewSSHKey(t, "")
	sshSrv := gittest.NewSSHServer(t, root, pub)
	_, otherKey := gittest.NewSSHKey(t, "")
	_, err = prepared(sshSrv.RepoURL(repo), "main", func(o *bootstrapOptions) {
		o.sshKeyFile = writeTemp(t, "id", key)
		o.knownHostsFile = writeTemp(t, "known_hosts", []byte(knownhosts.Line([]string{sshSrv.Addr}, otherKey)+"\n"))
	}).commit(ctx)
	g.Expect(err).To(MatchError(sources.ErrHostKeyMismatch))
	g.Expect(err).To(MatchError(ContainSubstring("--known-hosts-file")))
	g.Expect(sshSrv.Stats().UploadPack+sshSrv.Stats().ReceivePack).To(BeZero(), "refused in the handshake")
}

// TestBootstrapSecretInput: `converge bootstrap git` takes the password from standard input
// or from $CONVERGE_GIT_PASSWORD, --password winning over the variable, refuses --password
// with --password-stdin and an empty standard input, and names the variable a refused
// password came from. No cluster: all of it happens before the kubeconfig is read.
// Not parallel: it sets environment variables.
func TestBootstrapSecretInput(t *testing.T) {
	noCluster := filepath.Join(t.TempDir(), "no-kubeconfig")
	https := []string{"--url", "https://git.example.com/fleet.git", "--path", "clusters/dev"}

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
			{"\n", []string{"--bearer-token-stdin"},
				"--bearer-token-stdin: the bearer token read from standard input is empty"},
			{"t0ken", []string{"--password-stdin", "--bearer-token-stdin"},
				"--password-stdin and --bearer-token-stdin exclude each other: standard input is read once"},
		} {
			g := NewWithT(t)
			out, err := runBootstrapIn(noCluster, strings.NewReader(tc.stdin), append(https, tc.args...)...)
			g.Expect(err).To(MatchError(tc.want), out)
			g.Expect(exitCode(err)).To(Equal(2))
		}
	})

	// secretData is the data of the Secret bootstrap applies for args, stdin and env.
	secretData := func(t *testing.T, stdin string, env map[string]string, args ...string) map[string]any {
		t.Helper()
		g := NewWithT(t)
		o := &bootstrapOptions{install: installOptions{build: currentBuild()}, interval: time.Minute}
		cmd := &cobra.Command{Use: "git"}
		f := cmd.Flags()
		f.StringVar(&o.url, "url", "", "")
		f.StringVar(&o.branch, "branch", "main", "")
		f.StringVar(&o.path, "path", "", "")
		f.StringVar(&o.username, "username", "", "")
		o.bindFlags(f, "password")
		g.Expect(cmd.ParseFlags(append(https, args...))).To(Succeed())
		g.Expect(o.resolve(f, strings.NewReader(stdin), func(k string) string { return env[k] })).To(Succeed())
		g.Expect(o.prepare()).To(Succeed())
		data, _, _ := unstructured.NestedMap(o.secret().Object, "data")
		return data
	}
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

	t.Run("stdin", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(secretData(t, "s3cret-pass\n", nil, "--username", "bot", "--password-stdin")).To(Equal(map[string]any{
			"username": b64("bot"), "password": b64("s3cret-pass")}))
		g.Expect(secretData(t, "t0ken\r\n", nil, "--bearer-token-stdin")).To(Equal(map[string]any{
			"bearerToken": b64("t0ken")}))
	})

	t.Run("environment", func(t *testing.T) {
		g := NewWithT(t)
		env := map[string]string{gitPasswordEnv: "env-pass"}
		g.Expect(secretData(t, "", env, "--username", "bot")).To(Equal(map[string]any{
			"username": b64("bot"), "password": b64("env-pass")}))
		g.Expect(secretData(t, "", env, "--username", "bot", "--password", "flag-pass")).To(Equal(map[string]any{
			"username": b64("bot"), "password": b64("flag-pass")}), "the flag wins")
		g.Expect(secretData(t, "", map[string]string{gitBearerTokenEnv: "env-t0ken"})).To(Equal(map[string]any{
			"bearerToken": b64("env-t0ken")}))

		// Through the command: the real environment, and a refusal naming the variable.
		t.Setenv(gitPasswordEnv, "env-pass")
		out, err := runBootstrapIn(noCluster, nil, append(https, "--bearer-token", "t0ken")...)
		g.Expect(err).To(MatchError(`checking the credentials flags: invalid source: the secret has a "password" but no "username"`+
			" (taken from the environment: $"+gitPasswordEnv+")"), out)
		g.Expect(err.Error()).NotTo(ContainSubstring("env-pass"))
	})
}
