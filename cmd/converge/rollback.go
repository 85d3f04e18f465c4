package main

import "github.com/spf13/cobra"

// newRollbackCommand is a placeholder until the verb lands.
func newRollbackCommand() *cobra.Command {
	return &cobra.Command{Use: "rollback", Hidden: true, RunE: func(*cobra.Command, []string) error { return errNotBuilt }}
}

// newResumeCommand is a placeholder until the verb lands.
func newResumeCommand() *cobra.Command {
	return &cobra.Command{Use: "resume", Hidden: true, RunE: func(*cobra.Command, []string) error { return errNotBuilt }}
}

// newSuspendCommand is a placeholder until the verb lands.
func newSuspendCommand() *cobra.Command {
	return &cobra.Command{Use: "suspend", Hidden: true, RunE: func(*cobra.Command, []string) error { return errNotBuilt }}
}
