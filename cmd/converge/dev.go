package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/config"
	"github.com/converge-gitops/converge/internal/localcluster"
)

// devOptions are the flags of `converge dev`.
type devOptions struct {
	nodes   int
	workDir string
}

func newDevCommand() *cobra.Command {
	o := devOptions{}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run converge end to end on this machine: cluster, git server, demo repo, daemon",
		Long: `dev is what 'make run' runs. With KUBECONFIG unset it starts a local Kubernetes
cluster on loopback (etcd, kube-apiserver, controller-manager, scheduler and kwok nodes,
built by 'make controlplane'); with KUBECONFIG set it uses that cluster. Either way it
installs the converge CRD, serves a demo repository over a loopback git server, creates
a SyncTarget following it and runs 'converge serve' until Ctrl-C. Commit in the demo
repository and watch the change deploy.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return o.run(ctx, cmd)
		},
	}
	cmd.Flags().IntVar(&o.nodes, "nodes", 3, "fake kwok nodes in the local cluster")
	cmd.Flags().StringVar(&o.workDir, "dir", filepath.Join("bin", "dev"), "where the demo repository and the kubeconfig go")
	return cmd
}

func (o *devOptions) run(ctx context.Context, cmd *cobra.Command) error {
	out := cmd.OutOrStdout()
	say := func(format string, args ...any) { _, _ = fmt.Fprintf(out, format+"\n", args...) }
	dir, err := filepath.Abs(o.workDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	kubeconfig, cfg, stopCluster, err := o.cluster(ctx, dir, say)
	if err != nil {
		return err
	}
	defer stopCluster()

	repo := filepath.Join(dir, "demo")
	if err := initDemoRepo(ctx, repo); err != nil {
		return err
	}
	url, stopGit, err := serveGit(dir)
	if err != nil {
		return err
	}
	defer stopGit()
	if err := createDemoTarget(ctx, cfg, url+"/demo/.git"); err != nil {
		return err
	}

	logPath := filepath.Join(dir, "converge.log")
	serve, uiURL, closeLog, err := startDevDaemon(ctx, dir, kubeconfig, logPath)
	if err != nil {
		return err
	}
	defer closeLog()
	say(`
converge is running.
  cluster:     export KUBECONFIG=%s   (kubectl is bin/k8s/kubectl)
  demo repo:   %s   (served at %s/demo/.git)
  SyncTarget:  default/demo follows branch main, path deploy, into namespace demo, every 10s
  logs:        %s   (the daemon's, as JSON)

Try:
  kubectl get synctargets -A; kubectl -n demo get deploy,svc,cm
  cd %s && sed -i 's/replicas: 2/replicas: 3/' deploy/deployment.yaml && git commit -qam 'scale web'
  ... and within ~10s the Deployment has 3 replicas.
  web UI:      %s   (follows it live)
Ctrl-C stops everything. Each sync prints a line below.
`, kubeconfig, repo, url, logPath, repo, uiURL)
	go func() { _ = printSyncs(ctx, cfg, out) }()
	err = serve.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("converge serve exited: %w", err)
}

// startDevDaemon starts `converge serve` and `converge ui` on the cluster, their logs
// going to the file at logPath (a person reads the banner and a line per sync); it returns
// the daemon's process, the UI's URL and what closes the log.
func startDevDaemon(ctx context.Context, dir, kubeconfig, logPath string) (*exec.Cmd, string, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", nil, err
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, "", nil, err
	}
	closeLog := func() { _ = logFile.Close() }
	serve := devChild(ctx, logFile, self, "serve", "--kubeconfig", kubeconfig, "--log-format", "json",
		"--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "127.0.0.1:0",
		"--webhook-bind-address", "127.0.0.1:0", "--cache-dir", filepath.Join(dir, "cache"))
	serve.Stdout = logFile
	if err := serve.Start(); err != nil {
		closeLog()
		return nil, "", nil, err
	}
	return serve, startDevUI(ctx, logFile, self, kubeconfig), closeLog, nil
}

// cluster is the cluster dev runs on, with the converge CRD installed: the one KUBECONFIG
// names, or with KUBECONFIG unset a local one (its kubeconfig written into dir), which
// stop stops.
func (o *devOptions) cluster(ctx context.Context, dir string, say func(string, ...any)) (
	kubeconfig string, cfg *rest.Config, stop func(), err error) {
	crds, err := config.CRDs()
	if err != nil {
		return "", nil, nil, err
	}
	if kubeconfig = os.Getenv("KUBECONFIG"); kubeconfig != "" {
		if cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
			return "", nil, nil, fmt.Errorf("reading KUBECONFIG: %w", err)
		}
		if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{CRDs: crds}); err != nil {
			return "", nil, nil, fmt.Errorf("installing the CRD: %w", err)
		}
		return kubeconfig, cfg, func() {}, nil
	}
	say("starting a local cluster with %d kwok nodes (etcd, kube-apiserver, controller-manager, scheduler)...", o.nodes)
	c, err := localcluster.Start(ctx, localcluster.Options{Workloads: true, Nodes: o.nodes, CRDs: crds})
	if err != nil {
		return "", nil, nil, err
	}
	stop = func() {
		say("stopping the local cluster")
		_ = c.Stop()
	}
	b, err := c.KubeconfigBytes()
	if err == nil {
		kubeconfig = filepath.Join(dir, "kubeconfig")
		err = os.WriteFile(kubeconfig, b, 0o600)
	}
	if err != nil {
		stop()
		return "", nil, nil, err
	}
	return kubeconfig, c.Config, stop, nil
}

// devChild is a command of this binary that dev runs beside it: it writes its log to
// log, gets SIGTERM and 10s to stop when ctx ends, and dies with dev.
func devChild(ctx context.Context, log io.Writer, self string, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, self, args...)
	c.Stderr = log
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c.Cancel = func() error { return c.Process.Signal(syscall.SIGTERM) }
	c.WaitDelay = 10 * time.Second
	return c
}

// startDevUI runs `converge ui` on the cluster beside the daemon and returns the URL it
// serves (with its access token), or, when it cannot start, the command to run it by hand.
func startDevUI(ctx context.Context, log io.Writer, self, kubeconfig string) string {
	fallback := "bin/converge ui --open --kubeconfig " + kubeconfig
	ui := devChild(ctx, log, self, "ui", "--kubeconfig", kubeconfig)
	stdout, err := ui.StdoutPipe()
	if err != nil {
		return fallback
	}
	if err := ui.Start(); err != nil {
		return fallback
	}
	go func() { _ = ui.Wait() }()
	// The first line is "converge ui serving on <URL> (Ctrl-C stops it)".
	first := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		line, _ := r.ReadString('\n')
		first <- line
		_, _ = io.Copy(io.Discard, r)
	}()
	select {
	case line := <-first:
		if _, rest, ok := strings.Cut(line, " serving on "); ok {
			if u, _, ok := strings.Cut(rest, " "); ok {
				return u
			}
		}
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	return fallback
}

// initDemoRepo writes the embedded demo manifests into a fresh git repository, unless
// one is there already (a second 'make run' keeps the user's commits).
func initDemoRepo(ctx context.Context, repo string) error {
	if _, err := os.Stat(filepath.Join(repo, ".git")); err == nil {
		return nil
	}
	sub, err := fs.Sub(config.Demo, "samples/demo")
	if err != nil {
		return err
	}
	if err := os.CopyFS(repo, sub); err != nil {
		return fmt.Errorf("writing the demo repository: %w", err)
	}
	for _, args := range [][]string{
		{"init", "-q", "--initial-branch=main"},
		{"add", "."},
		{"-c", "user.name=converge demo", "-c", "user.email=demo@converge.invalid", "commit", "-qm", "demo: web Deployment, Service and ConfigMap"},
		{"config", "user.name", "converge demo"},
		{"config", "user.email", "demo@converge.invalid"},
	} {
		c := exec.CommandContext(ctx, "git", args...)
		c.Dir = repo
		if b, err := c.CombinedOutput(); err != nil {
			return fmt.Errorf("git %v: %v: %s", args, err, b)
		}
	}
	return nil
}

// serveGit serves the repositories under root over smart HTTP with the system git, on a
// random loopback port.
func serveGit(root string) (string, func(), error) {
	git, err := exec.LookPath("git")
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{
		Handler: &cgi.Handler{Path: git, Args: []string{"http-backend"},
			Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}},
		ReadHeaderTimeout: 5 * time.Second,
	}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

func createDemoTarget(ctx context.Context, cfg *rest.Config, url string) error {
	scheme := runtime.NewScheme()
	if err := convergev1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	st := &convergev1.SyncTarget{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "default"},
		Spec: convergev1.SyncTargetSpec{
			Source: convergev1.GitSource{
				URL: url, Ref: convergev1.GitRef{Branch: "main"},
				Interval: &metav1.Duration{Duration: 10 * time.Second},
			},
			Path:            "deploy",
			TargetNamespace: "demo",
			Prune:           true,
		},
	}
	existing := &convergev1.SyncTarget{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(st), existing); err == nil {
		existing.Spec = st.Spec
		return c.Update(ctx, existing)
	}
	return c.Create(ctx, st)
}
