package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/gittest"
	"github.com/converge-gitops/converge/internal/localcluster"
	"github.com/converge-gitops/converge/internal/localcluster/clustertest"
)

// The suite shares, read-only once TestMain has set it up: the converge binary, one local
// cluster (controller-manager, scheduler, 3 kwok nodes), one git server over HTTP with basic
// auth and one over SSH (both serving every repository under gitRoot), and one `converge
// serve` daemon that serves every SyncTarget without the shardLabel. Scenarios that kill or
// restart daemons label their SyncTargets with shardLabel and run daemons of their own.
var suite struct {
	binary     string
	cluster    *localcluster.Cluster
	k8s        client.Client
	gitRoot    string
	http       *gittest.HTTPServer
	gitUser    string
	gitPass    string
	ssh        *gittest.SSHServer
	sshKey     []byte
	daemon     *daemon
	webhookURL string
	logDir     string // daemon logs, kept when the suite fails
}

// shardLabel keeps a SyncTarget away from the shared daemon.
const shardLabel = "e2e-shard"

// defaultParallel is how many scenarios run at once unless -test.parallel says otherwise:
// they mostly wait on the daemon and the cluster, so more than the 2 cores of CI.
const defaultParallel = 16

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", fmt.Sprint(defaultParallel))
	}
	if testing.Short() {
		fmt.Println("e2e: skipped in -short mode")
		return 0
	}

	ctrl.SetLogger(logr.Discard())
	started := time.Now()
	logDir, err := os.MkdirTemp("", "converge-e2e-logs-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	suite.logDir = logDir
	code := 1
	defer func() {
		if code == 0 {
			_ = os.RemoveAll(logDir)
		} else {
			fmt.Printf("e2e: the daemons' logs are in %s\n", logDir)
		}
	}()
	// The shared remote cluster is stopped once the daemon, whose watches it serves, is.
	defer stopSharedRemote()
	env := &suiteTB{}
	defer env.cleanup()
	if err := env.run(setUp); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: setting up the suite: %v\n", err)
		return 1
	}
	fmt.Printf("e2e: suite ready in %s (binary, cluster with 3 kwok nodes, git servers, daemon)\n",
		time.Since(started).Round(100*time.Millisecond))
	code = m.Run()
	results.print(os.Stdout, time.Since(started))
	return code
}

// setUp builds the binary and starts what the scenarios share. Whatever it started is
// stopped by tb's cleanups, in reverse order.
func setUp(tb *suiteTB) {
	// The cluster starts while the binary builds.
	var wg sync.WaitGroup
	var clusterErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		suite.cluster, clusterErr = localcluster.Start(context.Background(), localcluster.Options{
			Workloads: true, Nodes: 3, CRDDirectoryPaths: []string{clustertest.CRDDir()},
		})
	}()
	clusterUp := func() {
		wg.Wait()
		if suite.cluster != nil {
			tb.Cleanup(func() {
				if err := suite.cluster.Stop(); err != nil {
					fmt.Fprintf(os.Stderr, "e2e: stopping the cluster: %v\n", err)
				}
			})
		}
		if clusterErr != nil {
			tb.Fatalf("starting the local cluster: %v", clusterErr)
		}
	}
	dir := tb.TempDir()
	suite.binary = filepath.Join(dir, "converge")
	build := exec.Command("go", "build", "-o", suite.binary, "github.com/converge-gitops/converge/cmd/converge")
	if out, err := build.CombinedOutput(); err != nil {
		clusterUp()
		tb.Fatalf("building converge: %v\n%s", err, out)
	}
	suite.gitRoot = tb.TempDir()
	suite.gitUser, suite.gitPass = "e2e", randomString()
	suite.http = gittest.NewHTTPServer(tb, suite.gitRoot, gittest.HTTPOptions{Username: suite.gitUser, Password: suite.gitPass})
	key, pub := gittest.NewSSHKey(tb, "")
	suite.sshKey = key
	suite.ssh = gittest.NewSSHServer(tb, suite.gitRoot, pub)
	clusterUp()

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		tb.Fatal(err)
	}
	if err := convergev1.AddToScheme(scheme); err != nil {
		tb.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		tb.Fatal(err)
	}
	c, err := client.New(suite.cluster.Config, client.Options{Scheme: scheme})
	if err != nil {
		tb.Fatal(err)
	}
	suite.k8s = c

	webhook := freeAddr(tb)
	suite.webhookURL = "http://" + webhook
	// The remote-cluster scenarios deploy to control planes on this machine (127.0.0.1),
	// which the daemon refuses unless told otherwise.
	suite.daemon = startDaemon(tb, "shared", "--watch-label-selector", "!"+shardLabel,
		"--webhook-bind-address", webhook, "--concurrency", "16", "--allow-loopback-clusters")
	if err := suite.daemon.waitReady(60 * time.Second); err != nil {
		tb.Fatal(err)
	}
}

func randomString() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// suiteTB lets TestMain use helpers written for tests (gittest, the daemon helpers): Fatal
// ends the set-up with an error, Cleanup runs when the suite ends. Methods it does not
// override are not used by those helpers.
type suiteTB struct {
	testing.TB // nil: any method not overridden below panics

	mu       sync.Mutex
	cleanups []func()
}

type fatal struct{ msg string }

func (s *suiteTB) run(f func(*suiteTB)) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if f, ok := r.(fatal); ok {
				err = errors.New(f.msg)
				return
			}
			panic(r)
		}
	}()
	f(s)
	return nil
}

func (s *suiteTB) Helper()                           {}
func (s *suiteTB) Name() string                      { return "e2e" }
func (s *suiteTB) Fatal(args ...any)                 { panic(fatal{fmt.Sprint(args...)}) }
func (s *suiteTB) Fatalf(format string, args ...any) { panic(fatal{fmt.Sprintf(format, args...)}) }
func (s *suiteTB) Errorf(format string, args ...any) { s.Fatalf(format, args...) }
func (s *suiteTB) Logf(format string, args ...any) {
	fmt.Printf("e2e: "+format+"\n", args...)
}

func (s *suiteTB) Cleanup(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanups = append(s.cleanups, f)
}

func (s *suiteTB) TempDir() string {
	dir, err := os.MkdirTemp("", "converge-e2e-")
	if err != nil {
		s.Fatal(err)
	}
	s.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func (s *suiteTB) cleanup() {
	s.mu.Lock()
	fs := s.cleanups
	s.cleanups = nil
	s.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// httpGet is a GET with a short timeout, for probes.
func httpGet(url string) (int, error) {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}
