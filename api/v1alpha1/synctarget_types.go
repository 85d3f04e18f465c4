package v1alpha1

import (
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// SyncTargetKind is the kind name of the SyncTarget API.
const SyncTargetKind = "SyncTarget"

// Labels and annotations that converge reads or writes on objects.
const (
	// NameLabel carries the name of the SyncTarget that manages an object.
	NameLabel = "converge.dev/name"
	// NamespaceLabel carries the namespace of the SyncTarget that manages an object.
	NamespaceLabel = "converge.dev/namespace"
	// PruneAnnotation set to "disabled" keeps an object when it leaves Git.
	PruneAnnotation = "converge.dev/prune"
	// ReconcileAnnotation set to "disabled" makes converge leave an object's live state alone.
	ReconcileAnnotation = "converge.dev/reconcile"
	// RequestedAtAnnotation on a SyncTarget asks for an immediate reconcile
	// (and a retry of a revision that was rolled back); `converge reconcile` sets it.
	RequestedAtAnnotation = "converge.dev/requestedAt"
	// PushedAtAnnotation on a SyncTarget announces a push webhook accepted for its
	// repository (an RFC 3339 time): the webhook receiver of any replica or shard sets it,
	// and the replica reconciling the SyncTarget polls its source at once. Unlike
	// RequestedAtAnnotation it forces no full apply and no retry of a refused revision.
	PushedAtAnnotation = "converge.dev/pushedAt"
	// SubstituteAnnotation set to "disabled" leaves an object out of spec.postBuild
	// variable substitution.
	SubstituteAnnotation = "converge.dev/substitute"
	// CleanUpOtherToolsAnnotation set to "enabled" on a SyncTarget makes a takeover of an
	// object another tool made (Flux, Helm, Argo CD, kubectl) also remove the labels and
	// annotations that tool left on it, unless Git sets them.
	CleanUpOtherToolsAnnotation = "converge.dev/clean-up-other-tools"
	// EnabledValue is the value that turns on CleanUpOtherToolsAnnotation.
	EnabledValue = "enabled"
	// DisabledValue is the value that turns off PruneAnnotation, ReconcileAnnotation and
	// SubstituteAnnotation.
	DisabledValue = "disabled"
)

// Condition types of a SyncTarget, after the kstatus conventions.
const (
	// ReadyCondition is True when the last revision was applied and is healthy.
	ReadyCondition = "Ready"
	// ReconcilingCondition is True while a reconcile is in progress.
	ReconcilingCondition = "Reconciling"
	// StalledCondition is True when the spec cannot be acted on until it changes.
	StalledCondition = "Stalled"
	// HealthyCondition is True when every applied object passed its health checks.
	HealthyCondition = "Healthy"
	// SourceVerifiedCondition is True when the revision last fetched carries a signature
	// by a trusted key (spec.source.verify, spec.oci.verify); False with reason
	// VerificationFailed when not.
	SourceVerifiedCondition = "SourceVerified"
)

// Reasons set on the conditions of a SyncTarget.
const (
	FetchFailedReason        = "FetchFailed"
	BuildFailedReason        = "BuildFailed"
	ApplyFailedReason        = "ApplyFailed"
	PruneFailedReason        = "PruneFailed"
	HealthCheckFailedReason  = "HealthCheckFailed"
	RolledBackReason         = "RolledBack"
	DependencyNotReadyReason = "DependencyNotReady"
	OutsideSyncWindowReason  = "OutsideSyncWindow"
	SucceededReason          = "Succeeded"
	ProgressingReason        = "Progressing"
	SuspendedReason          = "Suspended"
	InvalidSpecReason        = "InvalidSpec"
	TooManyDeletionsReason   = "TooManyDeletions"
	VerificationFailedReason = "VerificationFailed"
	DecryptionFailedReason   = "DecryptionFailed"
	SubstitutionFailedReason = "SubstitutionFailed"
)

// Defaults applied by the getters when a field is unset.
const (
	DefaultInterval     = time.Minute
	DefaultTimeout      = 5 * time.Minute
	DefaultHistoryLimit = 10
)

// CronSchedule is a cron expression as github.com/robfig/cron/v3 reads it: five fields
// (minute hour day-of-month month day-of-week), or a descriptor such as @hourly or
// "@every 1h30m", optionally preceded by CRON_TZ=<IANA zone>. The API server checks the
// syntax and the range of every number; the daemon rejects what the pattern cannot see
// (a range whose start is past its end).
// +kubebuilder:validation:MaxLength=128
// +kubebuilder:validation:XValidation:rule=`self.matches(r'^ *((CRON_)?TZ=[A-Za-z0-9_+/-]+ +)?(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|@every +([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+|(\*|\?|[0-5]?[0-9](-[0-5]?[0-9])?)(/[1-9][0-9]*)?(,(\*|\?|[0-5]?[0-9](-[0-5]?[0-9])?)(/[1-9][0-9]*)?)* +(\*|\?|(2[0-3]|1[0-9]|0?[0-9])(-(2[0-3]|1[0-9]|0?[0-9]))?)(/[1-9][0-9]*)?(,(\*|\?|(2[0-3]|1[0-9]|0?[0-9])(-(2[0-3]|1[0-9]|0?[0-9]))?)(/[1-9][0-9]*)?)* +(\*|\?|(3[01]|[12][0-9]|0?[1-9])(-(3[01]|[12][0-9]|0?[1-9]))?)(/[1-9][0-9]*)?(,(\*|\?|(3[01]|[12][0-9]|0?[1-9])(-(3[01]|[12][0-9]|0?[1-9]))?)(/[1-9][0-9]*)?)* +(\*|\?|(1[0-2]|0?[1-9]|(?i:JAN|FEB|MAR|APR|MAY|JUN|JUL|AUG|SEP|OCT|NOV|DEC))(-(1[0-2]|0?[1-9]|(?i:JAN|FEB|MAR|APR|MAY|JUN|JUL|AUG|SEP|OCT|NOV|DEC)))?)(/[1-9][0-9]*)?(,(\*|\?|(1[0-2]|0?[1-9]|(?i:JAN|FEB|MAR|APR|MAY|JUN|JUL|AUG|SEP|OCT|NOV|DEC))(-(1[0-2]|0?[1-9]|(?i:JAN|FEB|MAR|APR|MAY|JUN|JUL|AUG|SEP|OCT|NOV|DEC)))?)(/[1-9][0-9]*)?)* +(\*|\?|([0-6]|(?i:SUN|MON|TUE|WED|THU|FRI|SAT))(-([0-6]|(?i:SUN|MON|TUE|WED|THU|FRI|SAT)))?)(/[1-9][0-9]*)?(,(\*|\?|([0-6]|(?i:SUN|MON|TUE|WED|THU|FRI|SAT))(-([0-6]|(?i:SUN|MON|TUE|WED|THU|FRI|SAT)))?)(/[1-9][0-9]*)?)*) *$')`,message="must be a cron expression: five fields (minute hour day-of-month month day-of-week) or a descriptor such as @hourly or @every 1h, optionally after CRON_TZ=<zone>"
type CronSchedule string

// GitRef says which revision of a repository to follow. Exactly one field is set.
// +kubebuilder:validation:XValidation:rule="[has(self.branch), has(self.tag), has(self.semver), has(self.commit), has(self.name)].filter(x, x).size() == 1",message="exactly one of branch, tag, semver, commit or name must be set"
type GitRef struct {
	// Branch to follow, e.g. main.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=250
	// +optional
	Branch string `json:"branch,omitempty"`

	// Tag to follow, e.g. v1.2.3.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=250
	// +optional
	Tag string `json:"tag,omitempty"`

	// SemVer is a version constraint, e.g. ">=1.0.0 <2.0.0"; the highest matching tag is followed.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=250
	// +optional
	SemVer string `json:"semver,omitempty"`

	// Commit is a full commit SHA (40 hex digits, or 64 for SHA-256 repositories).
	// +kubebuilder:validation:Pattern=`^([0-9a-f]{40}|[0-9a-f]{64})$`
	// +optional
	Commit string `json:"commit,omitempty"`

	// Name is any fully qualified ref, e.g. refs/pull/7/head.
	// +kubebuilder:validation:Pattern=`^refs/[^\s~^:?*\[\\]+$`
	// +kubebuilder:validation:MaxLength=250
	// +optional
	Name string `json:"name,omitempty"`
}

// LocalObjectReference names an object in the SyncTarget's own namespace.
type LocalObjectReference struct {
	// Name of the referent.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// GitSource is where the desired state lives.
// +kubebuilder:validation:XValidation:rule="!(has(self.interval) && has(self.schedule))",message="interval and schedule are mutually exclusive"
// +kubebuilder:validation:XValidation:rule="!has(self.verify) || !has(self.verify.mode) || self.verify.mode == 'HEAD' || has(self.ref.tag) || has(self.ref.semver)",message="verify.mode Tag and TagAndHEAD need ref.tag or ref.semver"
type GitSource struct {
	// URL of the repository: https://, http://, ssh:// or the scp-like form git@host:path.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^((https?|ssh)://[^\s/?#]+[^\s]*|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\s/][^\s]*)$')`,message="must be an https://, http:// or ssh:// URL, or the scp-like form user@host:path"
	// +required
	URL string `json:"url"`

	// Ref is the branch, tag, semver range, commit or named ref to follow.
	// +required
	Ref GitRef `json:"ref"`

	// SecretRef names a Secret with credentials: username and password, or bearerToken,
	// optionally ca.crt, for HTTPS; identity (and password) with known_hosts for SSH.
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

	// WebhookSecretRef names a Secret whose "token" key signs push webhooks for this repository.
	// +optional
	WebhookSecretRef *LocalObjectReference `json:"webhookSecretRef,omitempty"`

	// Verify deploys only revisions signed by a trusted key.
	// +optional
	Verify *VerifySpec `json:"verify,omitempty"`
}

// VerifyMode says which object of a revision must carry a trusted signature.
// +kubebuilder:validation:Enum=HEAD;Tag;TagAndHEAD
type VerifyMode string

const (
	// VerifyHEAD checks the signature of the commit the ref resolves to.
	VerifyHEAD VerifyMode = "HEAD"
	// VerifyTag checks the signature of the annotated tag the ref resolves to.
	VerifyTag VerifyMode = "Tag"
	// VerifyTagAndHEAD checks both the annotated tag and the commit it points at.
	VerifyTagAndHEAD VerifyMode = "TagAndHEAD"
)

// VerifySpec names the keys a revision must be signed with. An unsigned or wrongly signed
// revision is never rendered or applied: the SyncTarget keeps its previous revision and
// reports SourceVerified=False with reason VerificationFailed.
type VerifySpec struct {
	// Mode is HEAD (the commit), Tag (the annotated tag; needs ref.tag or ref.semver) or
	// TagAndHEAD (both). Default HEAD.
	// +kubebuilder:default=HEAD
	// +optional
	Mode VerifyMode `json:"mode,omitempty"`

	// SecretRef names a Secret in the SyncTarget's namespace whose values are the trusted
	// keys: ASCII-armored OpenPGP public keys, and SSH public keys or allowed-signers lines
	// (for commits signed with gpg.format=ssh). Every key of every value is trusted, so a
	// key is rotated by adding the new one before removing the old.
	// +required
	SecretRef LocalObjectReference `json:"secretRef"`
}

// DecryptionSpec says how to decrypt the encrypted files of a revision before rendering.
type DecryptionSpec struct {
	// Provider of the encryption; only sops.
	// +kubebuilder:validation:Enum=sops
	// +required
	Provider string `json:"provider"`

	// SecretRef names a Secret in the SyncTarget's namespace holding the private keys:
	// values under keys ending in .agekey are age identities, values under keys ending in
	// .asc are ASCII-armored OpenPGP private keys.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
}

// SubstituteReference names a ConfigMap or Secret whose data are substitution variables.
type SubstituteReference struct {
	// Kind of the referent: ConfigMap or Secret.
	// +kubebuilder:validation:Enum=ConfigMap;Secret
	// +required
	Kind string `json:"kind"`

	// Name of the referent, in the SyncTarget's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`

	// Optional lets the referent be missing: its variables are then unset.
	// +optional
	Optional bool `json:"optional,omitempty"`
}

// PostBuildSpec replaces ${var} and ${var:=default} in the rendered objects.
type PostBuildSpec struct {
	// Substitute holds variables inline; they win over those of SubstituteFrom.
	// +kubebuilder:validation:MaxProperties=256
	// +kubebuilder:validation:XValidation:rule=`self.all(k, k.matches(r'^[_a-zA-Z][_a-zA-Z0-9]*$'))`,message="variable names must match ^[_a-zA-Z][_a-zA-Z0-9]*$"
	// +optional
	Substitute map[string]string `json:"substitute,omitempty"`

	// SubstituteFrom reads variables from ConfigMaps and Secrets, in order (a later one
	// wins). A change to one of them triggers a sync.
	// +kubebuilder:validation:MaxItems=32
	// +optional
	SubstituteFrom []SubstituteReference `json:"substituteFrom,omitempty"`

	// Strict makes a variable that is unset and has no default an error naming every
	// such variable (default true). When false it is replaced by the empty string.
	// +kubebuilder:default=true
	// +optional
	Strict *bool `json:"strict,omitempty"`
}

// NamespacedObjectKindReference names an object to wait for.
type NamespacedObjectKindReference struct {
	// APIVersion of the referent, e.g. apps/v1.
	// +kubebuilder:validation:MinLength=1
	// +required
	APIVersion string `json:"apiVersion"`

	// Kind of the referent.
	// +kubebuilder:validation:MinLength=1
	// +required
	Kind string `json:"kind"`

	// Name of the referent.
	// +kubebuilder:validation:MinLength=1
	// +required
	Name string `json:"name"`

	// Namespace of the referent; defaults to the SyncTarget's target namespace.
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// CustomHealthCheck tells how to read the health of a custom kind with CEL expressions
// evaluated on the object (as "self"). The first that holds wins: failed, current, inProgress.
type CustomHealthCheck struct {
	// APIVersion of the kind, e.g. example.com/v1.
	// +kubebuilder:validation:MinLength=1
	// +required
	APIVersion string `json:"apiVersion"`

	// Kind the expressions apply to.
	// +kubebuilder:validation:MinLength=1
	// +required
	Kind string `json:"kind"`

	// Current is true when the object is healthy.
	// +kubebuilder:validation:MinLength=1
	// +required
	Current string `json:"current"`

	// Failed is true when the object has failed.
	// +optional
	Failed string `json:"failed,omitempty"`

	// InProgress is true while the object is still progressing.
	// +optional
	InProgress string `json:"inProgress,omitempty"`
}

// RollbackSpec controls the automatic rollback to the last healthy revision.
type RollbackSpec struct {
	// Enabled rolls a revision that fails to apply or to become healthy back to the
	// last healthy one.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
}

// DependencyReference names a SyncTarget that must be Ready first.
type DependencyReference struct {
	// Name of the SyncTarget.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`

	// Namespace of the SyncTarget; defaults to this one's.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// SyncWindowKind says whether a window allows or denies syncs.
// +kubebuilder:validation:Enum=allow;deny
type SyncWindowKind string

const (
	// AllowWindow allows syncs only while one of the allow windows is open.
	AllowWindow SyncWindowKind = "allow"
	// DenyWindow forbids syncs while it is open.
	DenyWindow SyncWindowKind = "deny"
)

// SyncWindow is a recurring period, opening on a cron schedule and lasting a duration.
type SyncWindow struct {
	// Kind is allow or deny.
	// +required
	Kind SyncWindowKind `json:"kind"`

	// Schedule is when the window opens.
	// +required
	Schedule CronSchedule `json:"schedule"`

	// Duration the window stays open.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$') && duration(self) > duration('0s')`,message="must be a positive duration such as 30s, 5m or 1h30m"
	// +required
	Duration metav1.Duration `json:"duration"`

	// TimeZone is the IANA name of the zone the schedule is read in (default UTC).
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_+/-]+$`
	// +kubebuilder:validation:MaxLength=64
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
}

// SyncTargetSpec is the desired state: which repository, which path, how to apply it.
// +kubebuilder:validation:XValidation:rule="[has(self.source), has(self.chart), has(self.oci)].filter(x, x).size() == 1",message="exactly one of source, chart and oci must be set"
// +kubebuilder:validation:XValidation:rule="!has(self.chart) || !has(self.path) || size(self.path) == 0",message="path applies to a Git source, not to a chart"
type SyncTargetSpec struct {
	// Source is the Git repository and ref to follow. Exactly one of source, chart and
	// oci is set.
	// +optional
	Source GitSource `json:"source,omitzero"`

	// Chart is a Helm chart of a chart repository or an OCI registry to follow instead of
	// a Git repository. A chart kept in Git is deployed with source and a path holding
	// its Chart.yaml.
	// +optional
	Chart *ChartSource `json:"chart,omitempty"`

	// OCI is a configuration artifact of an OCI registry to follow instead of a Git
	// repository: a kustomization, plain YAML or a chart directory, rendered from path
	// inside it as the same content in Git is.
	// +optional
	OCI *OCISource `json:"oci,omitempty"`

	// Helm says how a chart is rendered: release name, values, CRD policy.
	// +optional
	Helm *HelmSpec `json:"helm,omitempty"`

	// KubeConfig sends the objects to another cluster: applies, prunes, health checks,
	// drift watches and dry-runs go there, impersonating serviceAccountName there.
	// +optional
	KubeConfig *KubeConfigReference `json:"kubeConfig,omitempty"`

	// Path inside the repository (or the OCI artifact) to render, relative to its root
	// (default: the root).
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.matches('(^|/)[.][.](/|$)')",message="must be a relative path inside the repository, without '..'"
	// +optional
	Path string `json:"path,omitempty"`

	// TargetNamespace sets the namespace of every namespaced object rendered.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	TargetNamespace string `json:"targetNamespace,omitempty"`

	// Prune deletes the objects this SyncTarget applied once they leave Git.
	// +optional
	Prune bool `json:"prune,omitempty"`

	// MaxDeletions guards pruning: a revision that would delete more objects than this —
	// a count, or a percentage of the objects the SyncTarget applied, such as "25%" — is
	// refused before anything is applied, and the SyncTarget is Stalled with reason
	// TooManyDeletions until the source moves, the spec changes or a user asks for a
	// reconcile. A wrong path or a broken kustomization then cannot delete most of an
	// application. The objects of the last healthy revision are counted: what a revision
	// that never became healthy added is deleted without counting. Unset, any number may
	// be deleted.
	// +kubebuilder:validation:XValidation:rule=`type(self) == int ? self >= 0 : self.matches(r'^(100|[1-9]?[0-9])%$')`,message="must be a count (0 or more) or a percentage from 0% to 100%"
	// +kubebuilder:validation:XIntOrString
	// +optional
	MaxDeletions *intstr.IntOrString `json:"maxDeletions,omitempty"`

	// AllowEmpty lets a revision that renders no objects at all prune everything this
	// SyncTarget applied. Without it such a revision fails instead: an empty render is
	// more often a wrong path or a broken commit than a wish to delete everything.
	// +optional
	AllowEmpty bool `json:"allowEmpty,omitempty"`

	// Wait health-checks every applied object before the revision counts as healthy.
	// +kubebuilder:default=true
	// +optional
	Wait *bool `json:"wait,omitempty"`

	// HealthChecks lists further objects to wait for.
	// +kubebuilder:validation:MaxItems=64
	// +optional
	HealthChecks []NamespacedObjectKindReference `json:"healthChecks,omitempty"`

	// HealthCheckExprs read the health of custom kinds with CEL.
	// +kubebuilder:validation:MaxItems=64
	// +optional
	HealthCheckExprs []CustomHealthCheck `json:"healthCheckExprs,omitempty"`

	// Timeout bounds applying and health checking one revision (default 5m).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$') && duration(self) > duration('0s')`,message="must be a positive duration such as 30s, 5m or 1h30m"
	// +kubebuilder:default="5m"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// Rollback controls the automatic rollback to the last healthy revision.
	// +kubebuilder:default={enabled: true}
	// +optional
	Rollback *RollbackSpec `json:"rollback,omitempty"`

	// DependsOn lists SyncTargets that must be Ready at their current revision first.
	// +kubebuilder:validation:MaxItems=64
	// +optional
	DependsOn []DependencyReference `json:"dependsOn,omitempty"`

	// ServiceAccountName is impersonated for every apply and prune.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// Suspend stops reconciling until set back to false.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// SyncWindows allow or deny syncs at given times.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	SyncWindows []SyncWindow `json:"syncWindows,omitempty"`

	// Decryption decrypts SOPS-encrypted files in memory, inside the confined render.
	// +optional
	Decryption *DecryptionSpec `json:"decryption,omitempty"`

	// PostBuild substitutes variables in the rendered objects.
	// +optional
	PostBuild *PostBuildSpec `json:"postBuild,omitempty"`

	// HistoryLimit caps the number of history entries kept (default 10).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:default=10
	// +optional
	HistoryLimit *int32 `json:"historyLimit,omitempty"`
}

// InventoryEntry identifies one applied object.
type InventoryEntry struct {
	// ID is "<namespace>_<name>_<group>_<kind>".
	// +required
	ID string `json:"id"`

	// Version is the API version the object was applied with.
	// +required
	Version string `json:"v"`
}

// ResourceInventory lists the objects applied by a SyncTarget.
type ResourceInventory struct {
	// Entries of the inventory, sorted by ID.
	// +optional
	Entries []InventoryEntry `json:"entries,omitempty"`
}

// SyncResult is the outcome of one sync attempt.
// +kubebuilder:validation:Enum=Succeeded;Failed;RolledBack
type SyncResult string

const (
	// SyncSucceeded means the revision was applied and became healthy.
	SyncSucceeded SyncResult = "Succeeded"
	// SyncFailed means the revision failed and nothing was rolled back.
	SyncFailed SyncResult = "Failed"
	// SyncRolledBack means the revision failed and the last healthy one was restored.
	SyncRolledBack SyncResult = "RolledBack"
)

// HistoryEntry records one sync attempt.
type HistoryEntry struct {
	// Revision attempted, as <ref>@sha1:<hex>.
	// +required
	Revision string `json:"revision"`

	// StartedAt is when the attempt began.
	// +required
	StartedAt metav1.Time `json:"startedAt"`

	// FinishedAt is when it ended.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`

	// Duration of the attempt, to the millisecond (the times above are to the second).
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty"`

	// Result of the attempt.
	// +required
	Result SyncResult `json:"result"`

	// Created counts the objects created.
	// +optional
	Created int32 `json:"created"`

	// Configured counts the objects changed.
	// +optional
	Configured int32 `json:"configured"`

	// Deleted counts the objects pruned.
	// +optional
	Deleted int32 `json:"deleted"`

	// Message says what happened, and why it failed.
	// +optional
	Message string `json:"message,omitempty"`

	// Values are the inline chart values (spec.helm.values, {} when none) the attempt
	// rendered with, kept when they are at most 4 KiB of JSON so that a rollback to the
	// attempt's revision restores them with it. What spec.helm.valuesFrom points at (it may
	// be a Secret) is never kept.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +optional
	Values *apiextensionsv1.JSON `json:"values,omitempty"`

	// Origin is where the OCI artifact of the revision says it comes from (its manifest's
	// org.opencontainers.image.source and .revision annotations), for a SyncTarget of
	// spec.oci: the pusher's words, shown, never trusted.
	// +optional
	Origin *ArtifactOrigin `json:"origin,omitempty"`

	// Hooks are the hooks the attempt ran (Helm's and Argo CD's), in the order it ran them,
	// with their results: at most 20.
	// +kubebuilder:validation:MaxItems=20
	// +optional
	Hooks []HookRun `json:"hooks,omitempty"`
}

// HookRun is one hook an attempt ran.
type HookRun struct {
	// Event is when it ran: pre-install, pre-upgrade, pre-rollback, sync, post-install,
	// post-upgrade, post-rollback or sync-fail.
	// +kubebuilder:validation:MaxLength=32
	// +required
	Event string `json:"event"`
	// Kind of the hook's object.
	// +kubebuilder:validation:MaxLength=253
	// +required
	Kind string `json:"kind"`
	// Name of the hook's object.
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// Result is Succeeded or Failed.
	// +required
	Result SyncResult `json:"result"`
	// Duration of the hook: its apply and, for a Job or a Pod, the wait for it.
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty"`
	// Message says why it failed.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Message string `json:"message,omitempty"`
}

// SyncTargetStatus is what converge observed and did.
type SyncTargetStatus struct {
	// ObservedGeneration is the generation of the spec last acted on to the end.
	// +kubebuilder:default=-1
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready, Reconciling, Stalled and Healthy.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// LastFetchedRevision is the revision last fetched from the source.
	// +optional
	LastFetchedRevision string `json:"lastFetchedRevision,omitempty"`

	// LastAttemptedRevision is the revision last tried.
	// +optional
	LastAttemptedRevision string `json:"lastAttemptedRevision,omitempty"`

	// LastAppliedRevision is the revision whose objects are in the cluster now.
	// +optional
	LastAppliedRevision string `json:"lastAppliedRevision,omitempty"`

	// LastHealthyRevision is the last revision that was applied and became healthy:
	// the one a failed revision is rolled back to.
	// +optional
	LastHealthyRevision string `json:"lastHealthyRevision,omitempty"`

	// LastHandledReconcileAt is the value of the converge.dev/requestedAt annotation last acted on.
	// +optional
	LastHandledReconcileAt string `json:"lastHandledReconcileAt,omitempty"`

	// Inventory lists the objects applied from LastAppliedRevision.
	// +optional
	Inventory *ResourceInventory `json:"inventory,omitempty"`

	// History of sync attempts, newest first, capped at spec.historyLimit.
	// +optional
	History []HistoryEntry `json:"history,omitempty"`

	// Attempts counts the sync attempts ever recorded in History, also those the cap
	// dropped since: a chart's .Release.Revision is one more, and keeps growing as
	// Helm's does.
	// +optional
	Attempts int64 `json:"attempts,omitempty"`
}

// SyncTarget keeps a set of objects in the cluster converged on a path of a Git repository.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=st,categories=converge
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Revision",type=string,JSONPath=`.status.lastAppliedRevision`
// +kubebuilder:printcolumn:name="Health",type=string,JSONPath=`.status.conditions[?(@.type=="Healthy")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
type SyncTarget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec SyncTargetSpec `json:"spec"`

	// +kubebuilder:default={"observedGeneration":-1}
	// +optional
	Status SyncTargetStatus `json:"status,omitempty"`
}

// SyncTargetList is a list of SyncTargets.
// +kubebuilder:object:root=true
type SyncTargetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SyncTarget `json:"items"`
}
