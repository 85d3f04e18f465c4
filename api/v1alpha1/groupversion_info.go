// Package v1alpha1 holds the converge.dev/v1alpha1 API: the SyncTarget kind, which
// points the converge daemon at a Git repository whose contents the cluster must follow.
//
// +kubebuilder:object:generate=true
// +groupName=converge.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of the SyncTarget API.
	GroupVersion = schema.GroupVersion{Group: "converge.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the API's Go types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this group-version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &SyncTarget{}, &SyncTargetList{}, &Notifier{}, &NotifierList{},
		&SyncTargetSet{}, &SyncTargetSetList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
