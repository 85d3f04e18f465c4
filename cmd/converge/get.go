package main

import "github.com/spf13/cobra"

// newGetCommand is a placeholder until the verb lands.
func newGetCommand() *cobra.Command {
	return &cobra.Command{Use: "get", Hidden: true, RunE: func(*cobra.Command, []string) error { return errNotBuilt }}
}
