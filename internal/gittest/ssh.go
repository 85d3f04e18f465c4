package gittest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// SSHStats counts what an SSHServer saw.
type SSHStats struct {
	// Connections counts TCP connections accepted.
	Connections int64
	// AuthFailures counts connections whose client could not authenticate.
	AuthFailures int64
	// UploadPack counts git-upload-pack runs: one per ref listing or fetch.
	UploadPack int64
	// ReceivePack counts git-receive-pack runs: pushes.
	ReceivePack int64
}

// SSHServer serves every repository under its root over SSH on 127.0.0.1, running the system
// git-upload-pack and git-receive-pack for clients that authenticate with an authorized key.
type SSHServer struct {
	// Addr is host:port, e.g. 127.0.0.1:41235.
	Addr string
	// HostKey is the server's public host key.
	HostKey ssh.PublicKey

	root   string
	config *ssh.ServerConfig
	ln     net.Listener
	wg     sync.WaitGroup

	mu         sync.Mutex
	authorized [][]byte
	conns      map[net.Conn]struct{}
	closed     bool

	connections, authFailures, uploadPack, receivePack atomic.Int64
}

// NewSSHKey generates an ed25519 key pair and returns the private key as an OpenSSH PEM
// (encrypted with passphrase when it is not empty) and the public key.
func NewSSHKey(t testing.TB, passphrase string) (privatePEM []byte, public ssh.PublicKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var block *pem.Block
	if passphrase == "" {
		block, err = ssh.MarshalPrivateKey(priv, "gittest")
	} else {
		block, err = ssh.MarshalPrivateKeyWithPassphrase(priv, "gittest", []byte(passphrase))
	}
	if err != nil {
		t.Fatal(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(block), sshPub
}

// NewSSHServer starts an SSH git server for the repositories under root that accepts the given
// client keys. It generates its own host key (see KnownHosts) and is stopped when the test ends.
func NewSSHServer(t testing.TB, root string, authorized ...ssh.PublicKey) *SSHServer {
	t.Helper()
	_, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &SSHServer{
		Addr:    ln.Addr().String(),
		HostKey: signer.PublicKey(),
		root:    root,
		ln:      ln,
		conns:   map[net.Conn]struct{}{},
	}
	for _, k := range authorized {
		s.authorized = append(s.authorized, k.Marshal())
	}
	s.config = &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			for _, k := range s.authorized {
				if bytes.Equal(k, key.Marshal()) {
					return &ssh.Permissions{}, nil
				}
			}
			return nil, errors.New("key not authorized")
		},
	}
	s.config.AddHostKey(signer)

	s.wg.Add(1)
	go s.acceptLoop()
	t.Cleanup(s.close)
	return s
}

// KnownHosts returns the known_hosts line for this server, e.g. "[127.0.0.1]:41235 ssh-ed25519 …".
func (s *SSHServer) KnownHosts() []byte {
	return []byte(knownhosts.Line([]string{s.Addr}, s.HostKey) + "\n")
}

// RepoURL is the ssh:// clone URL of r on this server, with user git.
func (s *SSHServer) RepoURL(r *Repo) string {
	return "ssh://git@" + s.Addr + "/" + r.Name
}

// Authorize adds a client key the server accepts.
func (s *SSHServer) Authorize(key ssh.PublicKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.authorized = append(s.authorized, key.Marshal())
}

// Stats returns what the server saw so far.
func (s *SSHServer) Stats() SSHStats {
	return SSHStats{
		Connections:  s.connections.Load(),
		AuthFailures: s.authFailures.Load(),
		UploadPack:   s.uploadPack.Load(),
		ReceivePack:  s.receivePack.Load(),
	}
}

func (s *SSHServer) close() {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	_ = s.ln.Close()
	s.wg.Wait()
}

func (s *SSHServer) acceptLoop() {
	defer s.wg.Done()
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = conn.Close()
			return
		}
		s.conns[conn] = struct{}{}
		s.mu.Unlock()
		s.connections.Add(1)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveConn(conn)
			s.mu.Lock()
			delete(s.conns, conn)
			s.mu.Unlock()
			_ = conn.Close()
		}()
	}
}

func (s *SSHServer) serveConn(conn net.Conn) {
	sconn, chans, reqs, err := ssh.NewServerConn(conn, s.config)
	if err != nil {
		s.authFailures.Add(1)
		return
	}
	defer func() { _ = sconn.Close() }()
	go ssh.DiscardRequests(reqs)
	var wg sync.WaitGroup
	defer wg.Wait()
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, chReqs, err := nc.Accept()
		if err != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serveSession(ch, chReqs)
		}()
	}
}

func (s *SSHServer) serveSession(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer func() { _ = ch.Close() }()
	for req := range reqs {
		if req.Type != "exec" {
			// env, pty-req, shell…: refused, as git hosts do.
			_ = req.Reply(false, nil)
			continue
		}
		var payload struct{ Command string }
		if err := ssh.Unmarshal(req.Payload, &payload); err != nil {
			_ = req.Reply(false, nil)
			return
		}
		service, dir, ok := s.parseCommand(payload.Command)
		if !ok {
			_ = req.Reply(false, nil)
			return
		}
		_ = req.Reply(true, nil)
		status := s.runService(ch, service, dir)
		_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{status}))
		return
	}
}

// parseCommand reads "git-upload-pack '/org/app.git'" into the service and the repository
// directory, refusing anything outside the root.
func (s *SSHServer) parseCommand(cmd string) (service, dir string, ok bool) {
	service, arg, found := strings.Cut(cmd, " ")
	if !found || (service != "git-upload-pack" && service != "git-receive-pack") {
		return "", "", false
	}
	arg = strings.TrimSpace(arg)
	if len(arg) >= 2 && arg[0] == '\'' && arg[len(arg)-1] == '\'' {
		arg = arg[1 : len(arg)-1]
		arg = strings.NewReplacer(`'\''`, `'`, `'\!'`, `!`).Replace(arg)
	}
	rel := filepath.Clean("/" + strings.TrimPrefix(arg, "~"))
	dir = filepath.Join(s.root, rel)
	if dir != s.root && !strings.HasPrefix(dir, s.root+string(filepath.Separator)) {
		return "", "", false
	}
	return service, dir, true
}

func (s *SSHServer) runService(ch ssh.Channel, service, dir string) uint32 {
	sub := strings.TrimPrefix(service, "git-")
	if sub == "upload-pack" {
		s.uploadPack.Add(1)
	} else {
		s.receivePack.Add(1)
	}
	cmd := exec.Command("git", sub, dir)
	cmd.Env = env()
	cmd.Stdout = ch
	cmd.Stderr = ch.Stderr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return 1
	}
	if err := cmd.Start(); err != nil {
		_, _ = io.WriteString(ch.Stderr(), "fatal: "+err.Error()+"\n")
		return 1
	}
	// Copy the client's input without waiting for its EOF: git exits when it has read what it
	// needs, and a client may keep its side open until it sees the exit status.
	go func() {
		_, _ = io.Copy(stdin, ch)
		_ = stdin.Close()
	}()
	if err := cmd.Wait(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return uint32(ee.ExitCode())
		}
		return 1
	}
	return 0
}
