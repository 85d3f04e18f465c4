package sources

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"

	"github.com/skeema/knownhosts"
	"golang.org/x/crypto/ssh"
)

// Keys of the credentials Secret a SyncTarget's spec.source.secretRef names.
const (
	// SecretUsername is the HTTP basic auth user.
	SecretUsername = "username"
	// SecretPassword is the HTTP basic auth password, or the passphrase of an SSH identity.
	SecretPassword = "password"
	// SecretBearerToken is sent as "Authorization: Bearer <token>" over HTTP(S).
	SecretBearerToken = "bearerToken"
	// SecretCACert is a PEM bundle of the certificate authorities an HTTPS server is checked
	// against, instead of the system's.
	SecretCACert = "ca.crt"
	// SecretIdentity is an SSH private key (PEM or OpenSSH format).
	SecretIdentity = "identity"
	// SecretKnownHosts lists the SSH server's host keys, as in ~/.ssh/known_hosts; required for SSH.
	SecretKnownHosts = "known_hosts"
)

// Auth holds the credentials for a repository. Its String and GoString never print them.
// Use it by pointer: it caches the parsed SSH key and known_hosts.
type Auth struct {
	// Username and Password authenticate over HTTP(S) with basic auth.
	Username, Password string
	// BearerToken authenticates over HTTP(S) with "Authorization: Bearer".
	BearerToken string
	// CACert is a PEM bundle; when set, an HTTPS server must present a certificate signed by one
	// of these authorities (the system's are not consulted).
	CACert []byte
	// Identity is the SSH private key; Password is its passphrase, if any.
	Identity []byte
	// KnownHosts holds the SSH server's host keys in known_hosts format. Required for SSH: an
	// unknown or changed host key is refused.
	KnownHosts []byte

	once     sync.Once
	signer   ssh.Signer
	hostKeys *hostKeyPolicy
	sshErr   error
}

// AuthFromSecret builds the credentials for rawURL from the data of a Secret, checking that
// they suit the URL's protocol: for ssh, identity and known_hosts are required and must parse;
// for http(s), basic auth and a bearer token exclude each other and ca.crt must hold a
// certificate. Errors match ErrInvalidSource and never quote the secret's values.
func AuthFromSecret(data map[string][]byte, rawURL string) (*Auth, error) {
	a := &Auth{
		Username:    string(data[SecretUsername]),
		Password:    string(data[SecretPassword]),
		BearerToken: string(data[SecretBearerToken]),
		CACert:      bytes.Clone(data[SecretCACert]),
		Identity:    bytes.Clone(data[SecretIdentity]),
		KnownHosts:  bytes.Clone(data[SecretKnownHosts]),
	}
	scheme, _, _, _, _, err := splitURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSource, err)
	}
	switch scheme {
	case "ssh":
		if len(a.Identity) == 0 {
			return nil, fmt.Errorf("%w: the secret has no %q, required for ssh", ErrInvalidSource, SecretIdentity)
		}
		if len(a.KnownHosts) == 0 {
			return nil, fmt.Errorf("%w: the secret has no %q, required for ssh: host keys are never accepted blindly", ErrInvalidSource, SecretKnownHosts)
		}
		if _, _, err := a.ssh(); err != nil {
			return nil, err
		}
	case "http", "https":
		if err := a.checkHTTP(); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("%w: unsupported url scheme %q", ErrInvalidSource, scheme)
	}
	return a, nil
}

func (a *Auth) checkHTTP() error {
	if a == nil {
		return nil
	}
	if a.Password != "" && a.Username == "" {
		return fmt.Errorf("%w: the secret has a %q but no %q", ErrInvalidSource, SecretPassword, SecretUsername)
	}
	if a.BearerToken != "" && a.Username != "" {
		return fmt.Errorf("%w: the secret sets both %q and %q; use one", ErrInvalidSource, SecretBearerToken, SecretUsername)
	}
	if len(a.CACert) > 0 {
		if _, err := a.certPool(); err != nil {
			return err
		}
	}
	return nil
}

func (a *Auth) certPool() (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(a.CACert) {
		return nil, fmt.Errorf("%w: %q holds no PEM certificate", ErrInvalidSource, SecretCACert)
	}
	return pool, nil
}

// ssh parses the identity and known_hosts once.
func (a *Auth) ssh() (ssh.Signer, *hostKeyPolicy, error) {
	if a == nil || len(a.Identity) == 0 || len(a.KnownHosts) == 0 {
		return nil, nil, fmt.Errorf("%w: ssh needs a secret with %q and %q", ErrInvalidSource, SecretIdentity, SecretKnownHosts)
	}
	a.once.Do(func() {
		a.signer, a.sshErr = parseIdentity(a.Identity, a.Password)
		if a.sshErr != nil {
			return
		}
		a.hostKeys, a.sshErr = parseKnownHosts(a.KnownHosts)
	})
	return a.signer, a.hostKeys, a.sshErr
}

func parseIdentity(pemBytes []byte, passphrase string) (ssh.Signer, error) {
	signer, err := ssh.ParsePrivateKey(pemBytes)
	var missing *ssh.PassphraseMissingError
	switch {
	case err == nil:
		return signer, nil
	case errors.As(err, &missing) && passphrase == "":
		return nil, fmt.Errorf("%w: %q is encrypted and the secret has no %q", ErrInvalidSource, SecretIdentity, SecretPassword)
	case errors.As(err, &missing):
		signer, err = ssh.ParsePrivateKeyWithPassphrase(pemBytes, []byte(passphrase))
		if err != nil {
			return nil, fmt.Errorf("%w: cannot decrypt %q with %q", ErrInvalidSource, SecretIdentity, SecretPassword)
		}
		return signer, nil
	}
	return nil, fmt.Errorf("%w: %q is not a private key in PEM or OpenSSH format", ErrInvalidSource, SecretIdentity)
}

// hostKeyPolicy is how every SSH connection converge makes checks the server — the daemon's
// polls and fetches, `converge bootstrap git`'s push, and the check of `converge create secret
// git`: only a key known_hosts lists for the host is accepted, and the server is asked for the
// key types known_hosts has for it (so that a server with several keys presents the one we
// know). parseKnownHosts is its only constructor.
type hostKeyPolicy struct {
	// check is the ssh.HostKeyCallback: it refuses an unknown or changed key with a
	// *hostKeyError saying which, and what the server presented.
	check ssh.HostKeyCallback
	// algorithms lists the host key algorithms to ask host:port for.
	algorithms func(hostport string) []string
}

// parseKnownHosts checks the known_hosts data (every entry parses, at least one) and builds
// the host key policy from it. Its errors match ErrInvalidSource and never quote the data.
func parseKnownHosts(data []byte) (*hostKeyPolicy, error) {
	rest, entries := data, 0
	for {
		var err error
		_, _, _, _, rest, err = ssh.ParseKnownHosts(rest)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %q: entry %d does not parse", ErrInvalidSource, SecretKnownHosts, entries+1)
		}
		entries++
	}
	if entries == 0 {
		return nil, fmt.Errorf("%w: %q has no host key", ErrInvalidSource, SecretKnownHosts)
	}
	// The known_hosts reader only reads files; the file lives for the duration of this call.
	f, err := os.CreateTemp("", "converge-known-hosts-*")
	if err != nil {
		return nil, fmt.Errorf("writing known_hosts: %w", err)
	}
	defer func() { _ = os.Remove(f.Name()) }()
	_, werr := f.Write(data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		return nil, fmt.Errorf("writing known_hosts: %w", err)
	}
	db, err := knownhosts.NewDB(f.Name())
	if err != nil {
		return nil, fmt.Errorf("%w: %q does not parse", ErrInvalidSource, SecretKnownHosts)
	}
	return &hostKeyPolicy{check: explainHostKeyErrors(db.HostKeyCallback()), algorithms: db.HostKeyAlgorithms}, nil
}

// explainHostKeyErrors turns the refusals of check into *hostKeyError values that say why.
func explainHostKeyErrors(check ssh.HostKeyCallback) ssh.HostKeyCallback {
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		err := check(hostname, remote, key)
		if err == nil {
			return nil
		}
		host := knownhosts.Normalize(hostname)
		fp := key.Type() + " " + ssh.FingerprintSHA256(key)
		switch {
		case knownhosts.IsHostKeyChanged(err):
			return &hostKeyError{kind: ErrHostKeyMismatch, msg: fmt.Sprintf(
				"known_hosts has a different key for %s than the %s it presented; refusing to connect "+
					"(the server's key changed, or the connection is intercepted)", host, fp)}
		case knownhosts.IsHostUnknown(err):
			return &hostKeyError{kind: ErrUnknownHostKey, msg: fmt.Sprintf(
				"%s is not in known_hosts; refusing to connect (it presented %s: add it to the secret's known_hosts if you trust it)",
				host, fp)}
		}
		return &hostKeyError{kind: ErrHostKeyMismatch, msg: fmt.Sprintf("host key of %s refused: %v", host, err)}
	}
}

// hash identifies the credentials without revealing them; "" for nil.
func (a *Auth) hash() string {
	if a == nil {
		return ""
	}
	h := sha256.New()
	for _, v := range [][]byte{[]byte(a.Username), []byte(a.Password), []byte(a.BearerToken), a.CACert, a.Identity, a.KnownHosts} {
		_, _ = fmt.Fprintf(h, "%d:", len(v))
		h.Write(v)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// secrets lists the values to scrub from messages.
func (a *Auth) secrets() []string {
	if a == nil {
		return nil
	}
	return []string{a.Password, a.BearerToken, a.Username}
}

// String describes which credentials are set, never their values.
func (a *Auth) String() string {
	if a == nil {
		return "<no credentials>"
	}
	set := func(v string) string {
		if v == "" {
			return "unset"
		}
		return "[redacted]"
	}
	return fmt.Sprintf("Auth{username: %s, password: %s, bearerToken: %s, ca.crt: %d bytes, identity: %s, known_hosts: %d bytes}",
		set(a.Username), set(a.Password), set(a.BearerToken), len(a.CACert), set(string(a.Identity)), len(a.KnownHosts))
}

// GoString is String, so that %#v does not print the credentials either.
func (a *Auth) GoString() string { return a.String() }
