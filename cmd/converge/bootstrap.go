package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	"github.com/fluxcd/pkg/ssa"
	"github.com/spf13/cobra"
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
	username                    string
	sshKeyFile, knownHostsFile  string
	caFile                      string
	interval                    time.Duration
	authorName, authorEmail     string
	secretData                  map[string][]byte
	auth                        *sources.Auth
	installPath, syncTargetPath string
	installYAML, syncTargetYAML []byte
	secretObjects               []*unstructured.Unstructured
	gitSecretFlags
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
repository that has others is an error.

` + gitSecretInputHelp,
		Example: `  echo "$TOKEN" | converge bootstrap git --url https://git.example.com/fleet.git --branch main \
      --path clusters/prod --username bot --password-stdin
  converge bootstrap git --url ssh://git@git.example.com/fleet.git --path clusters/prod \
      --ssh-key-file ~/.ssh/id_ed25519 --known-hosts-file ~/.ssh/known_hosts`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.resolve(cmd.Flags(), cmd.InOrStdin(), os.Getenv); err != nil {
				return err
			}
			return o.run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	o.install.cli.kube.BindFlags(f)
	f.StringVar(&o.url, "url", "", "URL of the Git repository (https://, http:// or ssh://)")
	f.StringVar(&o.branch, "branch", "main", "branch to commit to and follow")
	f.StringVar(&o.path, "path", "", "directory of the repository the cluster follows, e.g. clusters/prod")
	f.StringVar(&o.username, "username", "", "HTTP basic auth user")
	o.bindFlags(f, "HTTP basic auth password, or the passphrase of --ssh-key-file")
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
	if err := o.credentials(); err != nil {
		return err
	}
	return o.render()
}

// credentials reads the credentials flags into the Secret's data and checks them as the daemon
// does (sources.AuthFromSecret: over SSH, identity and known_hosts are required and parse).
func (o *bootstrapOptions) credentials() error {
	data := map[string][]byte{}
	for key, v := range map[string]string{sources.SecretUsername: o.username, sources.SecretPassword: o.password,
		sources.SecretBearerToken: o.bearerToken} {
		if v != "" {
			data[key] = []byte(v)
		}
	}
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
	if len(data) == 0 && !strings.HasPrefix(o.url, "ssh://") {
		return nil
	}
	a, err := sources.AuthFromSecret(data, o.url)
	if err != nil {
		// The keys it names are those of the Secret: --username, --password, --bearer-token,
		// --ca-file, --ssh-key-file (identity) and --known-hosts-file (known_hosts).
		return fmt.Errorf("checking the credentials flags: %w%s", err, o.envNote())
	}
	o.auth, o.secretData = a, data
	return nil
}

// render builds the two files committed and the objects applied.
func (o *bootstrapOptions) render() error {
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

// commit writes the two files to the branch and pushes, through the daemon's git client
// (sources.OpenBranch); it returns the new commit, or "" when the branch already holds them.
func (o *bootstrapOptions) commit(ctx context.Context) (string, error) {
	b, err := sources.OpenBranch(ctx, sources.Source{URL: o.url, Ref: sources.Ref{Branch: o.branch}, Auth: o.auth})
	if err != nil {
		return "", explainGitError(err)
	}
	defer b.Close()
	for _, file := range []struct {
		path    string
		content []byte
	}{{o.installPath, o.installYAML}, {o.syncTargetPath, o.syncTargetYAML}} {
		old, err := b.ReadFile(file.path)
		switch {
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			return "", fmt.Errorf("reading %s on branch %s: %w", file.path, o.branch, err)
		case err == nil && !bytes.HasPrefix(old, []byte(bootstrapMarker)):
			return "", fmt.Errorf("%s on branch %s was not written by converge bootstrap (it does not start with %q): "+
				"refusing to overwrite it; move it away or choose another --path", file.path, o.branch,
				strings.TrimSpace(bootstrapMarker))
		}
		if err := b.WriteFile(file.path, file.content); err != nil {
			return "", err
		}
	}
	commit, err := b.Push(ctx, sources.Commit{
		Message:    "converge bootstrap: install converge and follow " + o.path,
		AuthorName: o.authorName, AuthorEmail: o.authorEmail,
	})
	if err != nil {
		return "", explainGitError(err)
	}
	return commit, nil
}

// explainGitError says which flag to look at for the failures a flag fixes.
func explainGitError(err error) error {
	switch {
	case errors.Is(err, sources.ErrUnknownHostKey), errors.Is(err, sources.ErrHostKeyMismatch):
		return fmt.Errorf("%w (known_hosts is --known-hosts-file)", err)
	case errors.Is(err, sources.ErrUntrustedCertificate):
		return fmt.Errorf("%w (ca.crt is --ca-file)", err)
	case errors.Is(err, sources.ErrRefNotFound):
		return fmt.Errorf("%w, or name another with --branch", err)
	}
	return err
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
