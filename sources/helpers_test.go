package sources

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/converge-gitops/converge/internal/gittest"
)

// kinds are the failure kinds an error must match exactly one of.
var kinds = []error{
	ErrInvalidSource, ErrAuthFailed, ErrUnknownHostKey, ErrHostKeyMismatch, ErrUntrustedCertificate,
	ErrUnreachable, ErrTimeout, ErrRepositoryNotFound, ErrRefNotFound, ErrLimitExceeded, ErrFetchFailed, ErrVerificationFailed,
}

// kindOf returns the one kind err matches, failing the test when it matches none or several.
func kindOf(t testing.TB, err error) error {
	t.Helper()
	var found []error
	for _, k := range kinds {
		if errors.Is(err, k) {
			found = append(found, k)
		}
	}
	if len(found) != 1 {
		t.Fatalf("error %q matches %d kinds: %v", err, len(found), found)
	}
	return found[0]
}

// fixture is a repository served over plain HTTP, with a cache.
type fixture struct {
	root  string
	repo  *gittest.Repo
	srv   *gittest.HTTPServer
	cache *Cache
	src   Source
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{root: t.TempDir()}
	f.repo = gittest.NewRepo(t, f.root, "org/app")
	f.srv = gittest.NewHTTPServer(t, f.root, gittest.HTTPOptions{})
	f.cache = newTestCache(t, CacheOptions{})
	f.src = Source{URL: f.srv.RepoURL(f.repo), Ref: Ref{Branch: "main"}}
	return f
}

func newTestCache(t *testing.T, opts CacheOptions) *Cache {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	c, err := NewCache(opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// readTree returns path → content (or "-> target" for symlinks) of every file under dir.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[filepath.ToSlash(rel)] = "-> " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[filepath.ToSlash(rel)] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// listDir returns the names in dir, sorted; nil when it does not exist.
func listDir(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// stallingServer accepts TCP connections on loopback and never answers: a server that hangs.
func stallingServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var conns []net.Conn
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// noSecretIn asserts that none of the secrets appears in the error's message.
func noSecretIn(g Gomega, err error, secrets ...string) {
	for _, s := range secrets {
		g.Expect(err.Error()).NotTo(ContainSubstring(s), "error leaks a credential")
	}
}
