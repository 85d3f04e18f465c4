package main

import "github.com/spf13/cobra"

// newReconcileCommand is a placeholder until the verb lands.
func newReconcileCommand() *cobra.Command {
	return &cobra.Command{Use: "reconcile", Hidden: true, RunE: func(*cobra.Command, []string) error { return errNotBuilt }}
}
