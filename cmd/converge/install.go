package main

import "github.com/spf13/cobra"

// newInstallCommand is a placeholder until the verb lands.
func newInstallCommand() *cobra.Command {
	return &cobra.Command{Use: "install", Hidden: true, RunE: func(*cobra.Command, []string) error { return errNotBuilt }}
}
