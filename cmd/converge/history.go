package main

import "github.com/spf13/cobra"

// newHistoryCommand is a placeholder until the verb lands.
func newHistoryCommand() *cobra.Command {
	return &cobra.Command{Use: "history", Hidden: true, RunE: func(*cobra.Command, []string) error { return errNotBuilt }}
}
