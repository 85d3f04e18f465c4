package gittest

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/crypto/ssh"
)

// clone runs the system git clone against url and returns its output and error.
func clone(t *testing.T, url string, extraEnv ...string) (string, error) {
	dst := filepath.Join(t.TempDir(), "clone")
	cmd := exec.Command("git", "clone", "-q", url, dst)
	cmd.Env = append(env(), extraEnv...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestRepoHelpers(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	root := t.TempDir()
	r := NewRepo(t, root, "org/app")
	g.Expect(r.Name).To(Equal("org/app.git"))

	c1 := r.Commit(t, "main", map[string]string{"a.txt": "a", "dir/b.txt": "b"})
	c2 := r.CommitChanges(t, "main",
		Change{Path: "a.txt", Delete: true},
		Change{Path: "link", Content: "dir/b.txt", Symlink: true},
		Change{Path: "run.sh", Content: "#!/bin/sh\n", Executable: true})
	g.Expect(r.Head(t, "main")).To(Equal(c2))
	g.Expect(Git(t, r.Dir, "rev-parse", c2+"^")).To(Equal(c1))
	g.Expect(Git(t, r.Dir, "ls-tree", "-r", "--format=%(objectmode) %(path)", c2)).To(Equal(
		"100644 dir/b.txt\n120000 link\n100755 run.sh"))

	// A force-push replaces history; the old tip is no ancestor of the new one.
	c3 := r.CommitOnto(t, "main", c1, Change{Path: "c.txt", Content: "c"})
	g.Expect(r.Head(t, "main")).To(Equal(c3))
	g.Expect(Git(t, r.Dir, "rev-parse", c3+"^")).To(Equal(c1))
	orphan := r.CommitOnto(t, "orphan", "", Change{Path: "x", Content: "x"})
	_, err := run(r.Dir, nil, "rev-parse", "--verify", "-q", orphan+"^")
	g.Expect(err).To(HaveOccurred(), "no parent")

	tagObj := r.AnnotatedTag(t, "v1.0.0", c1)
	g.Expect(tagObj).NotTo(Equal(c1))
	g.Expect(Git(t, r.Dir, "rev-parse", "v1.0.0^{commit}")).To(Equal(c1))
	r.Tag(t, "v0.9.0", c1)
	r.SetRef(t, "refs/pull/7/head", c2)
	g.Expect(Git(t, r.Dir, "rev-parse", "refs/pull/7/head")).To(Equal(c2))
	r.DeleteBranch(t, "orphan")
	r.DeleteTag(t, "v0.9.0")
	g.Expect(Git(t, r.Dir, "for-each-ref", "--format=%(refname)")).To(Equal(
		"refs/heads/main\nrefs/pull/7/head\nrefs/tags/v1.0.0"))
}

func TestHTTPServer(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	root := t.TempDir()
	r := NewRepo(t, root, "org/app")
	r.Commit(t, "main", map[string]string{"a": "1"})

	open := NewHTTPServer(t, root, HTTPOptions{})
	g.Expect(open.URL).To(HavePrefix("http://127.0.0.1:"))
	out, err := clone(t, open.RepoURL(r))
	g.Expect(err).NotTo(HaveOccurred(), out)
	st := open.Stats()
	g.Expect(st.InfoRefs).To(BeEquivalentTo(1))
	g.Expect(st.UploadPack).To(BeNumerically(">=", 1))
	open.ResetStats()
	g.Expect(open.Stats().InfoRefs).To(BeZero())

	basic := NewHTTPServer(t, root, HTTPOptions{Username: "alice", Password: "pw", BearerToken: "tok"})
	u := strings.Replace(basic.RepoURL(r), "http://", "http://alice:pw@", 1)
	out, err = clone(t, u)
	g.Expect(err).NotTo(HaveOccurred(), out)
	_, err = clone(t, strings.Replace(basic.RepoURL(r), "http://", "http://alice:nope@", 1))
	g.Expect(err).To(HaveOccurred())
	g.Expect(basic.Stats().Unauthorized).To(BeNumerically(">=", 1))
	req, _ := http.NewRequest(http.MethodGet, basic.RepoURL(r)+"/info/refs?service=git-upload-pack", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))

	tls := NewHTTPServer(t, root, HTTPOptions{TLS: true})
	g.Expect(tls.URL).To(HavePrefix("https://127.0.0.1:"))
	ca := filepath.Join(t.TempDir(), "ca.crt")
	g.Expect(os.WriteFile(ca, tls.CACert(), 0o600)).To(Succeed())
	out, err = clone(t, tls.RepoURL(r), "GIT_SSL_CAINFO="+ca)
	g.Expect(err).NotTo(HaveOccurred(), out)
	_, err = clone(t, tls.RepoURL(r))
	g.Expect(err).To(HaveOccurred(), "the certificate is not trusted without ca.crt")
}

func TestHTTPServerHold(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	root := t.TempDir()
	r := NewRepo(t, root, "org/app")
	r.Commit(t, "main", map[string]string{"a": "1"})
	s := NewHTTPServer(t, root, HTTPOptions{})
	release := s.Hold(InfoRefs)
	done := make(chan error, 1)
	go func() { _, err := clone(t, s.RepoURL(r)); done <- err }()
	g.Eventually(s.InFlight, 30*time.Second).Should(BeEquivalentTo(1)) // git starts as a process of its own
	g.Consistently(done, 200*time.Millisecond).ShouldNot(Receive())
	release()
	g.Eventually(done, 30*time.Second).Should(Receive(BeNil()))
	g.Expect(s.InFlight()).To(BeZero())
}

func TestSSHServer(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	root := t.TempDir()
	r := NewRepo(t, root, "org/app")
	r.Commit(t, "main", map[string]string{"a": "1"})
	key, pub := NewSSHKey(t, "")
	s := NewSSHServer(t, root, pub)
	g.Expect(s.Addr).To(HavePrefix("127.0.0.1:"))
	g.Expect(string(s.KnownHosts())).To(HavePrefix("[127.0.0.1]:"))
	g.Expect(s.RepoURL(r)).To(Equal("ssh://git@" + s.Addr + "/org/app.git"))

	signer, err := ssh.ParsePrivateKey(key)
	g.Expect(err).NotTo(HaveOccurred())
	hostKey := ssh.FixedHostKey(s.HostKey)
	client, err := ssh.Dial("tcp", s.Addr, &ssh.ClientConfig{User: "git", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: hostKey})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = client.Close() }()

	sess, err := client.NewSession()
	g.Expect(err).NotTo(HaveOccurred())
	sess.Stdin = strings.NewReader("0000") // end the ref advertisement exchange
	out, err := sess.Output("git-upload-pack '/org/app.git'")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(out)).To(ContainSubstring("refs/heads/main"))
	g.Expect(s.Stats().UploadPack).To(BeEquivalentTo(1))

	for _, cmd := range []string{"ls /", "git-upload-pack '/../../etc'", "git-upload-pack '/org/missing.git'"} {
		sess, err := client.NewSession()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(sess.Run(cmd)).To(HaveOccurred(), cmd)
	}

	otherKey, _ := NewSSHKey(t, "")
	otherSigner, err := ssh.ParsePrivateKey(otherKey)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = ssh.Dial("tcp", s.Addr, &ssh.ClientConfig{User: "git", Auth: []ssh.AuthMethod{ssh.PublicKeys(otherSigner)}, HostKeyCallback: hostKey})
	g.Expect(err).To(HaveOccurred())
	g.Eventually(func() int64 { return s.Stats().AuthFailures }).Should(BeEquivalentTo(1))
}

func TestParseCommand(t *testing.T) {
	t.Parallel()
	s := &SSHServer{root: "/srv/git"}
	for _, tc := range []struct {
		cmd, service, dir string
		ok                bool
	}{
		{"git-upload-pack '/org/app.git'", "git-upload-pack", "/srv/git/org/app.git", true},
		{"git-receive-pack 'org/app.git'", "git-receive-pack", "/srv/git/org/app.git", true},
		{`git-upload-pack '/it'\''s.git'`, "git-upload-pack", "/srv/git/it's.git", true},
		{"git-upload-pack '/../../etc/passwd'", "git-upload-pack", "/srv/git/etc/passwd", true}, // cleaned inside the root
		{"sh -c 'id'", "", "", false},
		{"git-upload-pack", "", "", false},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			g := NewWithT(t)
			service, dir, ok := s.parseCommand(tc.cmd)
			g.Expect(ok).To(Equal(tc.ok))
			if ok {
				g.Expect(service).To(Equal(tc.service))
				g.Expect(dir).To(Equal(tc.dir))
			}
		})
	}
}
