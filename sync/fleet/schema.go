package fleet

import (
	"context"
	"errors"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/crdvalidate"
)

// Schema validates a SyncTarget the way the API server validates a write of it, in
// process (package crdvalidate), against the SyncTarget CRD the daemon carries
// (config/crd), the one `converge install` installs.
type Schema struct {
	v *crdvalidate.Validator
}

// Validate checks u, a SyncTarget as the set writes it, and says what the API server would
// refuse; nil when it would take it. u is not modified.
func (s *Schema) Validate(ctx context.Context, u *unstructured.Unstructured) error {
	return schemaError(s.v.Errors(ctx, u))
}

// builtinSchema is the Schema of the SyncTarget CRD the binary carries.
func builtinSchema() (*Schema, error) {
	v, err := crdvalidate.For(convergev1.SyncTargetKind)
	if err != nil {
		return nil, err
	}
	return &Schema{v: v}, nil
}

// schemaError is errs as one error, worded as the API server words a refused write.
func schemaError(errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New("SyncTarget is invalid: " + strings.Join(msgs, ", "))
}
