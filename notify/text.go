package notify

import (
	"fmt"
	"strings"
	"unicode/utf8"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// maxText bounds a message's text: chat services refuse longer ones (Discord: 2000).
const maxText = 1900

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
