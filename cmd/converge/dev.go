package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/converge-gitops/converge/config"
	"github.com/converge-gitops/converge/internal/localcluster"
)

// devOptions are the flags of `converge dev`.
type devOptions struct {
	nodes          int
	kubeconfigCopy string
}

func newDevCommand() *cobra.Command {
	o := devOptions{}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run converge against a local cluster (started here when KUBECONFIG is unset)",
		Long: `dev is what 'make run' runs. With KUBECONFIG unset it starts a local Kubernetes
cluster on loopback (etcd, kube-apiserver, controller-manager, scheduler and kwok nodes,
built by 'make controlplane'), installs the converge CRDs and keeps the cluster up until
Ctrl-C. With KUBECONFIG set it installs the CRDs into that cluster instead.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return o.run(ctx, cmd)
		},
	}
	cmd.Flags().IntVar(&o.nodes, "nodes", 3, "fake kwok nodes in the local cluster")
	cmd.Flags().StringVar(&o.kubeconfigCopy, "kubeconfig-out", filepath.Join("bin", "dev.kubeconfig"),
		"where to write the local cluster's kubeconfig for kubectl and other tools")
	return cmd
}

func (o *devOptions) run(ctx context.Context, cmd *cobra.Command) error {
	out := cmd.OutOrStdout()
	crds, err := config.CRDs()
	if err != nil {
		return err
	}
	if kc := os.Getenv("KUBECONFIG"); kc != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kc)
		if err != nil {
			return fmt.Errorf("reading KUBECONFIG: %w", err)
		}
		if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{CRDs: crds}); err != nil {
			return fmt.Errorf("installing the CRDs: %w", err)
		}
		_, _ = fmt.Fprintf(out, "installed the SyncTarget CRD into the cluster of %s\n", kc)
		_, _ = fmt.Fprintln(out, "the reconciler ('converge serve') is not built yet: see issue 4")
		return nil
	}

	_, _ = fmt.Fprintf(out, "starting a local cluster with %d kwok nodes...\n", o.nodes)
	c, err := localcluster.Start(ctx, localcluster.Options{Workloads: true, Nodes: o.nodes, CRDs: crds})
	if err != nil {
		return err
	}
	defer func() {
		_, _ = fmt.Fprintln(out, "stopping the local cluster")
		_ = c.Stop()
	}()
	kubeconfig, err := c.KubeconfigBytes()
	if err != nil {
		return err
	}
	if o.kubeconfigCopy != "" {
		if err := os.MkdirAll(filepath.Dir(o.kubeconfigCopy), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(o.kubeconfigCopy, kubeconfig, 0o600); err != nil {
			return err
		}
	}
	_, _ = fmt.Fprintf(out, `local cluster up: API server %s, SyncTarget CRD installed
  export KUBECONFIG=%s
  kubectl get nodes; kubectl get synctargets -A   (kubectl is bin/k8s/kubectl)
the reconciler ('converge serve') is not built yet: see issue 4
Ctrl-C stops the cluster
`, c.Config.Host, abs(o.kubeconfigCopy))
	<-ctx.Done()
	return nil
}

func abs(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
