// Command converge is the converge GitOps daemon (`converge serve`) and its CLI.
package main

import (
	"fmt"
	"os"

	"github.com/converge-gitops/converge/sync/render"
)

func main() {
	// A render worker started by this binary's render pool serves and exits here.
	render.ServeWorkerIfAsked()
	if err := newRootCommand().Execute(); err != nil {
		if msg := err.Error(); msg != "" {
			fmt.Fprintln(os.Stderr, "converge:", msg)
		}
		os.Exit(exitCode(err))
	}
}
