package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// kubeOptions are kubectl's connection flags.
type kubeOptions struct {
	kubeconfig string
	context    string
}

func (o *kubeOptions) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	fs.StringVar(&o.context, "context", "", "kubeconfig context to use")
}

func (o *kubeOptions) clientConfig() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.kubeconfig != "" {
		rules.ExplicitPath = o.kubeconfig
	}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
		&clientcmd.ConfigOverrides{CurrentContext: o.context})
}

// restConfig loads the client configuration the way kubectl does.
func (o *kubeOptions) restConfig() (*rest.Config, error) {
	cfg, err := o.clientConfig().ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	return cfg, nil
}

// cliOptions are the connection and namespace flags every CLI verb shares:
// --kubeconfig, --context, -n/--namespace and, where it makes sense, -A/--all-namespaces.
type cliOptions struct {
	kube          kubeOptions
	namespace     string
	allNamespaces bool
}

// BindFlags binds the flags; -A only when the verb lists objects.
func (o *cliOptions) BindFlags(fs *pflag.FlagSet, withAllNamespaces bool) {
	o.kube.BindFlags(fs)
	fs.StringVarP(&o.namespace, "namespace", "n", "", "namespace of the SyncTarget (default: the kubeconfig context's, else default)")
	if withAllNamespaces {
		fs.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "list SyncTargets of every namespace")
	}
}

// Namespace is -n, else the namespace of the kubeconfig context, else "default".
func (o *cliOptions) Namespace() (string, error) {
	if o.namespace != "" {
		return o.namespace, nil
	}
	ns, _, err := o.kube.clientConfig().Namespace()
	if err != nil {
		return "", fmt.Errorf("loading the kubeconfig: %w", err)
	}
	if ns == "" {
		ns = "default"
	}
	return ns, nil
}

// Client returns a client that knows the built-in kinds and SyncTargets.
func (o *cliOptions) Client() (client.Client, *rest.Config, error) {
	cfg, err := o.kube.restConfig()
	if err != nil {
		return nil, nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: cliScheme()})
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to the cluster: %w", err)
	}
	return c, cfg, nil
}

// cliScheme has the built-in kinds and the converge API.
func cliScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := convergev1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// completeSyncTargets completes the first argument with the names of the SyncTargets
// in the namespace the flags select.
func completeSyncTargets(o *cliOptions) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, _, err := o.Client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		ns, err := o.Namespace()
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		var list convergev1.SyncTargetList
		if err := c.List(cmd.Context(), &list, client.InNamespace(ns)); err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		names := make([]cobra.Completion, 0, len(list.Items))
		for _, st := range list.Items {
			names = append(names, st.Name)
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

// forOneSyncTarget makes cmd a command on the one SyncTarget its argument names: it takes
// the flags of cli (-n, --kubeconfig…), completes the name, and runs run with it.
func forOneSyncTarget(cmd *cobra.Command, cli *cliOptions,
	run func(ctx context.Context, out io.Writer, name string) error) *cobra.Command {
	cmd.Args = usageArgs(cobra.ExactArgs(1))
	cmd.ValidArgsFunction = completeSyncTargets(cli)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return run(cmd.Context(), cmd.OutOrStdout(), args[0])
	}
	cli.BindFlags(cmd.Flags(), false)
	return cmd
}
