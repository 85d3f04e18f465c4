package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/go-git/go-git/v5"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sources/charts"
)

// registryPasswordEnv holds the password of --username when --password-stdin is not given.
const registryPasswordEnv = "CONVERGE_REGISTRY_PASSWORD"

// registryOptions are the flags of the commands that reach an OCI registry: its
// credentials.
type registryOptions struct {
	creds         string
	username      string
	passwordStdin bool
}

func (o *registryOptions) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.creds, "creds", "", "the registry's credentials, USER:PASSWORD (default: what docker login stored in ~/.docker/config.json or $DOCKER_CONFIG)")
	fs.StringVar(&o.username, "username", "", "the registry's user name, its password read with --password-stdin or from $"+registryPasswordEnv)
	fs.BoolVar(&o.passwordStdin, "password-stdin", false, "read the password of --username from standard input")
}

// artifactSource reads ref, an oci:// reference of an artifact, with the credentials of
// its registry.
func (o *registryOptions) artifactSource(in io.Reader, ref string) (charts.Source, error) {
	src, err := charts.ParseArtifactReference(ref)
	if err != nil {
		return charts.Source{}, usageError(err)
	}
	registry, _, _ := strings.Cut(strings.TrimPrefix(src.Repository, "oci://"), "/")
	if src.Credentials, err = o.credentials(in, registry); err != nil {
		return charts.Source{}, err
	}
	return src, nil
}

// credentials are the registry's credentials: --creds, --username with --password-stdin
// or $CONVERGE_REGISTRY_PASSWORD, else docker login's. Errors never quote a password.
func (o *registryOptions) credentials(in io.Reader, registry string) (charts.Credentials, error) {
	envPassword := os.Getenv(registryPasswordEnv)
	switch {
	case o.creds != "" && (o.username != "" || o.passwordStdin):
		return charts.Credentials{}, usageError(errors.New("--creds, or --username with its password: not both"))
	case o.creds != "":
		user, password, ok := strings.Cut(o.creds, ":")
		if !ok || user == "" || password == "" {
			return charts.Credentials{}, usageError(errors.New("--creds is USER:PASSWORD"))
		}
		return charts.Credentials{Username: user, Password: password}, nil
	case o.passwordStdin && o.username == "":
		return charts.Credentials{}, usageError(errors.New("--password-stdin needs --username"))
	case o.passwordStdin:
		data, err := io.ReadAll(io.LimitReader(in, 64<<10))
		if err != nil {
			return charts.Credentials{}, fmt.Errorf("reading the password from standard input: %w", err)
		}
		password := strings.TrimRight(string(data), "\r\n")
		if password == "" {
			return charts.Credentials{}, usageError(errors.New("--password-stdin: standard input holds no password"))
		}
		return charts.Credentials{Username: o.username, Password: password}, nil
	case o.username != "" && envPassword == "":
		return charts.Credentials{}, usageError(errors.New("--username needs --password-stdin or $" + registryPasswordEnv))
	case o.username != "":
		return charts.Credentials{Username: o.username, Password: envPassword}, nil
	case envPassword != "":
		return charts.Credentials{}, usageError(errors.New("$" + registryPasswordEnv + " needs --username"))
	}
	return dockerCredentials(registry)
}

// dockerCredentials are what docker login stored for registry (~/.docker/config.json,
// $DOCKER_CONFIG, or a credential helper they name), as a .dockerconfigjson of that one
// entry; none when there are none.
func dockerCredentials(registry string) (charts.Credentials, error) {
	reg, err := name.NewRegistry(registry)
	if err != nil {
		return charts.Credentials{}, usageError(fmt.Errorf("%q is not a registry", registry))
	}
	auth, err := authn.DefaultKeychain.Resolve(reg)
	if err != nil {
		return charts.Credentials{}, fmt.Errorf("reading the docker credentials of %s: %w", registry, err)
	}
	if auth == authn.Anonymous {
		return charts.Credentials{}, nil
	}
	cfg, err := auth.Authorization()
	if err != nil {
		return charts.Credentials{}, fmt.Errorf("reading the docker credentials of %s: %w", registry, err)
	}
	data, err := json.Marshal(map[string]any{"auths": map[string]*authn.AuthConfig{registry: cfg}})
	if err != nil {
		return charts.Credentials{}, err
	}
	return charts.Credentials{DockerConfigJSON: data}, nil
}

// registryVerb is a verb of the commands on an OCI registry (push, tag, list) with its
// subcommand.
func registryVerb(use, short string, sub *cobra.Command) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Args: cobra.NoArgs}
	cmd.AddCommand(sub)
	return cmd
}

// newArtifactClient is the registry client of the CLI: it runs on the user's machine,
// so a registry on a loopback address (a local registry, a port-forward) is reached —
// over plain HTTP there only.
func newArtifactClient() *charts.Client { return &charts.Client{AllowLoopback: true} }

// gitDefaults are the URL of the origin remote (credentials removed) and the revision,
// "<branch>@sha1:<commit>" ("sha1:<commit>" on a detached HEAD), of the Git work tree
// dir is in; empty when it is in none.
func gitDefaults(dir string) (source, revision string) {
	repo, err := git.PlainOpenWithOptions(dir, &git.PlainOpenOptions{DetectDotGit: true, EnableDotGitCommonDir: true})
	if err != nil {
		return "", ""
	}
	if remote, err := repo.Remote("origin"); err == nil && len(remote.Config().URLs) > 0 {
		source = sources.RedactURL(remote.Config().URLs[0])
	}
	if head, err := repo.Head(); err == nil {
		revision = "sha1:" + head.Hash().String()
		if head.Name().IsBranch() {
			revision = head.Name().Short() + "@" + revision
		}
	}
	return source, revision
}
