package notify

import (
	"bytes"
	"fmt"
	"strings"
	"text/template"
	"unicode/utf8"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// maxText bounds a message's text: chat services refuse longer ones (Discord: 2000).
const maxText = 1900

// maxTemplateOutput bounds what a summary template may produce before it is cut.
const maxTemplateOutput = 64 << 10

// parseSummary checks a spec.summary template; an empty one is the default text.
func parseSummary(s string) (*template.Template, error) {
	if s == "" {
		return nil, nil
	}
	t, err := template.New("summary").Option("missingkey=error").Parse(s)
	if err != nil {
		return nil, fmt.Errorf("spec.summary: %w", err)
	}
	return t, nil
}

// text is the message text of m: the template's output, or the default text.
func text(t *template.Template, m Message) (string, error) {
	if t == nil {
		return cut(defaultText(m), maxText), nil
	}
	var b limitedBuffer
	if err := t.Execute(&b, m); err != nil {
		return "", fmt.Errorf("spec.summary: %w", err)
	}
	return cut(strings.TrimSpace(b.String()), maxText), nil
}

// defaultText is "<namespace>/<name>: <what happened> <revision>: <message>".
func defaultText(m Message) string {
	s := fmt.Sprintf("%s/%s: %s", m.Namespace, m.Target, phrase(m.Event))
	if m.Revision != "" && !strings.Contains(m.Message, m.Revision) {
		s += " " + m.Revision
	}
	if m.Message != "" {
		s += ": " + m.Message
	}
	return s
}

// phrase says what an event means, for people.
func phrase(e convergev1.NotificationEvent) string {
	switch e {
	case convergev1.EventSucceeded:
		return "deployed"
	case convergev1.EventFailed:
		return "failed"
	case convergev1.EventRolledBack:
		return "rolled back"
	case convergev1.EventStalled:
		return "stalled"
	case convergev1.EventDriftCorrected:
		return "drift corrected"
	case convergev1.EventProgressing:
		return "deploying"
	}
	return string(e)
}

// description is a commit status's description: what happened and why, at most n runes.
func description(m Message, n int) string {
	s := phrase(m.Event)
	if m.Message != "" {
		s += ": " + m.Message
	}
	return cut(s, n)
}

// cut shortens s to at most n runes, marking the cut with an ellipsis.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// limitedBuffer stops a template that writes without end.
type limitedBuffer struct{ bytes.Buffer }

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > maxTemplateOutput {
		return 0, fmt.Errorf("output longer than %d bytes", maxTemplateOutput)
	}
	return b.Buffer.Write(p)
}
