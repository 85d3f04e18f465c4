package main

import "github.com/spf13/cobra"

// newDiffCommand is a placeholder until the verb lands.
func newDiffCommand() *cobra.Command {
	return &cobra.Command{Use: "diff", Hidden: true, RunE: func(*cobra.Command, []string) error { return errNotBuilt }}
}
