package actions

import (
	"encoding/json"
	"fmt"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources/charts"
)

// PinnedOCIAnnotation records, as JSON, the ref (tag, semver range or digest) a
// SyncTarget's spec.oci asked for before a rollback pinned it to one artifact digest; a
// resume restores it.
const PinnedOCIAnnotation = "converge.dev/pinned-oci-from"

// PinOCI points st's spec.oci at the artifact of revision r by its manifest digest,
// recording what spec.oci.ref asked for unless an earlier rollback recorded it already.
func PinOCI(st *convergev1.SyncTarget, r charts.Resolved) error {
	o := st.Spec.OCI
	if o == nil {
		return fmt.Errorf("SyncTarget %s follows no OCI artifact", client.ObjectKeyFromObject(st))
	}
	if raw, ok := st.Annotations[PinnedOCIAnnotation]; ok {
		if _, err := parseOCIAsked(raw); err != nil {
			return fmt.Errorf("SyncTarget %s: %w; fix or remove the annotation first", client.ObjectKeyFromObject(st), err)
		}
	} else {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false) // a range reads ">=1.0 <2" in the annotation
		if err := enc.Encode(o.Ref); err != nil {
			return err
		}
		SetAnnotation(st, PinnedOCIAnnotation, strings.TrimSpace(b.String()))
	}
	o.Ref = convergev1.OCIRef{Digest: r.Digest}
	return nil
}

// unpinOCI restores what PinnedOCIAnnotation records, says what it did ("" when nothing
// was pinned).
func unpinOCI(st *convergev1.SyncTarget) (string, error) {
	raw, ok := st.Annotations[PinnedOCIAnnotation]
	if !ok {
		return "", nil
	}
	asked, err := parseOCIAsked(raw)
	if err != nil {
		return "", fmt.Errorf("%w; set spec.oci.ref by hand and remove the annotation", err)
	}
	if st.Spec.OCI == nil {
		return "", fmt.Errorf("SyncTarget %s records %s but follows no OCI artifact; remove the annotation",
			client.ObjectKeyFromObject(st), PinnedOCIAnnotation)
	}
	st.Spec.OCI.Ref = asked
	delete(st.Annotations, PinnedOCIAnnotation)
	return "following " + DescribeOCIRef(asked) + " again", nil
}

func parseOCIAsked(raw string) (convergev1.OCIRef, error) {
	var ref convergev1.OCIRef
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ref); err != nil {
		return ref, fmt.Errorf("annotation %s is not an OCI ref: %w", PinnedOCIAnnotation, err)
	}
	if ref == (convergev1.OCIRef{}) {
		return ref, fmt.Errorf("annotation %s records an empty ref", PinnedOCIAnnotation)
	}
	return ref, nil
}

// DescribeOCIRef says what an OCI ref follows: tag latest, semver >=1.0 <2, digest sha256:….
func DescribeOCIRef(ref convergev1.OCIRef) string {
	switch {
	case ref.Digest != "":
		return "digest " + ref.Digest
	case ref.SemVer != "":
		return "semver " + ref.SemVer
	}
	return "tag " + ref.Tag
}

// RecordedOCIRef is the ref st's annotation records that spec.oci asked for, or what it
// asks for now.
func RecordedOCIRef(st *convergev1.SyncTarget) convergev1.OCIRef {
	if ref, err := parseOCIAsked(st.Annotations[PinnedOCIAnnotation]); err == nil {
		return ref
	}
	if st.Spec.OCI == nil {
		return convergev1.OCIRef{}
	}
	return st.Spec.OCI.Ref
}
