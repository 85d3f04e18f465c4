// Command converge is the converge GitOps daemon (`converge serve`) and its CLI.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		if msg := err.Error(); msg != "" {
			fmt.Fprintln(os.Stderr, "converge:", msg)
		}
		os.Exit(exitCode(err))
	}
}
