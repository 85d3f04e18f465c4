package actions

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// PinnedValuesAnnotation records, as JSON, the inline chart values (spec.helm.values;
// null when there were none) a SyncTarget had before a rollback set those its history
// kept for the revision it rolled back to; a resume restores them.
const PinnedValuesAnnotation = "converge.dev/pinned-values-from"

// historyValues are the inline chart values the newest history entry of revision kept
// (revision as the history spells it, or a commit SHA), nil when none kept them.
func historyValues(st *convergev1.SyncTarget, revision string) *apiextensionsv1.JSON {
	for _, e := range st.Status.History {
		if (e.Revision == revision || strings.HasSuffix(e.Revision, ":"+revision)) && e.Values != nil {
			return e.Values
		}
	}
	return nil
}

// pinValues gives st's chart the inline values its history kept for revision, recording
// the values it has unless an earlier rollback recorded them already. It says what it
// did, as words to follow the revision pinned ("" when st deploys no chart, or its values
// are those already); history that kept no values for revision (too large, or kept by an
// older converge) is no error: the words say so.
func pinValues(st *convergev1.SyncTarget, revision string) (string, error) {
	if st.Spec.Helm == nil && !st.IsChart() {
		return "", nil
	}
	kept := historyValues(st, revision)
	if kept == nil {
		return ", keeping today's chart values: the history kept none for it", nil
	}
	var now *apiextensionsv1.JSON
	if st.Spec.Helm != nil {
		now = st.Spec.Helm.Values
	}
	if sameValues(now, kept) {
		return "", nil
	}
	if raw, ok := st.Annotations[PinnedValuesAnnotation]; ok {
		if !json.Valid([]byte(raw)) {
			return "", fmt.Errorf("annotation %s is not JSON; fix or remove it first", PinnedValuesAnnotation)
		}
	} else {
		recorded := "null"
		if now != nil && len(now.Raw) > 0 {
			recorded = string(now.Raw)
		}
		SetAnnotation(st, PinnedValuesAnnotation, recorded)
	}
	if st.Spec.Helm == nil {
		st.Spec.Helm = &convergev1.HelmSpec{}
	}
	st.Spec.Helm.Values = valuesOrNil(kept.Raw)
	return " with the chart values it was deployed with", nil
}

// unpinValues restores the values PinnedValuesAnnotation records, says what it did ("" when
// nothing was recorded).
func unpinValues(st *convergev1.SyncTarget) (string, error) {
	raw, ok := st.Annotations[PinnedValuesAnnotation]
	if !ok {
		return "", nil
	}
	if !json.Valid([]byte(raw)) {
		return "", fmt.Errorf("annotation %s is not JSON; set spec.helm.values by hand and remove the annotation", PinnedValuesAnnotation)
	}
	if st.Spec.Helm == nil {
		st.Spec.Helm = &convergev1.HelmSpec{}
	}
	st.Spec.Helm.Values = valuesOrNil([]byte(raw))
	delete(st.Annotations, PinnedValuesAnnotation)
	return "the chart values from before the rollback restored", nil
}

// valuesOrNil is raw as inline values: nil for none (null or {}).
func valuesOrNil(raw []byte) *apiextensionsv1.JSON {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err == nil && len(m) == 0 {
		return nil
	}
	return &apiextensionsv1.JSON{Raw: bytes.Clone(raw)}
}

// sameValues says whether two inline values are equal as JSON (nil and {} alike).
func sameValues(a, b *apiextensionsv1.JSON) bool {
	decode := func(j *apiextensionsv1.JSON) any {
		var v any
		if j != nil && len(j.Raw) > 0 {
			_ = json.Unmarshal(j.Raw, &v)
		}
		if m, ok := v.(map[string]any); ok && len(m) == 0 {
			return nil
		}
		return v
	}
	x, _ := json.Marshal(decode(a))
	y, _ := json.Marshal(decode(b))
	return bytes.Equal(x, y)
}
