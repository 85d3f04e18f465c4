package actions

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources/charts"
)

// PinnedChartAnnotation records, as JSON, the version (or digest) a SyncTarget's
// spec.chart asked for before a rollback pinned it to one chart revision; a resume
// restores it.
const PinnedChartAnnotation = "converge.dev/pinned-chart-from"

// chartAsked is what spec.chart asks for: a version or range, or an OCI digest.
type chartAsked struct {
	Version string `json:"version,omitempty"`
	Digest  string `json:"digest,omitempty"`
}

// ResolveChartRevision finds the chart revision (version@sha256:…) that rev names for st,
// a SyncTarget of spec.chart: a full revision, or a version, or a version and a digest
// prefix of at least 7 hex digits (as converge history shows it), of a revision st's
// status mentions, one only.
func ResolveChartRevision(st *convergev1.SyncTarget, rev string) (charts.Resolved, error) {
	rev = strings.TrimSpace(rev)
	if r, err := charts.ParseRevision(rev); err == nil {
		return r, nil
	}
	version, digest, _ := strings.Cut(rev, "@")
	digest = strings.TrimPrefix(digest, "sha256:")
	if version == "" || (digest != "" && len(digest) < MinSHAPrefix) {
		return charts.Resolved{}, &InputError{fmt.Errorf("--to %q names no chart revision: give a version, or version@sha256:<at least %d hex digits> from converge history", rev, MinSHAPrefix)}
	}
	matches := map[string]charts.Resolved{}
	for _, known := range KnownRevisions(st) {
		r, err := charts.ParseRevision(known)
		if err == nil && r.Version == version && strings.HasPrefix(strings.TrimPrefix(r.Digest, "sha256:"), digest) {
			matches[r.String()] = r
		}
	}
	all := make([]string, 0, len(matches))
	for s := range matches {
		all = append(all, s)
	}
	sort.Strings(all)
	switch len(all) {
	case 0:
		return charts.Resolved{}, fmt.Errorf("no chart revision %s in the history of %s (see converge history %s)",
			rev, client.ObjectKeyFromObject(st), st.Name)
	case 1:
		return matches[all[0]], nil
	}
	return charts.Resolved{}, fmt.Errorf("%s is ambiguous in the history of %s: it names %s; give the digest",
		rev, client.ObjectKeyFromObject(st), strings.Join(all, ", "))
}

// PinChart points st's spec.chart at revision r — its OCI manifest digest for a chart of
// an OCI registry, its exact version for one of a repository serving index.yaml —
// recording what spec.chart asked for unless an earlier rollback recorded it already.
func PinChart(st *convergev1.SyncTarget, r charts.Resolved) error {
	ch := st.Spec.Chart
	if ch == nil {
		return fmt.Errorf("SyncTarget %s deploys no chart of a chart repository", client.ObjectKeyFromObject(st))
	}
	if raw, ok := st.Annotations[PinnedChartAnnotation]; ok {
		if _, err := parseChartAsked(raw); err != nil {
			return fmt.Errorf("SyncTarget %s: %w; fix or remove the annotation first", client.ObjectKeyFromObject(st), err)
		}
	} else {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false) // a range reads ">=6.5 <7" in the annotation
		if err := enc.Encode(chartAsked{Version: ch.Version, Digest: ch.Digest}); err != nil {
			return err
		}
		SetAnnotation(st, PinnedChartAnnotation, strings.TrimSpace(b.String()))
	}
	if strings.HasPrefix(ch.Repository, "oci://") {
		ch.Version, ch.Digest = "", r.Digest
	} else {
		ch.Version, ch.Digest = r.Version, ""
	}
	return nil
}

// unpinChart restores what PinnedChartAnnotation records, says what it did ("" when
// nothing was pinned).
func unpinChart(st *convergev1.SyncTarget) (string, error) {
	raw, ok := st.Annotations[PinnedChartAnnotation]
	if !ok {
		return "", nil
	}
	asked, err := parseChartAsked(raw)
	if err != nil {
		return "", fmt.Errorf("%w; set spec.chart.version by hand and remove the annotation", err)
	}
	if st.Spec.Chart == nil {
		return "", fmt.Errorf("SyncTarget %s records %s but deploys no chart of a chart repository; remove the annotation",
			client.ObjectKeyFromObject(st), PinnedChartAnnotation)
	}
	st.Spec.Chart.Version, st.Spec.Chart.Digest = asked.Version, asked.Digest
	delete(st.Annotations, PinnedChartAnnotation)
	return "following " + DescribeChart(st.Spec.Chart) + " again", nil
}

func parseChartAsked(raw string) (chartAsked, error) {
	var a chartAsked
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return a, fmt.Errorf("annotation %s is not a chart version: %w", PinnedChartAnnotation, err)
	}
	return a, nil
}

// DescribeChart says what spec.chart follows: version >=6.5 <7, digest sha256:…, or the
// newest version.
func DescribeChart(ch *convergev1.ChartSource) string {
	switch {
	case ch.Digest != "":
		return "digest " + ch.Digest
	case ch.Version != "" && ch.Version != "*":
		return "version " + ch.Version
	}
	return "the newest version"
}

// Pinned says what a Rollback of st pinned it to ("commit", "chart" or "artifact") and what a resume
// restores, in words.
func Pinned(st *convergev1.SyncTarget) (what, restores string) {
	what, restores = "commit", DescribeRef(RecordedRef(st))
	switch {
	case st.IsChart():
		what, restores = "chart", DescribeChart(RecordedChart(st))
	case st.IsOCI():
		what, restores = "artifact", DescribeOCIRef(RecordedOCIRef(st))
	}
	if _, ok := st.Annotations[PinnedValuesAnnotation]; ok {
		restores += " and the chart values from before"
	}
	return what, restores
}

// RecordedChart is what st's annotation records that spec.chart asked for, or what it
// asks for now.
func RecordedChart(st *convergev1.SyncTarget) *convergev1.ChartSource {
	ch := st.Spec.Chart.DeepCopy()
	if a, err := parseChartAsked(st.Annotations[PinnedChartAnnotation]); err == nil && ch != nil {
		ch.Version, ch.Digest = a.Version, a.Digest
	}
	return ch
}
