package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	apimeta "k8s.io/apimachinery/pkg/api/meta"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/health"
	"github.com/converge-gitops/converge/internal/tree"
	"github.com/converge-gitops/converge/sync/cluster"
)

// treeOptions are the flags of `converge tree`.
type treeOptions struct {
	cli cliOptions
}

func newTreeCommand() *cobra.Command {
	o := &treeOptions{}
	return forOneSyncTarget(&cobra.Command{
		Use:   "tree NAME",
		Short: "Show the objects a SyncTarget applied, as a tree, with their live health",
		Long: `Show the inventory of a SyncTarget (the objects it applied, status.inventory) as a tree
grouped by namespace and kind, each object with its health read from the cluster now, as the
daemon's health checks read it (kstatus, or the SyncTarget's CEL rules): Current, InProgress,
Failed, Terminating, NotFound or Unknown, and why.`,
		Example: `  converge tree shop -n team-a`,
	}, &o.cli, o.run)
}

func (o *treeOptions) run(ctx context.Context, out io.Writer, name string) error {
	st, c, err := getSyncTarget(ctx, &o.cli, name)
	if err != nil {
		return err
	}
	// A SyncTarget of a remote cluster: its objects are read there (a loopback cluster is
	// allowed, the CLI runs with the network position of its user).
	cfg, err := o.cli.kube.restConfig()
	if err != nil {
		return err
	}
	on, release, err := cluster.ForCaller(ctx, c, cfg, st, true)
	if err != nil {
		return err
	}
	defer release()
	there, err := on.Client("")
	if err != nil {
		return err
	}
	t, err := tree.Load(ctx, there, st)
	if err != nil {
		return err
	}
	return printTree(out, st, t, colorizer(isTerminal(out)))
}

// printTree writes the tree with unicode lines, as flux tree does.
func printTree(out io.Writer, st *convergev1.SyncTarget, t *tree.Tree, c colorizer) error {
	var b strings.Builder
	ready := "-"
	if cond := apimeta.FindStatusCondition(st.Status.Conditions, convergev1.ReadyCondition); cond != nil {
		ready = "Ready=" + string(cond.Status)
	}
	fmt.Fprintf(&b, "SyncTarget %s/%s  %s  %s\n", st.Namespace, st.Name, orDash(shortRevision(st.Status.LastAppliedRevision)), ready)
	if t.Total == 0 {
		b.WriteString("└── (no objects applied yet)\n")
	}
	for i, ns := range t.Namespaces {
		nsLast := i == len(t.Namespaces)-1
		label := ns.Namespace
		if label == "" {
			label = "(cluster-scoped)"
		}
		fmt.Fprintf(&b, "%s %s\n", branch(nsLast), label)
		for j, k := range ns.Kinds {
			kLast := j == len(ns.Kinds)-1
			fmt.Fprintf(&b, "%s%s %s\n", indent(nsLast), branch(kLast), k.Kind)
			for l, n := range k.Objects {
				fmt.Fprintf(&b, "%s%s%s %s  %s%s\n", indent(nsLast), indent(kLast), branch(l == len(k.Objects)-1),
					n.Name, statusText(n.Status, c), messageText(n.Message))
			}
		}
	}
	_, err := io.WriteString(out, b.String())
	return err
}

func branch(last bool) string {
	if last {
		return "└──"
	}
	return "├──"
}

func indent(last bool) string {
	if last {
		return "    "
	}
	return "│   "
}

func statusText(s health.Status, c colorizer) string {
	switch s {
	case health.Current:
		return c.wrap(ansiGreen, string(s))
	case health.Failed, health.NotFound:
		return c.wrap(ansiRed, string(s))
	case health.InProgress, health.Terminating:
		return c.wrap(ansiYellow, string(s))
	}
	return string(s)
}

func messageText(msg string) string {
	if msg == "" {
		return ""
	}
	return "  " + oneLine(msg, maxTableMessage)
}
