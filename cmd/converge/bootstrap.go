package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"strings"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	"github.com/fluxcd/pkg/ssa"
	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/memfs"
	"github.com/go-git/go-git/v5"
	gitconfig "github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/config"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sync/apply"
)

// bootstrapMarker heads every file `converge bootstrap` writes; a file at one of its paths
// without it is someone else's and is never overwritten.
const bootstrapMarker = "# Written by converge bootstrap; edits are overwritten by the next bootstrap.\n"

// bootstrapName names the SyncTarget (and the credentials Secret) bootstrap creates in
// converge-system.
const (
	bootstrapName       = "converge"
	bootstrapSecretName = "converge-git-credentials"
)

// bootstrapOptions are the flags of `converge bootstrap git`.
type bootstrapOptions struct {
	install                     installOptions
	url, branch, path           string
	username, password, bearer  string
	sshKeyFile, knownHostsFile  string
	caFile                      string
	interval                    time.Duration
	authorName, authorEmail     string
	secretData                  map[string][]byte
	auth                        transport.AuthMethod
	caBundle                    []byte
	installPath, syncTargetPath string
	installYAML, syncTargetYAML []byte
	secretObjects               []*unstructured.Unstructured
}

func newBootstrapCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bootstrap",
		Short: "Install converge and make it follow a Git repository that holds its own install",
		Args:  usageArgs(cobra.NoArgs),
	}
	cmd.AddCommand(newBootstrapGitCommand())
	return cmd
}

func newBootstrapGitCommand() *cobra.Command {
	o := &bootstrapOptions{install: installOptions{pollInterval: time.Second, build: currentBuild()}}
	cmd := &cobra.Command{
		Use:   "git",
		Short: "Commit converge's install to a Git repository, install it, and make it follow that repository",
		Long: `Commit converge's install manifests (those of 'converge install --export', with
--multi-tenant and --image as there) and a SyncTarget converge-system/converge that follows
--url, --branch and --path with prune to the repository, under --path:
PATH/converge-system/install.yaml and PATH/converge-system/synctarget.yaml. Then apply
them to the cluster of the kubeconfig (server-side apply, field manager converge), with
the Secret of the credentials the SyncTarget's secretRef names. From then on the daemon
follows PATH, and upgrades and repairs itself from Git.

Credentials never go into the repository: the Secret ` + installNamespace + `/` + bootstrapSecretName + `
is applied to the cluster only. Over SSH, --known-hosts-file is required: an unknown
host key is refused.

Both files start with a marker comment; a file at those paths without it is not
overwritten and nothing is pushed or applied. Running the command again with the same
flags makes no commit. An empty repository gets the branch; a missing branch in a
repository that has others is an error.`,
		Example: `  converge bootstrap git --url https://git.example.com/fleet.git --branch main \
      --path clusters/prod --username bot --password "$TOKEN"
  converge bootstrap git --url ssh://git@git.example.com/fleet.git --path clusters/prod \
      --ssh-key-file ~/.ssh/id_ed25519 --known-hosts-file ~/.ssh/known_hosts`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	o.install.cli.kube.BindFlags(f)
	f.StringVar(&o.url, "url", "", "URL of the Git repository (https://, http:// or ssh://)")
	f.StringVar(&o.branch, "branch", "main", "branch to commit to and follow")
	f.StringVar(&o.path, "path", "", "directory of the repository the cluster follows, e.g. clusters/prod")
	f.StringVar(&o.username, "username", "", "HTTP basic auth user")
	f.StringVar(&o.password, "password", "", "HTTP basic auth password, or the passphrase of --ssh-key-file")
	f.StringVar(&o.bearer, "bearer-token", "", "HTTP bearer token")
	f.StringVar(&o.sshKeyFile, "ssh-key-file", "", "SSH private key")
	f.StringVar(&o.knownHostsFile, "known-hosts-file", "", "known_hosts of the SSH server (required for SSH)")
	f.StringVar(&o.caFile, "ca-file", "", "PEM of the certificate authorities the HTTPS server is checked against")
	f.BoolVar(&o.install.multiTenant, "multi-tenant", false,
		"install the locked-down daemon: it acts only as the service accounts SyncTargets name")
	f.StringVar(&o.install.image, "image", "", "image of the daemon (default: "+defaultImageHelp(o.install.build)+")")
	f.DurationVar(&o.interval, "interval", time.Minute, "how often the daemon polls the repository")
	f.StringVar(&o.authorName, "author-name", "converge bootstrap", "author of the commit")
	f.StringVar(&o.authorEmail, "author-email", "converge@localhost", "e-mail of the commit's author")
	f.DurationVar(&o.install.timeout, "timeout", 2*time.Minute, "how long to wait for the CRD and namespace to be ready")
	return cmd
}

func (o *bootstrapOptions) run(ctx context.Context, out io.Writer) error {
	if err := o.prepare(); err != nil {
		return err
	}
	// The cluster must be reachable before anything is pushed.
	if _, _, err := o.install.cli.Client(); err != nil {
		return err
	}
	commit, err := o.commit(ctx)
	if err != nil {
		return err
	}
	if commit == "" {
		_, _ = fmt.Fprintf(out, "%s: %s and %s are up to date on %s\n", sources.RedactURL(o.url), o.installPath,
			o.syncTargetPath, o.branch)
	} else {
		_, _ = fmt.Fprintf(out, "%s: committed %s to %s (%s, %s)\n", sources.RedactURL(o.url), commit, o.branch,
			o.installPath, o.syncTargetPath)
	}
	if err := o.install.run(ctx, out); err != nil {
		return err
	}
	return o.applyRest(ctx, out)
}

// prepare checks the flags, reads the credential files and renders what is committed and applied.
func (o *bootstrapOptions) prepare() error {
	if o.url == "" || o.path == "" || o.branch == "" {
		return usageError(errors.New("--url, --branch and --path are required"))
	}
	clean := path.Clean(strings.Trim(o.path, "/"))
	if clean == "." || clean == ".." || strings.HasPrefix(clean, "../") {
		return usageError(fmt.Errorf("--path %q is not a directory inside the repository", o.path))
	}
	o.path = clean
	data := map[string][]byte{}
	set := func(key, v string) {
		if v != "" {
			data[key] = []byte(v)
		}
	}
	set(sources.SecretUsername, o.username)
	set(sources.SecretPassword, o.password)
	set(sources.SecretBearerToken, o.bearer)
	for key, file := range map[string]string{sources.SecretIdentity: o.sshKeyFile,
		sources.SecretKnownHosts: o.knownHostsFile, sources.SecretCACert: o.caFile} {
		if file == "" {
			continue
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("reading %s: %w", file, err)
		}
		data[key] = b
	}
	isSSH := strings.HasPrefix(o.url, "ssh://")
	if len(data) > 0 || isSSH {
		a, err := sources.AuthFromSecret(data, o.url)
		if err != nil {
			// The keys it names are those of the Secret: --username, --password, --bearer-token,
			// --ca-file, --ssh-key-file (identity) and --known-hosts-file (known_hosts).
			return fmt.Errorf("checking the credentials flags: %w", err)
		}
		o.caBundle = a.CACert
		switch {
		case isSSH:
			auth, err := sshAuth(a, o.knownHostsFile)
			if err != nil {
				return err
			}
			o.auth = auth
		case a.BearerToken != "":
			o.auth = &githttp.TokenAuth{Token: a.BearerToken}
		case a.Username != "":
			o.auth = &githttp.BasicAuth{Username: a.Username, Password: a.Password}
		}
		o.secretData = data
	}

	overlay, _ := o.install.overlays()
	image := o.install.image
	if image == "" {
		image = defaultImage(o.install.build, installImage)
	}
	manifests, err := config.Build(overlay, image)
	if err != nil {
		return err
	}
	st := o.syncTarget()
	stYAML, err := yaml.Marshal(st.Object)
	if err != nil {
		return fmt.Errorf("writing the SyncTarget: %w", err)
	}
	dir := path.Join(o.path, installNamespace)
	o.installPath, o.syncTargetPath = path.Join(dir, "install.yaml"), path.Join(dir, "synctarget.yaml")
	o.installYAML = append([]byte(bootstrapMarker+"---\n"), manifests...)
	o.syncTargetYAML = append([]byte(bootstrapMarker+"---\n"), stYAML...)
	if o.secretData != nil {
		o.secretObjects = append(o.secretObjects, o.secret())
	}
	o.secretObjects = append(o.secretObjects, st)
	return nil
}

// sshAuth authenticates with the identity of a and checks the host key against known_hosts.
func sshAuth(a *sources.Auth, knownHostsFile string) (transport.AuthMethod, error) {
	var signer ssh.Signer
	var err error
	if a.Password != "" {
		signer, err = ssh.ParsePrivateKeyWithPassphrase(a.Identity, []byte(a.Password))
	} else {
		signer, err = ssh.ParsePrivateKey(a.Identity)
	}
	if err != nil {
		return nil, fmt.Errorf("reading --ssh-key-file: %w", err)
	}
	cb, err := knownhosts.New(knownHostsFile)
	if err != nil {
		return nil, fmt.Errorf("reading --known-hosts-file: %w", err)
	}
	auth := &gitssh.PublicKeys{User: "git", Signer: signer}
	auth.HostKeyCallback = func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		err := cb(hostname, remote, key)
		var ke *knownhosts.KeyError
		if errors.As(err, &ke) {
			fp := key.Type() + " " + ssh.FingerprintSHA256(key)
			if len(ke.Want) == 0 {
				return fmt.Errorf("%s is not in --known-hosts-file; refusing to connect (it presented %s)", hostname, fp)
			}
			return fmt.Errorf("--known-hosts-file has another key for %s than the %s it presented; refusing to connect "+
				"(the server's key changed, or the connection is intercepted)", hostname, fp)
		}
		return err
	}
	return auth, nil
}

func (o *bootstrapOptions) syncTarget() *unstructured.Unstructured {
	source := map[string]any{
		"url":      o.url,
		"ref":      map[string]any{"branch": o.branch},
		"interval": o.interval.String(),
	}
	if o.secretData != nil {
		source["secretRef"] = map[string]any{"name": bootstrapSecretName}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": convergev1.GroupVersion.String(),
		"kind":       "SyncTarget",
		"metadata": map[string]any{
			"name":      bootstrapName,
			"namespace": installNamespace,
			"labels":    map[string]any{nameLabel: "converge"},
		},
		"spec": map[string]any{
			"source": source,
			"path":   o.path,
			"prune":  true,
		},
	}}
}

func (o *bootstrapOptions) secret() *unstructured.Unstructured {
	data := map[string]any{}
	for k, v := range o.secretData {
		data[k] = base64.StdEncoding.EncodeToString(v)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "Secret",
		"metadata": map[string]any{
			"name":      bootstrapSecretName,
			"namespace": installNamespace,
			"labels":    map[string]any{nameLabel: "converge"},
		},
		"type": "Opaque",
		"data": data,
	}}
}

// commit writes the two files to the branch and pushes; it returns the new commit, or ""
// when the branch already holds them.
func (o *bootstrapOptions) commit(ctx context.Context) (string, error) {
	ref := plumbing.NewBranchReferenceName(o.branch)
	remote := git.NewRemote(memory.NewStorage(), &gitconfig.RemoteConfig{Name: "origin", URLs: []string{o.url}})
	refs, err := remote.ListContext(ctx, &git.ListOptions{Auth: o.auth, CABundle: o.caBundle})
	empty := errors.Is(err, transport.ErrEmptyRemoteRepository)
	if err != nil && !empty {
		return "", fmt.Errorf("reading %s: %w", sources.RedactURL(o.url), err)
	}
	found := false
	for _, r := range refs {
		if r.Name() == ref {
			found = true
		}
	}
	if !found && len(refs) > 0 && !empty {
		return "", fmt.Errorf("%s has no branch %q: create it first, or name another with --branch", sources.RedactURL(o.url), o.branch)
	}

	var repo *git.Repository
	fs := memfs.New()
	if found {
		repo, err = git.CloneContext(ctx, memory.NewStorage(), fs, &git.CloneOptions{
			URL: o.url, Auth: o.auth, CABundle: o.caBundle, ReferenceName: ref, SingleBranch: true,
		})
		if err != nil {
			return "", fmt.Errorf("cloning %s: %w", sources.RedactURL(o.url), err)
		}
	} else {
		// An empty repository: the first commit creates the branch.
		repo, err = git.Init(memory.NewStorage(), fs)
		if err == nil {
			_, err = repo.CreateRemote(&gitconfig.RemoteConfig{Name: "origin", URLs: []string{o.url}})
		}
		if err == nil {
			err = repo.Storer.SetReference(plumbing.NewSymbolicReference(plumbing.HEAD, ref))
		}
		if err != nil {
			return "", fmt.Errorf("preparing the first commit: %w", err)
		}
	}
	wt, err := repo.Worktree()
	if err != nil {
		return "", err
	}
	changed := false
	for _, file := range []struct {
		path    string
		content []byte
	}{{o.installPath, o.installYAML}, {o.syncTargetPath, o.syncTargetYAML}} {
		old, err := readFile(fs, file.path)
		switch {
		case err != nil && !errors.Is(err, os.ErrNotExist):
			return "", fmt.Errorf("reading %s: %w", file.path, err)
		case err == nil && !bytes.HasPrefix(old, []byte(bootstrapMarker)):
			return "", fmt.Errorf("%s on branch %s was not written by converge bootstrap (it does not start with %q): "+
				"refusing to overwrite it; move it away or choose another --path", file.path, o.branch,
				strings.TrimSpace(bootstrapMarker))
		case err == nil && bytes.Equal(old, file.content):
			continue
		}
		if err := writeFile(fs, file.path, file.content); err != nil {
			return "", fmt.Errorf("writing %s: %w", file.path, err)
		}
		if _, err := wt.Add(file.path); err != nil {
			return "", fmt.Errorf("adding %s: %w", file.path, err)
		}
		changed = true
	}
	if !changed {
		return "", nil
	}
	sig := &object.Signature{Name: o.authorName, Email: o.authorEmail, When: time.Now()}
	hash, err := wt.Commit("converge bootstrap: install converge and follow "+o.path, &git.CommitOptions{Author: sig, Committer: sig})
	if err != nil {
		return "", fmt.Errorf("committing: %w", err)
	}
	err = repo.PushContext(ctx, &git.PushOptions{
		RemoteName: "origin", Auth: o.auth, CABundle: o.caBundle,
		RefSpecs: []gitconfig.RefSpec{gitconfig.RefSpec(ref + ":" + ref)},
	})
	if err != nil {
		return "", fmt.Errorf("pushing to %s: %w", sources.RedactURL(o.url), err)
	}
	return hash.String(), nil
}

func readFile(fs billy.Filesystem, name string) ([]byte, error) {
	f, err := fs.Open(name)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	return io.ReadAll(f)
}

func writeFile(fs billy.Filesystem, name string, content []byte) error {
	if err := fs.MkdirAll(path.Dir(name), 0o755); err != nil {
		return err
	}
	f, err := fs.Create(name)
	if err != nil {
		return err
	}
	_, werr := f.Write(content)
	return errors.Join(werr, f.Close())
}

// applyRest applies the credentials Secret and then the SyncTarget.
func (o *bootstrapOptions) applyRest(ctx context.Context, out io.Writer) error {
	c, _, err := o.install.cli.Client()
	if err != nil {
		return err
	}
	rm := ssa.NewResourceManager(c, polling.NewStatusPoller(c, c.RESTMapper(), polling.Options{}),
		ssa.Owner{Field: apply.FieldManager, Group: convergev1.GroupVersion.Group})
	for _, u := range o.secretObjects {
		e, err := rm.Apply(ctx, u, ssa.DefaultApplyOptions())
		if err != nil {
			return fmt.Errorf("applying %s/%s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
		}
		_, _ = fmt.Fprintf(out, "%s %s\n", e.Subject, e.Action)
	}
	_, _ = fmt.Fprintf(out, "converge follows %s %s %s\n", sources.RedactURL(o.url), o.branch, o.path)
	return nil
}
