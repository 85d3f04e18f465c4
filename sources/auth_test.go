package sources

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/crypto/ssh"

	"github.com/converge-gitops/converge/internal/gittest"
)

func TestAuthFromSecret(t *testing.T) {
	t.Parallel()
	key, pub := gittest.NewSSHKey(t, "")
	encKey, _ := gittest.NewSSHKey(t, "s3cret-passphrase")
	knownHosts := []byte("[127.0.0.1]:2222 " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub))) + "\n")
	ca := gittest.NewHTTPServer(t, t.TempDir(), gittest.HTTPOptions{TLS: true}).CACert()
	const sshURL, httpsURL = "ssh://git@127.0.0.1:2222/org/app.git", "https://git.example.com/org/app.git"

	for _, tc := range []struct {
		name    string
		url     string
		data    map[string][]byte
		wantErr string
	}{
		{name: "ssh identity and known_hosts", url: sshURL,
			data: map[string][]byte{"identity": key, "known_hosts": knownHosts}},
		{name: "scp-like url", url: "git@127.0.0.1:org/app.git",
			data: map[string][]byte{"identity": key, "known_hosts": knownHosts}},
		{name: "ssh encrypted identity with password", url: sshURL,
			data: map[string][]byte{"identity": encKey, "password": []byte("s3cret-passphrase"), "known_hosts": knownHosts}},
		{name: "ssh without known_hosts", url: sshURL,
			data: map[string][]byte{"identity": key}, wantErr: `no "known_hosts"`},
		{name: "ssh with empty known_hosts", url: sshURL,
			data: map[string][]byte{"identity": key, "known_hosts": []byte("# nothing\n\n")}, wantErr: `"known_hosts" has no host key`},
		{name: "ssh with garbage known_hosts", url: sshURL,
			data: map[string][]byte{"identity": key, "known_hosts": []byte("host not-a-key-type AAAA\n")}, wantErr: `"known_hosts"`},
		{name: "ssh without identity", url: sshURL,
			data: map[string][]byte{"known_hosts": knownHosts}, wantErr: `no "identity"`},
		{name: "ssh garbage identity", url: sshURL,
			data: map[string][]byte{"identity": []byte("nope"), "known_hosts": knownHosts}, wantErr: "not a private key"},
		{name: "ssh encrypted identity without password", url: sshURL,
			data: map[string][]byte{"identity": encKey, "known_hosts": knownHosts}, wantErr: "encrypted"},
		{name: "ssh encrypted identity with wrong password", url: sshURL,
			data: map[string][]byte{"identity": encKey, "password": []byte("wrong-passphrase"), "known_hosts": knownHosts}, wantErr: "cannot decrypt"},
		{name: "https basic auth", url: httpsURL,
			data: map[string][]byte{"username": []byte("u"), "password": []byte("p")}},
		{name: "https bearer token and ca", url: httpsURL,
			data: map[string][]byte{"bearerToken": []byte("t"), "ca.crt": ca}},
		{name: "https both basic auth and token", url: httpsURL,
			data: map[string][]byte{"username": []byte("u"), "bearerToken": []byte("t")}, wantErr: "use one"},
		{name: "https password without username", url: httpsURL,
			data: map[string][]byte{"password": []byte("p")}, wantErr: `no "username"`},
		{name: "https bad ca", url: httpsURL,
			data: map[string][]byte{"ca.crt": []byte("not pem")}, wantErr: "no PEM certificate"},
		{name: "file url", url: "file:///srv/app.git", data: map[string][]byte{}, wantErr: "unsupported url scheme"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			a, err := AuthFromSecret(tc.data, tc.url)
			if tc.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(a).NotTo(BeNil())
				return
			}
			g.Expect(err).To(MatchError(ErrInvalidSource))
			g.Expect(err.Error()).To(ContainSubstring(tc.wantErr))
			noSecretIn(g, err, "s3cret-passphrase", "wrong-passphrase", string(key))
		})
	}
}

// TestAuthMethods fetches over every supported way of authenticating, against real servers.
func TestAuthMethods(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "org/app")
	commit := repo.Commit(t, "main", map[string]string{"app.yaml": "kind: ConfigMap\n"})

	basic := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{TLS: true, Username: "alice", Password: "hunter2-secret"})
	bearer := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{TLS: true, BearerToken: "bearer-token-secret"})
	key, pub := gittest.NewSSHKey(t, "")
	encKey, encPub := gittest.NewSSHKey(t, "key-passphrase")
	sshSrv := gittest.NewSSHServer(t, root, pub, encPub)

	for _, tc := range []struct {
		name string
		url  string
		data map[string][]byte
	}{
		{"https basic auth", basic.RepoURL(repo), map[string][]byte{
			"username": []byte("alice"), "password": []byte("hunter2-secret"), "ca.crt": basic.CACert()}},
		{"https bearer token", bearer.RepoURL(repo), map[string][]byte{
			"bearerToken": []byte("bearer-token-secret"), "ca.crt": bearer.CACert()}},
		{"ssh identity and known_hosts", sshSrv.RepoURL(repo), map[string][]byte{
			"identity": key, "known_hosts": sshSrv.KnownHosts()}},
		{"ssh encrypted identity", sshSrv.RepoURL(repo), map[string][]byte{
			"identity": encKey, "password": []byte("key-passphrase"), "known_hosts": sshSrv.KnownHosts()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			auth, err := AuthFromSecret(tc.data, tc.url)
			g.Expect(err).NotTo(HaveOccurred())
			src := Source{URL: tc.url, Ref: Ref{Branch: "main"}, Auth: auth}
			ctx := ctxTimeout(t, 30*time.Second)
			rev, err := Resolve(ctx, src)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(rev).To(Equal(Revision{Ref: "main", Commit: commit}))
			dir, err := newTestCache(t, CacheOptions{}).Checkout(ctx, src, rev)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(readTree(t, dir)).To(Equal(map[string]string{"app.yaml": "kind: ConfigMap\n"}))
		})
	}
}

// TestFailures checks that each way of failing is its own clear error, without credentials.
func TestFailures(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "org/app")
	repo.Commit(t, "main", map[string]string{"app.yaml": "x: 1\n"})
	basic := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{TLS: true, Username: "alice", Password: "hunter2-secret"})
	bearer := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{TLS: true, BearerToken: "bearer-token-secret"})
	plain := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	stalled := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	stalled.Hold(gittest.AllRequests)

	key, pub := gittest.NewSSHKey(t, "")
	strangerKey, _ := gittest.NewSSHKey(t, "")
	sshSrv := gittest.NewSSHServer(t, root, pub)
	otherSrv := gittest.NewSSHServer(t, t.TempDir())
	// known_hosts naming this server's address with another server's key: a changed host key.
	changedKnownHosts := []byte(strings.Replace(string(otherSrv.KnownHosts()), otherSrv.Addr[strings.LastIndex(otherSrv.Addr, ":"):], sshSrv.Addr[strings.LastIndex(sshSrv.Addr, ":"):], 1))
	sshAuth := func(identity, knownHosts []byte) *Auth { return &Auth{Identity: identity, KnownHosts: knownHosts} }
	sshURL := sshSrv.RepoURL(repo)

	secrets := []string{"hunter2-secret", "wrong-password-42", "bearer-token-secret", "wrong-token-42", "url-password-42", string(key)}
	for _, tc := range []struct {
		name    string
		src     Source
		timeout time.Duration
		kind    error
		says    string
	}{
		{name: "wrong password",
			src:  Source{URL: basic.RepoURL(repo), Auth: &Auth{Username: "alice", Password: "wrong-password-42", CACert: basic.CACert()}},
			kind: ErrAuthFailed, says: "refused"},
		{name: "no credentials",
			src:  Source{URL: basic.RepoURL(repo), Auth: &Auth{CACert: basic.CACert()}},
			kind: ErrAuthFailed, says: "asked for credentials"},
		{name: "wrong password in the url",
			src:  Source{URL: strings.Replace(basic.RepoURL(repo), "https://", "https://alice:url-password-42@", 1), Auth: &Auth{CACert: basic.CACert()}},
			kind: ErrAuthFailed, says: "authentication failed"},
		{name: "wrong bearer token",
			src:  Source{URL: bearer.RepoURL(repo), Auth: &Auth{BearerToken: "wrong-token-42", CACert: bearer.CACert()}},
			kind: ErrAuthFailed, says: "authentication failed"},
		{name: "untrusted certificate",
			src:  Source{URL: basic.RepoURL(repo), Auth: &Auth{Username: "alice", Password: "hunter2-secret"}},
			kind: ErrUntrustedCertificate, says: "ca.crt"},
		{name: "unknown ssh host key",
			src:  Source{URL: sshURL, Auth: sshAuth(key, otherSrv.KnownHosts())},
			kind: ErrUnknownHostKey, says: "not in known_hosts; refusing to connect"},
		{name: "changed ssh host key",
			src:  Source{URL: sshURL, Auth: sshAuth(key, changedKnownHosts)},
			kind: ErrHostKeyMismatch, says: "different key"},
		{name: "ssh identity not authorized",
			src:  Source{URL: sshURL, Auth: sshAuth(strangerKey, sshSrv.KnownHosts())},
			kind: ErrAuthFailed, says: "refused the identity"},
		{name: "ssh without credentials",
			src:  Source{URL: sshURL},
			kind: ErrInvalidSource, says: "known_hosts"},
		{name: "unreachable http server",
			src:  Source{URL: "http://" + closedAddr(t) + "/org/app.git"},
			kind: ErrUnreachable, says: "connection refused"},
		{name: "unreachable ssh server",
			src:  Source{URL: "ssh://git@" + closedAddr(t) + "/org/app.git", Auth: sshAuth(key, sshSrv.KnownHosts())},
			kind: ErrUnreachable, says: "connection refused"},
		{name: "stalled http server",
			src: Source{URL: stalled.RepoURL(repo)}, timeout: 300 * time.Millisecond,
			kind: ErrTimeout, says: "timed out"},
		{name: "stalled ssh server",
			src: Source{URL: "ssh://git@" + stallingServer(t) + "/org/app.git", Auth: sshAuth(key, sshSrv.KnownHosts())}, timeout: 300 * time.Millisecond,
			kind: ErrTimeout, says: "timed out"},
		{name: "repository not found",
			src:  Source{URL: plain.URL + "/org/missing.git"},
			kind: ErrRepositoryNotFound, says: "repository not found"},
		{name: "branch not found",
			src:  Source{URL: plain.RepoURL(repo), Ref: Ref{Branch: "nope"}},
			kind: ErrRefNotFound, says: `branch "nope" does not exist`},
		{name: "file url",
			src:  Source{URL: "file://" + repo.Dir},
			kind: ErrInvalidSource, says: "unsupported url scheme"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			timeout := tc.timeout
			if timeout == 0 {
				timeout = 30 * time.Second
			}
			start := time.Now()
			_, err := Resolve(ctxTimeout(t, timeout), tc.src)
			g.Expect(err).To(HaveOccurred())
			g.Expect(kindOf(t, err)).To(BeIdenticalTo(tc.kind), err.Error())
			g.Expect(err.Error()).To(ContainSubstring(tc.says))
			noSecretIn(g, err, secrets...)
			if tc.timeout > 0 {
				g.Expect(time.Since(start)).To(BeNumerically("<", 5*time.Second), "the deadline is kept")
			}
			t.Log(err)
		})
	}
}

func TestCheckoutTimeout(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	f.repo.Commit(t, "main", map[string]string{"a": "1"})
	rev, err := Resolve(ctxTimeout(t, 10*time.Second), f.src)
	g.Expect(err).NotTo(HaveOccurred())

	release := f.srv.Hold(gittest.UploadPack) // the server lists refs, then stalls on the fetch
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = f.cache.Checkout(ctx, f.src, rev)
	g.Expect(err).To(MatchError(ErrTimeout))
	g.Expect(err.Error()).To(ContainSubstring("timed out"))
	_, cached := f.cache.Path(f.src, rev)
	g.Expect(cached).To(BeFalse())
	// The abandoned fetch is cancelled and cleans up after itself.
	g.Eventually(func() []string { return listDir(f.cache.tmp) }).Should(BeEmpty())
}
