package main

import "github.com/spf13/cobra"

// newBuildCommand is a placeholder until the verb lands.
func newBuildCommand() *cobra.Command {
	return &cobra.Command{Use: "build", Hidden: true, RunE: func(*cobra.Command, []string) error { return errNotBuilt }}
}
