package main

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

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
		newInstallCommand(), newCreateCommand())
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of converge",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "converge %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}
