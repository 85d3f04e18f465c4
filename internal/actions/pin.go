package actions

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
)

// PinnedFromAnnotation records, as JSON, the ref a SyncTarget followed before a
// rollback pinned it to a commit; a resume restores it.
const PinnedFromAnnotation = "converge.dev/pinned-from"

// MinSHAPrefix is the shortest commit prefix a rollback accepts, as git abbreviates.
const MinSHAPrefix = 7

// InputError is a revision the caller gave that cannot name a commit at all (the
// CLI exits 2 on it, as on any usage error).
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *InputError) Unwrap() error { return e.Err }

// ResolveCommit finds the full commit SHA that rev names for st: a revision string, a
// full SHA, or a prefix of at least 7 hex digits of a commit that st's history (or its
// status) mentions, matching one commit only.
func ResolveCommit(st *convergev1.SyncTarget, rev string) (string, error) {
	rev = strings.TrimSpace(rev)
	if strings.Contains(rev, ":") {
		r, err := sources.ParseRevision(rev)
		if err != nil {
			return "", &InputError{err}
		}
		return r.Commit, nil
	}
	prefix := strings.ToLower(rev)
	for _, ch := range prefix {
		if (ch < '0' || ch > '9') && (ch < 'a' || ch > 'f') {
			return "", &InputError{fmt.Errorf("--to %q is neither a revision (main@sha1:<hex>) nor a commit SHA", rev)}
		}
	}
	if len(prefix) == 40 || len(prefix) == 64 {
		return prefix, nil
	}
	if len(prefix) < MinSHAPrefix {
		return "", &InputError{fmt.Errorf("--to %q is too short: give at least %d hex digits of the commit", rev, MinSHAPrefix)}
	}
	return matchPrefix(st, prefix)
}

// matchPrefix finds the one commit of st's known revisions that starts with prefix.
func matchPrefix(st *convergev1.SyncTarget, prefix string) (string, error) {
	matches := map[string]bool{}
	for _, r := range KnownRevisions(st) {
		if parsed, err := sources.ParseRevision(r); err == nil && strings.HasPrefix(parsed.Commit, prefix) {
			matches[parsed.Commit] = true
		}
	}
	all := make([]string, 0, len(matches))
	for c := range matches {
		all = append(all, c)
	}
	sort.Strings(all)
	switch len(all) {
	case 0:
		return "", fmt.Errorf("no commit starting with %s in the history of %s (see converge history %s)",
			prefix, client.ObjectKeyFromObject(st), st.Name)
	case 1:
		return all[0], nil
	}
	return "", fmt.Errorf("%s is ambiguous in the history of %s: it starts %s; give more digits",
		prefix, client.ObjectKeyFromObject(st), strings.Join(all, ", "))
}

// KnownRevisions are the revisions st's status mentions: its history and its last ones.
func KnownRevisions(st *convergev1.SyncTarget) []string {
	revs := []string{st.Status.LastAppliedRevision, st.Status.LastHealthyRevision,
		st.Status.LastAttemptedRevision, st.Status.LastFetchedRevision}
	for _, e := range st.Status.History {
		revs = append(revs, e.Revision)
	}
	return revs
}

// Pin points st at commit, recording the ref it followed unless a ref recorded by an
// earlier rollback is there already: that one, the ref before any pin, is what resume
// restores. It refuses when the annotation does not describe st: a recorded ref on a
// SyncTarget that follows something other than a commit was left behind by someone
// changing the ref by hand, and overwriting or keeping it would both guess.
func Pin(st *convergev1.SyncTarget, commit string) error {
	key := client.ObjectKeyFromObject(st)
	if raw, ok := st.Annotations[PinnedFromAnnotation]; ok {
		if _, err := ParsePinnedFrom(raw); err != nil {
			return fmt.Errorf("SyncTarget %s: %w; fix or remove the annotation first", key, err)
		}
		if st.Spec.Source.Ref.Commit == "" {
			return fmt.Errorf("SyncTarget %s follows %s, not a pinned commit, yet records %s=%s: "+
				"remove the annotation (or run converge resume) first", key, DescribeRef(st.Spec.Source.Ref),
				PinnedFromAnnotation, raw)
		}
	} else {
		b, err := json.Marshal(st.Spec.Source.Ref)
		if err != nil {
			return err
		}
		SetAnnotation(st, PinnedFromAnnotation, string(b))
	}
	st.Spec.Source.Ref = convergev1.GitRef{Commit: commit}
	return nil
}

// Unpin restores the ref recorded in PinnedFromAnnotation (a chart's version recorded in
// PinnedChartAnnotation, an artifact's ref in PinnedOCIAnnotation), removes the annotation and clears spec.suspend; it returns what
// it did, in words.
func Unpin(st *convergev1.SyncTarget) ([]string, error) {
	var did []string
	chart, err := unpinChart(st)
	if err != nil {
		return nil, err
	}
	if chart != "" {
		did = append(did, chart)
	}
	artifact, err := unpinOCI(st)
	if err != nil {
		return nil, err
	}
	if artifact != "" {
		did = append(did, artifact)
	}
	values, err := unpinValues(st)
	if err != nil {
		return nil, err
	}
	if values != "" {
		did = append(did, values)
	}
	if raw, ok := st.Annotations[PinnedFromAnnotation]; ok {
		ref, err := ParsePinnedFrom(raw)
		if err != nil {
			return nil, fmt.Errorf("%w; set spec.source.ref and remove the annotation by hand", err)
		}
		st.Spec.Source.Ref = ref
		delete(st.Annotations, PinnedFromAnnotation)
		did = append(did, "following "+DescribeRef(ref)+" again")
	}
	if st.Spec.Suspend {
		st.Spec.Suspend = false
		did = append(did, "no longer suspended")
	}
	return did, nil
}

// ParsePinnedFrom reads the ref PinnedFromAnnotation records.
func ParsePinnedFrom(raw string) (convergev1.GitRef, error) {
	var ref convergev1.GitRef
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ref); err != nil {
		return ref, fmt.Errorf("annotation %s is not a ref: %w", PinnedFromAnnotation, err)
	}
	if ref == (convergev1.GitRef{}) {
		return ref, fmt.Errorf("annotation %s records an empty ref", PinnedFromAnnotation)
	}
	return ref, nil
}

// RecordedRef is the ref st's annotation records, or its current ref.
func RecordedRef(st *convergev1.SyncTarget) convergev1.GitRef {
	if ref, err := ParsePinnedFrom(st.Annotations[PinnedFromAnnotation]); err == nil {
		return ref
	}
	return st.Spec.Source.Ref
}

// DescribeRef says what a ref follows: branch main, tag v1.2.0, commit 0a1b2c3…
func DescribeRef(r convergev1.GitRef) string {
	return sources.Ref(r).String()
}

// SetAnnotation sets one annotation of st.
func SetAnnotation(st *convergev1.SyncTarget, key, value string) {
	if st.Annotations == nil {
		st.Annotations = map[string]string{}
	}
	st.Annotations[key] = value
}
