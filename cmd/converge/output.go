package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"sigs.k8s.io/yaml"
)

// Output formats of -o.
const (
	outputTable = "table"
	outputYAML  = "yaml"
	outputJSON  = "json"
)

// outputOptions is -o/--output.
type outputOptions struct {
	format string
}

func (o *outputOptions) BindFlags(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.format, "output", "o", outputTable, "output format: table, yaml or json")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(
		[]string{outputTable, outputYAML, outputJSON}, cobra.ShellCompDirectiveNoFileComp))
}

// Validate rejects a format other than table, yaml or json.
func (o *outputOptions) Validate() error {
	switch o.format {
	case outputTable, outputYAML, outputJSON:
		return nil
	}
	return usageError(fmt.Errorf("--output must be table, yaml or json, not %q", o.format))
}

// printStructured writes v as YAML or JSON.
func printStructured(w io.Writer, format string, v any) error {
	switch format {
	case outputJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	default:
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
}

// isTerminal is true when w is a terminal: colors and live progress only then.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// ANSI colors, used on a terminal only (see colorizer).
const (
	ansiRed    = "\x1b[31m"
	ansiGreen  = "\x1b[32m"
	ansiYellow = "\x1b[33m"
	ansiCyan   = "\x1b[36m"
	ansiBold   = "\x1b[1m"
	ansiReset  = "\x1b[0m"
)

// colorizer wraps text in a color when enabled, and returns it unchanged otherwise.
type colorizer bool

func (c colorizer) wrap(color, s string) string {
	if !c || s == "" {
		return s
	}
	return color + s + ansiReset
}

// usageError marks an error in the command line itself: exit code 2, like kubectl diff.
func usageError(err error) error { return &exitError{code: 2, err: err} }

// oneLine flattens a message for a table cell.
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if max > 3 && len(s) > max {
		return s[:max-3] + "..."
	}
	return s
}
