// Package clustertest starts a localcluster for a test and stops it when the test ends.
package clustertest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/converge-gitops/converge/internal/localcluster"
)

// Start brings up a local cluster for tb, stopped by tb.Cleanup; it fails tb on error.
func Start(tb testing.TB, opts localcluster.Options) *localcluster.Cluster {
	tb.Helper()
	if testing.Short() {
		tb.Skip("needs a local cluster: make test")
	}
	c, err := localcluster.Start(context.Background(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := c.Stop(); err != nil {
			tb.Errorf("stopping the local cluster: %v", err)
		}
	})
	return c
}

// CRDDir is the directory of the generated SyncTarget CRD, found from this source file
// so that tests in any package can install it.
func CRDDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "config", "crd", "bases")
}

// Shared is one local cluster shared by the tests of a package: started by the first test
// that asks for it (Get), so that a run of the pure tests alone never starts it, and
// stopped from TestMain (Stop).
type Shared struct {
	opts localcluster.Options
	once sync.Once
	c    *localcluster.Cluster
	err  error
}

// NewShared returns a shared cluster started with opts on first use.
func NewShared(opts localcluster.Options) *Shared { return &Shared{opts: opts} }

// Get returns the cluster, starting it on first use; it skips tb under -short and fails
// it when the cluster could not start.
func (s *Shared) Get(tb testing.TB) *localcluster.Cluster {
	tb.Helper()
	if testing.Short() {
		tb.Skip("needs a local cluster")
	}
	s.once.Do(func() { s.c, s.err = localcluster.Start(context.Background(), s.opts) })
	if s.err != nil {
		tb.Fatal(s.err)
	}
	return s.c
}

// Stop stops the cluster if it was started, and returns code, or 1 when code was 0 and
// stopping failed: TestMain exits with it.
func (s *Shared) Stop(code int) int {
	if s.c == nil {
		return code
	}
	if err := s.c.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the local cluster:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// ParallelUnlessSet sets -test.parallel to n unless the command line set it: for a
// TestMain, after flag.Parse, whose package's parallel tests mostly wait (on a cluster, a
// rollout, a poll) rather than compute.
func ParallelUnlessSet(n int) {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(n))
	}
}
