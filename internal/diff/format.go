package diff

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Names of the two sides of every diff, as kubectl diff calls them.
const (
	liveName   = "live"
	mergedName = "merged"
)

// unifiedDiff returns the unified diff of live against after (either may be nil) as
// YAML, server-set fields stripped and Secret values masked.
func unifiedDiff(live, after *unstructured.Unstructured) (string, error) {
	live, after = maskSecrets(strip(live), strip(after))
	a, err := yamlLines(live)
	if err != nil {
		return "", err
	}
	b, err := yamlLines(after)
	if err != nil {
		return "", err
	}
	return difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: a, B: b, FromFile: liveName, ToFile: mergedName, Context: 3,
	})
}

// strip returns a copy of u without the fields the server sets on every write.
func strip(u *unstructured.Unstructured) *unstructured.Unstructured {
	if u == nil {
		return nil
	}
	c := u.DeepCopy()
	unstructured.RemoveNestedField(c.Object, "status")
	for _, f := range []string{"managedFields", "resourceVersion", "generation", "uid", "creationTimestamp"} {
		unstructured.RemoveNestedField(c.Object, "metadata", f)
	}
	return c
}

func yamlLines(u *unstructured.Unstructured) ([]string, error) {
	if u == nil {
		return nil, nil
	}
	b, err := yaml.Marshal(u.Object)
	if err != nil {
		return nil, err
	}
	return difflib.SplitLines(strings.TrimSuffix(string(b), "\n")), nil
}

// Colors paint the parts of the text output; a nil function leaves its part plain.
type Colors struct {
	// Create, Change and Prune paint the header of an object and the summary counts.
	Create, Change, Prune func(string) string
	// Added and Removed paint the lines of a diff, Hunk its @@ lines, Files its ---/+++ lines.
	Added, Removed, Hunk, Files func(string) string
}

func paint(f func(string) string, s string) string {
	if f == nil {
		return s
	}
	return f(s)
}

// sign is the one-character mark of an action.
func sign(a Action) string {
	switch a {
	case Create:
		return "+"
	case Change:
		return "~"
	case Prune:
		return "-"
	}
	return " "
}

func (c Colors) forAction(a Action) func(string) string {
	switch a {
	case Create:
		return c.Create
	case Change:
		return c.Change
	case Prune:
		return c.Prune
	}
	return nil
}

// WriteText writes what a terminal user reads: for every object that an apply would
// create, change or prune, a header ("~ apps/v1 Deployment shop/web"), its note and its
// diff; then the summary line.
func WriteText(w io.Writer, r *Result, colors Colors) error {
	bw := newPrinter(w)
	for _, o := range r.Objects {
		if o.Action != Create && o.Action != Change && o.Action != Prune {
			continue
		}
		bw.printf("%s\n", paint(colors.forAction(o.Action), sign(o.Action)+" "+o.Ref()))
		if o.Note != "" {
			bw.printf("  (%s)\n", o.Note)
		}
		for _, line := range strings.SplitAfter(o.Diff, "\n") {
			if line == "" {
				continue
			}
			text := strings.TrimSuffix(line, "\n")
			switch {
			case strings.HasPrefix(text, "--- ") || strings.HasPrefix(text, "+++ "):
				text = paint(colors.Files, text)
			case strings.HasPrefix(text, "@@"):
				text = paint(colors.Hunk, text)
			case strings.HasPrefix(text, "+"):
				text = paint(colors.Added, text)
			case strings.HasPrefix(text, "-"):
				text = paint(colors.Removed, text)
			}
			bw.printf("%s\n", text)
		}
		bw.printf("\n")
	}
	bw.printf("%s\n", r.Summary().String())
	return bw.flush()
}

// WriteMarkdown writes a summary for a pull-request comment: a heading, the summary
// line, a table of the changes, then every diff in a collapsed ```diff block.
func WriteMarkdown(w io.Writer, r *Result, title string) error {
	bw := newPrinter(w)
	if title == "" {
		title = "converge diff"
	}
	bw.printf("### %s\n\n", title)
	s := r.Summary()
	if !r.HasChanges() {
		bw.printf("No changes (%s).\n", s)
		return bw.flush()
	}
	bw.printf("**%s**\n\n", s)
	bw.printf("| Action | Object | Note |\n")
	bw.printf("|---|---|---|\n")
	for _, o := range r.Objects {
		if o.Action != Create && o.Action != Change && o.Action != Prune {
			continue
		}
		bw.printf("| `%s` %s | `%s` | %s |\n", sign(o.Action), o.Action, o.Ref(), tableCell(o.Note))
	}
	for _, o := range r.Objects {
		if o.Diff == "" || (o.Action != Create && o.Action != Change && o.Action != Prune) {
			continue
		}
		fence := codeFence(o.Diff)
		bw.printf("\n<details><summary><code>%s %s</code></summary>\n\n", sign(o.Action), htmlEscape(o.Ref()))
		bw.printf("%sdiff\n%s", fence, o.Diff)
		if !strings.HasSuffix(o.Diff, "\n") {
			bw.printf("\n")
		}
		bw.printf("%s\n\n</details>\n", fence)
	}
	return bw.flush()
}

// codeFence is a backtick fence longer than any run of backticks in s, so that the
// content cannot close it.
func codeFence(s string) string {
	longest, run := 0, 0
	for _, c := range s {
		if c == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	return strings.Repeat("`", max(3, longest+1))
}

func tableCell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.Join(strings.Fields(s), " ")
}

func htmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// printer writes formatted text through a buffer and keeps the first error.
type printer struct {
	w   *bufio.Writer
	err error
}

func newPrinter(w io.Writer) *printer { return &printer{w: bufio.NewWriter(w)} }

func (p *printer) printf(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

func (p *printer) flush() error {
	if p.err != nil {
		return p.err
	}
	return p.w.Flush()
}
