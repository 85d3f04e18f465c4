package apply

import (
	"github.com/fluxcd/pkg/ssa/utils"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// FieldManager is the server-side apply field manager of everything converge applies.
const FieldManager = "converge"

// ForceAnnotation set to "enabled" on an object lets converge delete and recreate it when
// a change touches an immutable field; without it such a change is reported, not forced.
const ForceAnnotation = "converge.dev/force"

// The stages of an apply, in the order they are applied.
const (
	// DefinitionStage holds CRDs, Namespaces and ClusterRoles: what later objects need.
	DefinitionStage = iota
	// ClassStage holds class definitions (StorageClass, IngressClass, ...).
	ClassStage
	// RestStage holds everything else.
	RestStage
	numStages
)

// stageNames name the stages in messages.
var stageNames = [numStages]string{
	DefinitionStage: "CRDs, Namespaces and ClusterRoles",
	ClassStage:      "class definitions",
	RestStage:       "objects",
}

// Stage is the stage o is applied in: DefinitionStage for CRDs, Namespaces and
// ClusterRoles, ClassStage for kinds named *Class, RestStage for the rest. An apply
// finishes a stage (and waits for its objects to be ready) before it starts the next.
func Stage(o *unstructured.Unstructured) int {
	switch {
	case utils.IsClusterDefinition(o):
		return DefinitionStage
	case utils.IsClassDefinition(o):
		return ClassStage
	default:
		return RestStage
	}
}

// Stages splits objects by Stage, keeping their order within a stage. It always returns
// one slice per stage, empty ones included.
func Stages(objects []*unstructured.Unstructured) [][]*unstructured.Unstructured {
	stages := make([][]*unstructured.Unstructured, numStages)
	for _, o := range objects {
		s := Stage(o)
		stages[s] = append(stages[s], o)
	}
	return stages
}

// Excluded reports whether o's Policy skips it (converge.dev/reconcile: disabled or
// Flux's equivalents): converge leaves such an object alone, whether the annotation is
// in Git or on the live object.
func Excluded(o *unstructured.Unstructured) bool {
	return Policy(o).Skip
}

// Forced reports whether o's Policy forces it (converge.dev/force: enabled or Flux's
// equivalent): a change to an immutable field of it is applied by deleting and
// recreating it.
func Forced(o *unstructured.Unstructured) bool {
	return Policy(o).Force
}
