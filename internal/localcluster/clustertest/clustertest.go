// Package clustertest starts a localcluster for a test and stops it when the test ends.
package clustertest

import (
	"context"
	"path/filepath"
	"runtime"
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
