package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons set on the conditions of a SyncTarget that deploys a Helm chart.
const (
	// HookFailedReason says a Helm hook (a pre- or post-install/upgrade resource) failed.
	HookFailedReason = "HookFailed"
	// ChartVerificationFailedReason says a chart's provenance file did not verify.
	ChartVerificationFailedReason = "ChartVerificationFailed"
)

// Annotations of Helm that converge honours on rendered objects.
const (
	// HelmResourcePolicyAnnotation set to "keep" keeps an object when it leaves the chart.
	HelmResourcePolicyAnnotation = "helm.sh/resource-policy"
	// HelmKeepValue is the value of HelmResourcePolicyAnnotation that keeps an object.
	HelmKeepValue = "keep"
)

// ChartSource is a Helm chart in a chart repository: an HTTP repository serving
// index.yaml, or an OCI registry.
// +kubebuilder:validation:XValidation:rule="!(has(self.interval) && has(self.schedule))",message="interval and schedule are mutually exclusive"
// +kubebuilder:validation:XValidation:rule="!has(self.digest) || self.repository.startsWith('oci://')",message="digest needs an oci:// repository"
// +kubebuilder:validation:XValidation:rule="!(has(self.digest) && has(self.version))",message="version and digest are mutually exclusive"
type ChartSource struct {
	// Repository is the URL of the chart repository: https:// or http:// for a repository
	// serving index.yaml, oci:// for a registry (the chart is <repository>/<name>).
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^(https?|oci)://[^\s/?#]+[^\s]*$')`,message="must be an https://, http:// or oci:// URL"
	// +required
	Repository string `json:"repository"`

	// Name of the chart in the repository.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=250
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$`
	// +required
	Name string `json:"name"`

	// Version is an exact version or a semver range such as ">=6.5 <7"; the newest
	// matching version is deployed, and a newer match found by polling is a new revision.
	// Default "*": the newest release.
	// +kubebuilder:validation:MaxLength=250
	// +optional
	Version string `json:"version,omitempty"`

	// Digest pins an OCI chart by its manifest digest, sha256:<64 hex digits>.
	// +kubebuilder:validation:Pattern=`^sha256:[0-9a-f]{64}$`
	// +optional
	Digest string `json:"digest,omitempty"`

	// SecretRef names a Secret in the SyncTarget's namespace with credentials: username
	// and password, or bearerToken, or a .dockerconfigjson; optionally ca.crt.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`

	// Interval between polls of the repository (default 1m). Mutually exclusive with schedule.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$') && duration(self) > duration('0s')`,message="must be a positive duration such as 30s, 5m or 1h30m"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`

	// Schedule polls on a cron schedule instead of an interval.
	// +optional
	Schedule CronSchedule `json:"schedule,omitempty"`

	// Verify deploys only chart versions whose provenance file (.prov) is signed by a
	// trusted OpenPGP key and matches the chart archive.
	// +optional
	Verify *ChartVerify `json:"verify,omitempty"`
}

// ChartVerify names the keys a chart's provenance must be signed with.
type ChartVerify struct {
	// SecretRef names a Secret in the SyncTarget's namespace whose values are
	// ASCII-armored OpenPGP public keys; every key of every value is trusted.
	// +required
	SecretRef LocalObjectReference `json:"secretRef"`
}

// CRDPolicy says what happens to the CustomResourceDefinitions of a chart's crds/ directory.
// +kubebuilder:validation:Enum=CreateReplace;Create;Skip
type CRDPolicy string

const (
	// CRDsCreateReplace creates the chart's CRDs and upgrades them with the chart (the default).
	CRDsCreateReplace CRDPolicy = "CreateReplace"
	// CRDsCreate creates the chart's CRDs when missing and never changes them afterwards.
	CRDsCreate CRDPolicy = "Create"
	// CRDsSkip leaves the chart's crds/ directory out.
	CRDsSkip CRDPolicy = "Skip"
)

// ValuesReference names a ConfigMap or Secret holding Helm values.
type ValuesReference struct {
	// Kind of the referent: ConfigMap or Secret.
	// +kubebuilder:validation:Enum=ConfigMap;Secret
	// +required
	Kind string `json:"kind"`

	// Name of the referent, in the SyncTarget's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`

	// ValuesKey is the data key to read (default values.yaml).
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +optional
	ValuesKey string `json:"valuesKey,omitempty"`

	// TargetPath, when set, puts the key's value (a string) at this dotted path of the
	// values, as helm --set-string does, instead of merging the key as a YAML document.
	// +kubebuilder:validation:MaxLength=250
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]+(\[[0-9]+\])?(\.[A-Za-z0-9_-]+(\[[0-9]+\])?)*$`
	// +optional
	TargetPath string `json:"targetPath,omitempty"`

	// Optional lets the referent or its key be missing.
	// +optional
	Optional bool `json:"optional,omitempty"`
}

// HelmSpec says how a chart is rendered: the chart of spec.chart, or the chart directory
// at spec.path of spec.source or spec.oci (a directory holding Chart.yaml).
type HelmSpec struct {
	// ReleaseName is .Release.Name (default: the SyncTarget's name).
	// +kubebuilder:validation:MaxLength=53
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	ReleaseName string `json:"releaseName,omitempty"`

	// Values are inline values; they win over valuesFiles and valuesFrom.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +optional
	Values *apiextensionsv1.JSON `json:"values,omitempty"`

	// ValuesFiles are values files merged in order after the chart's values.yaml: paths
	// inside the chart, or, for a chart in Git, paths relative to spec.path that may
	// reach elsewhere in the repository (never out of it).
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=1024
	// +optional
	ValuesFiles []string `json:"valuesFiles,omitempty"`

	// ValuesFrom reads values from ConfigMaps and Secrets of the SyncTarget's namespace,
	// in order, after valuesFiles. A change to one of them redeploys.
	// +kubebuilder:validation:MaxItems=32
	// +optional
	ValuesFrom []ValuesReference `json:"valuesFrom,omitempty"`

	// CRDs is what happens to the chart's crds/: CreateReplace (default: created and
	// upgraded with the chart), Create (created, never changed) or Skip.
	// +kubebuilder:default=CreateReplace
	// +optional
	CRDs CRDPolicy `json:"crds,omitempty"`

	// PruneCRDs lets prune delete a CRD that left the chart (and with it every custom
	// resource of its kind). Off by default.
	// +optional
	PruneCRDs bool `json:"pruneCRDs,omitempty"`

	// DisableHooks leaves the chart's hooks out.
	// +optional
	DisableHooks bool `json:"disableHooks,omitempty"`

	// RemoveReleaseSecrets deletes the Secrets of a release that `helm install` made
	// under the same release name and namespace, once converge has taken its objects
	// over. They are left alone by default.
	// +optional
	RemoveReleaseSecrets bool `json:"removeReleaseSecrets,omitempty"`
}

// KubeConfigReference points at a kubeconfig that sends a SyncTarget's objects to another cluster.
type KubeConfigReference struct {
	// SecretRef names a Secret in the SyncTarget's namespace holding a kubeconfig under
	// the key "value" or "value.yaml" (as Flux and Cluster API write them), or key.
	// Kubeconfigs that run exec plugins or auth providers are refused.
	// +required
	SecretRef KubeConfigSecretReference `json:"secretRef"`
}

// KubeConfigSecretReference names a Secret and, optionally, its key.
type KubeConfigSecretReference struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`

	// Key holding the kubeconfig (default: value, then value.yaml).
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +optional
	Key string `json:"key,omitempty"`
}
