// Package crdvalidate checks an object of one of converge's kinds the way the API server
// checks its create, in process, with the API server's own validators and against the CRD
// the binary carries (package config): its metadata, the fields its schema does not
// declare, the structural OpenAPI schema after its defaults, list types, and the CEL rules
// (x-kubernetes-validations) unless a blocking error came first. The SyncTargetSet
// controller checks what it generates with it before any write, `converge create` what it
// builds, `converge convert` what it converts.
package crdvalidate

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

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
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/config"
)

// Validator checks objects of one kind against its CRD.
type Validator struct {
	kind       string
	namespaced bool
	structural *structuralschema.Structural
	schema     apiservervalidation.SchemaValidator
	cel        *cel.Validator
}

// New builds the Validator of the served version of crd.
func New(crd *apiextensionsv1.CustomResourceDefinition) (*Validator, error) {
	version := convergev1.GroupVersion.Version
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
	schema, _, err := apiservervalidation.NewSchemaValidator(internal.OpenAPIV3Schema)
	if err != nil {
		return nil, err
	}
	return &Validator{kind: crd.Spec.Names.Kind, namespaced: crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
		structural: structural, schema: schema, cel: cel.NewValidator(structural, true, celconfig.PerCallLimit)}, nil
}

// builtin holds the Validators of the CRDs the binary carries, by kind, built once.
var builtin = sync.OnceValues(func() (map[string]*Validator, error) {
	crds, err := config.CRDs()
	if err != nil {
		return nil, fmt.Errorf("reading the CRDs the binary carries: %w", err)
	}
	out := map[string]*Validator{}
	for _, crd := range crds {
		if crd.Spec.Group != convergev1.GroupVersion.Group {
			continue
		}
		v, err := New(crd)
		if err != nil {
			return nil, err
		}
		out[crd.Spec.Names.Kind] = v
	}
	return out, nil
})

// For returns the Validator of kind (SyncTarget, SyncTargetSet, Notifier) from the CRDs
// the binary carries.
func For(kind string) (*Validator, error) {
	all, err := builtin()
	if err != nil {
		return nil, err
	}
	v, ok := all[kind]
	if !ok {
		return nil, fmt.Errorf("the binary carries no CRD of kind %s", kind)
	}
	return v, nil
}

// Errors says what the API server would refuse in a create of u, worded as it words
// them; none when it would take it. u is not modified.
func (v *Validator) Errors(ctx context.Context, u *unstructured.Unstructured) field.ErrorList {
	u = u.DeepCopy()
	if v.namespaced && u.GetNamespace() == "" {
		u.SetNamespace("default") // the API server takes the request's namespace
	}
	obj := numbersAsTheAPIServerReadsThem(u.Object).(map[string]any)
	errs := apimachineryvalidation.ValidateObjectMetaAccessor(u, v.namespaced, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	unknown := pruning.PruneWithOptions(obj, v.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	for _, p := range unknown {
		errs = append(errs, field.Forbidden(field.NewPath(p), "field not declared in schema"))
	}
	if len(unknown) > 0 {
		return errs
	}
	structuraldefaulting.Default(obj, v.structural)
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, obj, v.schema)...)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, v.structural, obj)...)
	if blocking(errs) {
		// As the API server: the rules may assume what the schema promises.
		return append(errs, field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"))
	}
	celErrs, _ := v.cel.Validate(ctx, nil, v.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

// blocking reports a failure after which the API server evaluates no CEL rule: a wrong
// type, a missing field, a value too long, too many items or not in the enum.
func blocking(errs field.ErrorList) bool {
	for _, e := range errs {
		switch e.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return true
		}
	}
	return false
}

// numbersAsTheAPIServerReadsThem turns json.Numbers (a template's spec is decoded with
// them) into the int64 or float64 the API server decodes the written JSON into: the CEL
// rules of an int-or-string field refuse a json.Number as neither.
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
