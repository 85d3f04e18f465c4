package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// exitError carries the exit code a command wants (kubectl diff style: 1 is not an error).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }

func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "converge",
		Short:         "converge keeps a Kubernetes cluster converged on a Git repository",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	root.AddCommand(newVersionCommand(), newDevCommand(), newServeCommand(),
		newDiffCommand(), newBuildCommand(),
		newGetCommand(), newHistoryCommand(), newReconcileCommand(),
		newRollbackCommand(), newResumeCommand(), newSuspendCommand(),
		newInstallCommand(), newCreateCommand(), newBootstrapCommand(),
		newUICommand(), newTreeCommand(), newConvertCommand(), newChartTestCommand(),
		newPushCommand(), newTagCommand(), newListCommand())
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of converge, its commit and build date",
		Long: `Print the version of converge, the commit it was built from and the time of that
commit, as stamped by 'make build' or 'make image'; a binary built otherwise shows what
the Go toolchain recorded (the module version of 'go install', the VCS revision), else dev.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return currentBuild().print(cmd.OutOrStdout())
		},
	}
}
