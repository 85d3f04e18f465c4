// Package localcluster runs a real Kubernetes control plane on loopback from the binaries
// that `make controlplane` builds into bin/k8s: etcd and kube-apiserver through envtest and,
// when asked, kube-controller-manager, kube-scheduler and kwok with fake Ready nodes, so
// that Deployments really roll out. The tests of sync, the e2e suite, the benchmarks and
// `make run` all start their clusters here.
//
// Every process is started as a child of the caller and bound to 127.0.0.1 on random ports.
// Stop ends them all; a watchdog process ends them too if the caller dies first (a panic,
// a test timeout, SIGKILL or Ctrl-C), so no cluster outlives the process that started it.
package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Binaries a full local cluster needs, all found in the binary directory.
var binaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok"}

// StagesFile is the kwok Stage configuration `make controlplane` writes beside the binaries.
const StagesFile = "kwok-stages.yaml"

// Options say what to start.
type Options struct {
	// BinDir holds the control-plane binaries; empty means BinDir().
	BinDir string
	// CRDs and CRDDirectoryPaths are installed (and waited for) once the API server is up.
	CRDs              []*apiextensionsv1.CustomResourceDefinition
	CRDDirectoryPaths []string
	// Workloads starts kube-controller-manager and kube-scheduler, so that Deployments,
	// ReplicaSets, Jobs and the like are acted on, and kwok to run their pods.
	Workloads bool
	// Nodes is the number of fake kwok nodes to create and wait Ready for (needs Workloads).
	Nodes int
	// StartTimeout bounds the start of each component (default 60s).
	StartTimeout time.Duration
}

// Cluster is a running local cluster.
type Cluster struct {
	// Config talks to the API server as a member of system:masters.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file for Config, usable by other processes.
	Kubeconfig string
	// Dir holds the cluster's data, certificates and component logs; Stop removes it.
	Dir string

	binDir   string
	env      *envtest.Environment
	watchdog *watchdog

	mu    sync.Mutex
	procs []*component
	done  bool
	// apiserver is the kube-apiserver StartAPIServer started in place of envtest's.
	apiserver *component
	// stoppedArgs is the command line of the kube-apiserver StopAPIServer stopped, until
	// StartAPIServer starts it again.
	stoppedArgs []string
}

// component is a process started by the cluster itself (not by envtest).
type component struct {
	name string
	cmd  *exec.Cmd
	exit chan struct{}
	err  error
}

// Start brings a cluster up. On error nothing is left running.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.BinDir == "" {
		if opts.BinDir, err = BinDir(); err != nil {
			return nil, err
		}
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 60 * time.Second
	}
	if opts.Nodes > 0 && !opts.Workloads {
		return nil, errors.New("localcluster: Nodes needs Workloads")
	}
	if err := checkBinaries(opts.BinDir, opts.Workloads); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "converge-cluster-")
	if err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	c := &Cluster{Dir: dir, binDir: opts.BinDir}
	defer func() {
		if err != nil {
			_ = c.Stop()
		}
	}()
	if c.watchdog, err = startWatchdog(); err != nil {
		return nil, err
	}
	if err := c.startAPIServer(opts); err != nil {
		return nil, err
	}
	if !opts.Workloads {
		return c, nil
	}
	if err := c.startWorkloadComponents(ctx, opts); err != nil {
		return nil, err
	}
	return c, nil
}

func checkBinaries(binDir string, workloads bool) error {
	need := binaries[:3]
	if workloads {
		need = binaries
	}
	for _, b := range need {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			return fmt.Errorf("localcluster: %s not found in %s: run 'make controlplane' first", b, binDir)
		}
	}
	if workloads {
		if _, err := os.Stat(filepath.Join(binDir, StagesFile)); err != nil {
			return fmt.Errorf("localcluster: %s not found in %s: run 'make controlplane' first", StagesFile, binDir)
		}
	}
	return nil
}

func (c *Cluster) startAPIServer(opts Options) error {
	etcdLog, err := c.logFile("etcd")
	if err != nil {
		return err
	}
	apiLog, err := c.logFile("kube-apiserver")
	if err != nil {
		return err
	}
	useExisting := false
	c.env = &envtest.Environment{
		BinaryAssetsDirectory:    opts.BinDir,
		CRDs:                     opts.CRDs,
		CRDDirectoryPaths:        opts.CRDDirectoryPaths,
		ErrorIfCRDPathMissing:    true,
		UseExistingCluster:       &useExisting,
		ControlPlaneStartTimeout: opts.StartTimeout,
		ControlPlaneStopTimeout:  20 * time.Second,
	}
	c.env.ControlPlane.Etcd = &envtest.Etcd{
		Path:    filepath.Join(opts.BinDir, "etcd"),
		DataDir: filepath.Join(c.Dir, "etcd"),
		Out:     etcdLog, Err: etcdLog,
	}
	c.env.ControlPlane.APIServer = &envtest.APIServer{
		Path:    filepath.Join(opts.BinDir, "kube-apiserver"),
		CertDir: filepath.Join(c.Dir, "apiserver"),
		Out:     apiLog, Err: apiLog,
	}
	// envtest's default Service range is a /24: a benchmark of 1 000 SyncTargets with a
	// Service each would run out of ClusterIPs.
	c.env.ControlPlane.APIServer.Configure().Set("service-cluster-ip-range", "10.96.0.0/16")
	c.env.ControlPlane.KubectlPath = filepath.Join(opts.BinDir, "kubectl")
	for _, d := range []string{"etcd", "apiserver"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o700); err != nil {
			return fmt.Errorf("localcluster: %w", err)
		}
	}

	_, startErr := c.env.Start()
	// Whatever happened, hand every process envtest started to the watchdog.
	c.guardEnvtestProcesses()
	if startErr != nil {
		return fmt.Errorf("localcluster: starting etcd and kube-apiserver: %w%s", startErr, c.tail("kube-apiserver"))
	}

	admin, err := c.env.AddUser(envtest.User{Name: "converge-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("localcluster: adding the admin user: %w", err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return fmt.Errorf("localcluster: writing the kubeconfig: %w", err)
	}
	c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, kubeconfig, 0o600); err != nil {
		return fmt.Errorf("localcluster: %w", err)
	}
	c.Config = rest.CopyConfig(admin.Config())
	c.Config.QPS, c.Config.Burst = 200, 400
	return nil
}

func (c *Cluster) startWorkloadComponents(ctx context.Context, opts Options) error {
	k := c.Kubeconfig
	common := []string{"--kubeconfig=" + k, "--authentication-kubeconfig=" + k, "--authorization-kubeconfig=" + k,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0"}
	if err := c.run("kube-controller-manager", append(common,
		"--controllers=*,-serviceaccount-token",
		"--use-service-account-credentials=false",
		"--concurrent-deployment-syncs=10", "--concurrent-replicaset-syncs=10",
		// The default client limit (20 requests/s) makes 100 Deployments take ~15 s to
		// get a status: a cluster of its own, it may use the API server as fast as it can.
		"--kube-api-qps=200", "--kube-api-burst=400",
	)...); err != nil {
		return err
	}
	if err := c.run("kube-scheduler", common...); err != nil {
		return err
	}
	if err := c.run("kwok",
		"--kubeconfig="+k,
		"--manage-all-nodes=true",
		"--config="+filepath.Join(opts.BinDir, StagesFile),
		"--server-address=127.0.0.1:0",
	); err != nil {
		return err
	}

	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return fmt.Errorf("localcluster: %w", err)
	}
	for i := range opts.Nodes {
		if _, err := cs.CoreV1().Nodes().Create(ctx, fakeNode(fmt.Sprintf("kwok-node-%d", i)), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("localcluster: creating node %d: %w", i, err)
		}
	}
	// The controller-manager is working once it created the default ServiceAccount,
	// and kwok once every node reports Ready.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, opts.StartTimeout, true, func(ctx context.Context) (bool, error) {
		if err := c.exited(); err != nil {
			return false, err
		}
		if _, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return false, nil
		}
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, n := range nodes.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready >= opts.Nodes, nil
	})
	if err != nil {
		return fmt.Errorf("localcluster: waiting for the controller-manager and %d Ready nodes: %w%s%s",
			opts.Nodes, err, c.tail("kube-controller-manager"), c.tail("kwok"))
	}
	return nil
}

func fakeNode(name string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{"type": "kwok", corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64"},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
		},
	}
}

// run starts one of the cluster's own components from the binary directory.
func (c *Cluster) run(name string, args ...string) error {
	p, err := c.spawn(name, args...)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return nil
}

// spawn starts a binary of the binary directory, logging to <name>.log in the cluster
// directory, and hands it to the watchdog.
func (c *Cluster) spawn(name string, args ...string) (*component, error) {
	log, err := c.logFile(name)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(c.binDir, name), args...)
	cmd.Dir = c.Dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = childAttrs()
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("localcluster: starting %s: %w", name, err)
	}
	c.watchdog.guard(cmd.Process.Pid)
	p := &component{name: name, cmd: cmd, exit: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = log.Close()
		close(p.exit)
	}()
	return p, nil
}

// exited reports a component that stopped on its own.
func (c *Cluster) exited() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		select {
		case <-p.exit:
			return fmt.Errorf("localcluster: %s exited: %v%s", p.name, p.err, c.tail(p.name))
		default:
		}
	}
	return nil
}

// Stop ends every process of the cluster and removes its directory. It is safe to call
// more than once.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		return nil
	}
	c.done = true
	procs := c.procs
	apiserver := c.apiserver
	c.mu.Unlock()

	var errs []error
	// Components first, in reverse order, then the API server and etcd.
	for i := len(procs) - 1; i >= 0; i-- {
		errs = append(errs, stopProcess(procs[i]))
	}
	if apiserver != nil {
		errs = append(errs, stopProcess(apiserver))
	}
	if c.env != nil {
		if err := c.env.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("localcluster: stopping the API server: %w", err))
		}
	}
	if c.watchdog != nil {
		c.watchdog.close()
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// KubeconfigBytes returns the content of the kubeconfig file.
func (c *Cluster) KubeconfigBytes() ([]byte, error) {
	return os.ReadFile(c.Kubeconfig)
}

// BinDir finds the control-plane binaries: $KUBEBUILDER_ASSETS when set, otherwise
// bin/k8s at the root of the converge module containing the working directory.
func BinDir() (string, error) {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return filepath.Abs(d)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(d, "bin", "k8s")); err == nil {
				return filepath.Join(d, "bin", "k8s"), nil
			}
		}
		if filepath.Dir(d) == d {
			return "", errors.New("localcluster: no bin/k8s found above the working directory and KUBEBUILDER_ASSETS is unset: run 'make controlplane'")
		}
	}
}
