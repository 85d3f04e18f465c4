package diff

import (
	"context"
	"fmt"
	"os"
	gosync "sync"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/localcluster"
	"github.com/converge-gitops/converge/internal/localcluster/clustertest"
	"github.com/converge-gitops/converge/sync/render"
)

// The tests of Compute share one API server (no controllers), started by the first test
// that needs it and stopped by TestMain; each test works in namespaces of its own. The
// pure tests never start it.
var shared struct {
	once    gosync.Once
	cluster *localcluster.Cluster
	client  client.Client
	err     error
}

func TestMain(m *testing.M) {
	render.ServeWorkerIfAsked() // this binary is the render worker of the renders under test
	os.Exit(func() int {
		defer func() {
			if shared.cluster != nil {
				if err := shared.cluster.Stop(); err != nil {
					fmt.Fprintln(os.Stderr, "stopping the local cluster:", err)
				}
			}
		}()
		return m.Run()
	}())
}

// cluster returns a client of the shared API server, starting it on first use.
func cluster(t *testing.T) client.Client {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a local cluster: make test")
	}
	shared.once.Do(func() {
		shared.cluster, shared.err = localcluster.Start(context.Background(), localcluster.Options{
			CRDDirectoryPaths: []string{clustertest.CRDDir()},
		})
		if shared.err != nil {
			return
		}
		scheme := runtime.NewScheme()
		_ = clientgoscheme.AddToScheme(scheme)
		_ = convergev1.AddToScheme(scheme)
		shared.client, shared.err = client.New(shared.cluster.Config, client.Options{Scheme: scheme})
	})
	if shared.err != nil {
		t.Fatalf("local cluster: %v", shared.err)
	}
	return shared.client
}
