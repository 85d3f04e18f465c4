// Command converge is the converge GitOps daemon (`converge serve`) and its CLI.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "converge:", err)
		os.Exit(exitCode(err))
	}
}
