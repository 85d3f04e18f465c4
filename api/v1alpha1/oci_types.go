package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// OCISource is a configuration artifact in an OCI registry: a kustomization, plain YAML
// or a chart directory packed as a gzip-compressed tarball in a layer of the artifact
// (what `flux push artifact` and `oras push` make). spec.path is a path inside it.
// +kubebuilder:validation:XValidation:rule="!(has(self.interval) && has(self.schedule))",message="interval and schedule are mutually exclusive"
type OCISource struct {
	// URL of the repository, oci://host[:port]/path/repository: the tag or digest goes in
	// ref, never in the URL, and so do no credentials.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^oci://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*)(:[0-9]{1,5})?(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)+$')`,message="must be oci://host[:port]/repository, with a lower-case repository path and no tag, digest or credentials"
	// +required
	URL string `json:"url"`

	// Ref is the tag, semver range or digest to follow.
	// +required
	Ref OCIRef `json:"ref"`

	// LayerMediaType is the media type of the layer to extract, e.g.
	// application/vnd.cncf.flux.content.v1.tar+gzip. Without it, the artifact's one
	// tar+gzip layer of a type converge knows (its own, Flux's, or oras's
	// application/vnd.oci.image.layer.v1.tar+gzip) is extracted; several such layers
	// need it.
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}$`
	// +optional
	LayerMediaType string `json:"layerMediaType,omitempty"`

	// SecretRef names a Secret in the SyncTarget's namespace with credentials: username
	// and password, or bearerToken, or a .dockerconfigjson; optionally ca.crt.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`

	// Interval between polls of the registry (default 1m). Mutually exclusive with schedule.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$') && duration(self) > duration('0s')`,message="must be a positive duration such as 30s, 5m or 1h30m"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`

	// Schedule polls on a cron schedule instead of an interval.
	// +optional
	Schedule CronSchedule `json:"schedule,omitempty"`

	// WebhookSecretRef names a Secret whose "token" key signs the registry's push
	// webhooks for this repository.
	// +optional
	WebhookSecretRef *LocalObjectReference `json:"webhookSecretRef,omitempty"`

	// Verify deploys only artifacts signed by a trusted key.
	// +optional
	Verify *OCIVerify `json:"verify,omitempty"`
}

// OCIRef says which artifact of a repository to follow. Exactly one field is set.
// +kubebuilder:validation:XValidation:rule="[has(self.tag), has(self.semver), has(self.digest)].filter(x, x).size() == 1",message="exactly one of tag, semver or digest must be set"
type OCIRef struct {
	// Tag to follow, e.g. latest or v1.2.3; a push of the tag is a new revision.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`
	// +optional
	Tag string `json:"tag,omitempty"`

	// SemVer is a version constraint, e.g. ">=1.0.0 <2.0.0"; the highest matching tag is followed.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=250
	// +optional
	SemVer string `json:"semver,omitempty"`

	// Digest pins the artifact by its manifest digest, sha256:<64 hex digits>.
	// +kubebuilder:validation:Pattern=`^sha256:[0-9a-f]{64}$`
	// +optional
	Digest string `json:"digest,omitempty"`
}

// OCIVerifyProvider is the signing scheme an artifact's signature is checked with.
// +kubebuilder:validation:Enum=cosign
type OCIVerifyProvider string

// CosignProvider checks a cosign signature made with a key pair.
const CosignProvider OCIVerifyProvider = "cosign"

// OCIVerify names the keys an artifact must be signed with. An artifact not signed by one
// of them is never rendered or applied: the SyncTarget keeps its previous revision and
// reports SourceVerified=False with reason VerificationFailed.
type OCIVerify struct {
	// Provider is the signing scheme: cosign (the default), with public keys.
	// +kubebuilder:default=cosign
	// +optional
	Provider OCIVerifyProvider `json:"provider,omitempty"`

	// SecretRef names a Secret in the SyncTarget's namespace whose values are PEM public
	// keys; every key of every value is trusted, so a key is rotated by adding the new
	// one before removing the old.
	// +required
	SecretRef LocalObjectReference `json:"secretRef"`
}

// ArtifactOrigin is where an OCI artifact says it comes from.
type ArtifactOrigin struct {
	// Source is the URL of what it was made from, e.g. a Git repository.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Source string `json:"source,omitempty"`

	// Revision is the revision it was made from, e.g. main@sha1:<commit>.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Revision string `json:"revision,omitempty"`
}
