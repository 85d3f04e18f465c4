package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/config"
)

// Schema validates a SyncTarget the way the API server validates a write of it, in
// process: its labels and annotations, then against the SyncTarget CRD — unknown fields,
// the structural OpenAPI schema (after its defaults), list types, and the CEL rules
// (x-kubernetes-validations). It is built from the CRD the daemon carries (config/crd),
// the one `converge install` installs.
type Schema struct {
	structural *structuralschema.Structural
	validator  apiservervalidation.SchemaValidator
	cel        *cel.Validator
}

// NewSchema builds the Schema of the served version of the SyncTarget CRD crd.
func NewSchema(crd *apiextensionsv1.CustomResourceDefinition) (*Schema, error) {
	version := convergev1.GroupVersion.Version
	if crd.Spec.Names.Kind != convergev1.SyncTargetKind {
		return nil, fmt.Errorf("the CRD %s is not the SyncTarget's", crd.Name)
	}
	v1, err := apihelpers.GetSchemaForVersion(crd, version)
	if err != nil {
		return nil, err
	}
	if v1 == nil || v1.OpenAPIV3Schema == nil {
		return nil, fmt.Errorf("the CRD %s has no schema for %s", crd.Name, version)
	}
	internal := &apiextensionsinternal.CustomResourceValidation{}
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(v1, internal, nil); err != nil {
		return nil, err
	}
	structural, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
	if err != nil {
		return nil, fmt.Errorf("the schema of CRD %s is not structural: %w", crd.Name, err)
	}
	validator, _, err := apiservervalidation.NewSchemaValidator(internal.OpenAPIV3Schema)
	if err != nil {
		return nil, err
	}
	return &Schema{structural: structural, validator: validator,
		cel: cel.NewValidator(structural, true, celconfig.PerCallLimit)}, nil
}

// Validate checks u, a SyncTarget as the set writes it, and says what the API server would
// refuse; nil when it would take it. u is not modified.
func (s *Schema) Validate(ctx context.Context, u *unstructured.Unstructured) error {
	obj := numbersAsTheAPIServerReadsThem(u.DeepCopy().Object).(map[string]any)
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	errs = append(errs, metav1validation.ValidateLabels(u.GetLabels(), meta.Child("labels"))...)
	errs = append(errs, apimachineryvalidation.ValidateAnnotations(u.GetAnnotations(), meta.Child("annotations"))...)
	if unknown := pruning.PruneWithOptions(obj, s.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}); len(unknown) > 0 {
		for _, p := range unknown {
			errs = append(errs, field.Forbidden(field.NewPath(p), "field not declared in schema"))
		}
		return schemaError(errs)
	}
	structuraldefaulting.Default(obj, s.structural)
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, obj, s.validator)...)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, s.structural, obj)...)
	if len(errs) > 0 {
		return schemaError(errs) // the API server runs no CEL rule on a value its schema refuses
	}
	celErrs, _ := s.cel.Validate(ctx, nil, s.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	return schemaError(celErrs)
}

// numbersAsTheAPIServerReadsThem turns the json.Numbers a template's spec is decoded with
// into the int64 or float64 the API server decodes the written JSON into: the CEL rules of
// an int-or-string field refuse a json.Number as neither.
func numbersAsTheAPIServerReadsThem(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = numbersAsTheAPIServerReadsThem(e)
		}
	case []any:
		for i, e := range v {
			v[i] = numbersAsTheAPIServerReadsThem(e)
		}
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		if f, err := v.Float64(); err == nil {
			return f
		}
	}
	return v
}

// builtinSchema is the Schema of the SyncTarget CRD the binary carries.
func builtinSchema() (*Schema, error) {
	crds, err := config.CRDs()
	if err != nil {
		return nil, err
	}
	for _, crd := range crds {
		if crd.Spec.Group == convergev1.GroupVersion.Group && crd.Spec.Names.Kind == convergev1.SyncTargetKind {
			return NewSchema(crd)
		}
	}
	return nil, errors.New("the binary carries no SyncTarget CRD")
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
