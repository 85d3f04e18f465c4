package render

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/converge-gitops/converge/internal/crdkinds"
)

// clusterScoped lists the built-in Kubernetes kinds that are not namespaced, by group
// and kind (the scope of a kind does not change between its versions). Anything not
// listed here, not defined by a CustomResourceDefinition in the same render, and not
// known to Options.IsNamespaced is taken to be namespaced.
var clusterScoped = map[schema.GroupKind]bool{
	{Group: "", Kind: "Namespace"}:                                                    true,
	{Group: "", Kind: "Node"}:                                                         true,
	{Group: "", Kind: "PersistentVolume"}:                                             true,
	{Group: "", Kind: "ComponentStatus"}:                                              true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:                         true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}:                  true,
	crdkinds.GroupKind:                                                                true,
	{Group: "apiregistration.k8s.io", Kind: "APIService"}:                             true,
	{Group: "storage.k8s.io", Kind: "StorageClass"}:                                   true,
	{Group: "storage.k8s.io", Kind: "CSIDriver"}:                                      true,
	{Group: "storage.k8s.io", Kind: "CSINode"}:                                        true,
	{Group: "storage.k8s.io", Kind: "VolumeAttachment"}:                               true,
	{Group: "storage.k8s.io", Kind: "VolumeAttributesClass"}:                          true,
	{Group: "scheduling.k8s.io", Kind: "PriorityClass"}:                               true,
	{Group: "node.k8s.io", Kind: "RuntimeClass"}:                                      true,
	{Group: "networking.k8s.io", Kind: "IngressClass"}:                                true,
	{Group: "networking.k8s.io", Kind: "IPAddress"}:                                   true,
	{Group: "networking.k8s.io", Kind: "ServiceCIDR"}:                                 true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"}:   true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"}:     true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy"}:        true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicyBinding"}: true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicy"}:          true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicyBinding"}:   true,
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "FlowSchema"}:                       true,
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "PriorityLevelConfiguration"}:       true,
	{Group: "certificates.k8s.io", Kind: "CertificateSigningRequest"}:                 true,
	{Group: "certificates.k8s.io", Kind: "ClusterTrustBundle"}:                        true,
	{Group: "resource.k8s.io", Kind: "DeviceClass"}:                                   true,
	{Group: "resource.k8s.io", Kind: "ResourceSlice"}:                                 true,
	{Group: "policy", Kind: "PodSecurityPolicy"}:                                      true,
	{Group: "authentication.k8s.io", Kind: "TokenReview"}:                             true,
	{Group: "authentication.k8s.io", Kind: "SelfSubjectReview"}:                       true,
	{Group: "authorization.k8s.io", Kind: "SubjectAccessReview"}:                      true,
	{Group: "authorization.k8s.io", Kind: "SelfSubjectAccessReview"}:                  true,
	{Group: "authorization.k8s.io", Kind: "SelfSubjectRulesReview"}:                   true,
	{Group: "internal.apiserver.k8s.io", Kind: "StorageVersion"}:                      true,
	{Group: "storagemigration.k8s.io", Kind: "StorageVersionMigration"}:               true,
}

// IsClusterScopedBuiltin reports whether gk is one of the built-in Kubernetes kinds
// that live outside any namespace.
func IsClusterScopedBuiltin(gk schema.GroupKind) bool {
	return clusterScoped[gk]
}
