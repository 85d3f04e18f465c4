package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SyncTargetSetKind is the kind name of the SyncTargetSet API.
const SyncTargetSetKind = "SyncTargetSet"

// Labels converge sets on the SyncTargets a SyncTargetSet generates.
const (
	// SetLabel carries the name of the SyncTargetSet that generated a SyncTarget.
	SetLabel = "converge.dev/set"
	// ClusterLabel marks a kubeconfig Secret as a cluster for the clusters generator;
	// its value is the cluster's name (default: the Secret's name).
	ClusterLabel = "converge.dev/cluster"
)

// Condition reasons of a SyncTargetSet.
const (
	GenerationFailedReason   = "GenerationFailed"
	TemplateInvalidReason    = "TemplateInvalid"
	RolloutProgressingReason = "RolloutProgressing"
	RolloutFailedReason      = "RolloutFailed"
)

// ListGenerator yields the parameter sets written inline.
type ListGenerator struct {
	// Elements are maps of parameter name to string value.
	// +kubebuilder:validation:MaxItems=1000
	// +kubebuilder:validation:items:MaxProperties=64
	// +required
	Elements []map[string]string `json:"elements"`
}

// ClustersGenerator yields one parameter set per kubeconfig Secret of the set's namespace
// labelled converge.dev/cluster and matching the selector: name (the label's value, or the
// Secret's name), secretName, and labels.<key> for each of the Secret's labels.
type ClustersGenerator struct {
	// Selector of the Secrets; empty selects every Secret labelled converge.dev/cluster.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// GitDirectoriesGenerator yields one parameter set per directory of a Git source whose
// path matches include and not exclude: path, path.basename, path.segments[i] are given
// as path, path.basename and path.segmentN (N from 0).
type GitDirectoriesGenerator struct {
	// Source is the repository and ref to read the directories from.
	// +required
	Source GitSource `json:"source"`

	// Include lists globs of directory paths (path.Match syntax, "*" within a segment).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=1024
	// +required
	Include []string `json:"include"`

	// Exclude lists globs of directory paths left out.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=1024
	// +optional
	Exclude []string `json:"exclude,omitempty"`
}

// ForgeType is a forge whose pull requests a pullRequests generator lists.
// +kubebuilder:validation:Enum=github;gitlab;gitea;bitbucket
type ForgeType string

// The forges of pullRequests generators.
const (
	GitHubForge    ForgeType = "github"
	GitLabForge    ForgeType = "gitlab"
	GiteaForge     ForgeType = "gitea"
	BitbucketForge ForgeType = "bitbucket"
)

// PullRequestsGenerator yields one parameter set per open pull request (merge request) of
// a repository on a forge that passes its filters: number, branch, targetBranch, headSHA,
// shortSHA, headRef (the ref that holds the head in the repository itself, such as
// refs/pull/7/head), slug (the branch as a DNS label), author, labels (comma-separated)
// and url. A pull request from a fork, or from an author the forge does not give write
// access, yields nothing until it carries approvalLabel.
type PullRequestsGenerator struct {
	// Provider is the forge: github, gitlab, gitea (Gitea and Forgejo) or bitbucket.
	// +required
	Provider ForgeType `json:"provider"`

	// Address is the forge's API base (GitHub Enterprise: https://host/api/v3; GitLab,
	// Gitea: the server's root); unset, the provider's public service.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^https?://[^\s/?#]+(/[^\s?#]*)?$')`,message="must be an http:// or https:// URL without query or fragment"
	// +optional
	Address string `json:"address,omitempty"`

	// Repository on the forge: owner/repo (GitLab: group/subgroup/project; Bitbucket:
	// workspace/repo).
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)+$') && !self.contains('..')`,message="must be owner/repo"
	// +required
	Repository string `json:"repository"`

	// TokenSecretRef names a Secret of the set's namespace whose "token" key is sent, to
	// the forge's API host only, to list pull requests and ask a user's permission.
	// +optional
	TokenSecretRef *LocalObjectReference `json:"tokenSecretRef,omitempty"`

	// TargetBranches keeps the pull requests into these branches; unset, into any.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=255
	// +optional
	TargetBranches []string `json:"targetBranches,omitempty"`

	// Labels keeps the pull requests that carry every one of these labels.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=255
	// +optional
	Labels []string `json:"labels,omitempty"`

	// IncludeDrafts keeps draft pull requests too.
	// +optional
	IncludeDrafts bool `json:"includeDrafts,omitempty"`

	// ApprovalLabel is the label a maintainer adds to a pull request from a fork, or from
	// an author without write access to the repository, to have it deployed (the forge
	// lets only those it trusts add labels). Bitbucket has no labels: there, only pull
	// requests from the repository's own branches are deployed.
	// +kubebuilder:default=preview-approved
	// +kubebuilder:validation:MaxLength=255
	// +optional
	ApprovalLabel string `json:"approvalLabel,omitempty"`

	// MaxPreviews caps the pull requests that yield a preview: the most recently
	// updated are kept, the others wait (the set's status names them).
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=200
	// +optional
	MaxPreviews *int32 `json:"maxPreviews,omitempty"`

	// TTL removes the preview of a pull request not updated for this long.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$') && duration(self) > duration('0s')`,message="must be a positive duration such as 30s, 5m or 1h30m"
	// +optional
	TTL *metav1.Duration `json:"ttl,omitempty"`

	// Interval between listings of the pull requests (default 1m); the forge's
	// pull-request webhook lists at once.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$') && duration(self) >= duration('10s')`,message="must be a duration of at least 10s"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`

	// WebhookSecretRef names a Secret whose "token" key signs the forge's webhooks for
	// this repository (as a SyncTarget's webhookSecretRef): a signed pull-request event
	// lists the pull requests at once.
	// +optional
	WebhookSecretRef *LocalObjectReference `json:"webhookSecretRef,omitempty"`

	// CreateNamespace has the set create each preview's spec.targetNamespace, as
	// serviceAccountName (which needs the right to create and delete namespaces), labelled
	// converge.dev/preview-of=<set namespace>.<set name>, and delete it, as that account too,
	// when the preview goes or the set is deleted. A namespace that exists and is not the
	// set's is refused.
	// +optional
	CreateNamespace bool `json:"createNamespace,omitempty"`

	// DisableComments keeps converge from writing its comment on each pull request (its
	// preview's state and URLs, or why it has none, edited in place); comments need
	// tokenSecretRef.
	// +optional
	DisableComments bool `json:"disableComments,omitempty"`

	// DiffAgainst names a SyncTarget of the set's namespace, the one deploying the base
	// branch: each pull request's comment then carries the diff of what its preview
	// renders at the head against the same rendering at the revision that SyncTarget
	// applied last. Both sides are rendered as the preview (its path, variables and
	// values, read as serviceAccountName) behind the render boundary; Secret values are
	// masked and every value read from a Secret or a SOPS file is redacted wherever it
	// appears. Only pull requests that are deployed are rendered.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')`,message="must be a SyncTarget's name"
	// +optional
	DiffAgainst string `json:"diffAgainst,omitempty"`

	// DisableCommitStatus keeps converge from writing a commit status on each deployed
	// pull request's head commit, named converge/preview/<set namespace>/<set name>:
	// pending while its previews deploy, success when they are Ready at it, failure when
	// one failed or was rolled back. Statuses need tokenSecretRef, with the right to write
	// them.
	// +optional
	DisableCommitStatus bool `json:"disableCommitStatus,omitempty"`

	// ServiceAccountName is the service account the previews run as: the template's
	// spec.serviceAccountName must name it, as written, or the set is refused.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	ServiceAccountName string `json:"serviceAccountName"`
}

// BaseGenerator is one generator: exactly one field is set.
// +kubebuilder:validation:XValidation:rule="[has(self.list), has(self.clusters), has(self.gitDirectories), has(self.pullRequests)].filter(x, x).size() == 1",message="exactly one of list, clusters, gitDirectories or pullRequests must be set"
type BaseGenerator struct {
	// +optional
	List *ListGenerator `json:"list,omitempty"`
	// +optional
	Clusters *ClustersGenerator `json:"clusters,omitempty"`
	// +optional
	GitDirectories *GitDirectoriesGenerator `json:"gitDirectories,omitempty"`
	// +optional
	PullRequests *PullRequestsGenerator `json:"pullRequests,omitempty"`
}

// MatrixGenerator yields the product of two generators: every pair of their parameter
// sets, merged (the second wins on a shared name).
type MatrixGenerator struct {
	// +kubebuilder:validation:MinItems=2
	// +kubebuilder:validation:MaxItems=2
	// +required
	Generators []BaseGenerator `json:"generators"`
}

// Generator yields parameter sets: exactly one field is set.
// +kubebuilder:validation:XValidation:rule="[has(self.list), has(self.clusters), has(self.gitDirectories), has(self.pullRequests), has(self.matrix)].filter(x, x).size() == 1",message="exactly one of list, clusters, gitDirectories, pullRequests or matrix must be set"
type Generator struct {
	// +optional
	List *ListGenerator `json:"list,omitempty"`
	// +optional
	Clusters *ClustersGenerator `json:"clusters,omitempty"`
	// +optional
	GitDirectories *GitDirectoriesGenerator `json:"gitDirectories,omitempty"`
	// +optional
	PullRequests *PullRequestsGenerator `json:"pullRequests,omitempty"`
	// +optional
	Matrix *MatrixGenerator `json:"matrix,omitempty"`
}

// SyncTargetTemplateMeta is the metadata of a generated SyncTarget; every string may
// hold {{ .param }} references.
type SyncTargetTemplateMeta struct {
	// Name of the generated SyncTarget, e.g. "{{ .name }}-apps".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +required
	Name string `json:"name"`

	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// SyncTargetTemplate is the SyncTarget every parameter set is rendered into.
type SyncTargetTemplate struct {
	// +required
	Metadata SyncTargetTemplateMeta `json:"metadata"`

	// Spec is a SyncTarget spec whose strings may hold {{ .param }} references. It is
	// validated as a SyncTarget once rendered, before any generated SyncTarget is written.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	// +required
	Spec apiextensionsv1.JSON `json:"spec"`
}

// RolloutStep is one step of a progressive rollout: the generated SyncTargets whose
// labels match.
type RolloutStep struct {
	// MatchLabels select the SyncTargets of this step.
	// +kubebuilder:validation:MaxProperties=16
	// +required
	MatchLabels map[string]string `json:"matchLabels"`
}

// RolloutStrategy says how a change of the set reaches the generated SyncTargets.
type RolloutStrategy struct {
	// MaxConcurrent caps how many generated SyncTargets are updated at once: an update
	// waits until fewer than this many are not yet Ready. Unset, all at once.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxConcurrent *int32 `json:"maxConcurrent,omitempty"`

	// Steps update the SyncTargets step by step, each step waiting until every SyncTarget
	// of the steps before it is Ready at the new template; a failed step stops the
	// rollout. SyncTargets no step matches come last.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Steps []RolloutStep `json:"steps,omitempty"`
}

// SyncTargetSetSpec is a template and the generators of its parameters.
type SyncTargetSetSpec struct {
	// Generators yield the parameter sets; every set yields one SyncTarget.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +required
	Generators []Generator `json:"generators"`

	// Template of the generated SyncTargets.
	// +required
	Template SyncTargetTemplate `json:"template"`

	// Strategy of the rollout of a change; unset, every SyncTarget is updated at once.
	// +optional
	Strategy *RolloutStrategy `json:"strategy,omitempty"`

	// PreserveOnDeletion keeps the generated SyncTargets (and so their objects) when
	// they are no longer generated or the set is deleted: they are released, not deleted.
	// +optional
	PreserveOnDeletion bool `json:"preserveOnDeletion,omitempty"`
}

// GeneratedTarget is one SyncTarget of a set.
type GeneratedTarget struct {
	// Name of the SyncTarget.
	// +required
	Name string `json:"name"`

	// Ready is the SyncTarget's Ready status as last seen.
	// +optional
	Ready metav1.ConditionStatus `json:"ready,omitempty"`

	// Step is the index of the rollout step the SyncTarget belongs to.
	// +optional
	Step int32 `json:"step,omitempty"`

	// Pending is true while the SyncTarget waits for its rollout step.
	// +optional
	Pending bool `json:"pending,omitempty"`
}

// PullRequestState is an open pull request a pullRequests generator read: the
// SyncTargets it yields, or why it yields none.
type PullRequestState struct {
	// Number of the pull request (GitLab: its iid).
	Number int64 `json:"number"`
	// URL of its page on the forge.
	// +optional
	URL string `json:"url,omitempty"`
	// Author is its author's login.
	// +optional
	Author string `json:"author,omitempty"`
	// Branch is its head branch.
	// +optional
	Branch string `json:"branch,omitempty"`
	// HeadSHA is its head commit.
	// +optional
	HeadSHA string `json:"headSHA,omitempty"`
	// SyncTargets are the SyncTargets it yields.
	// +optional
	SyncTargets []string `json:"syncTargets,omitempty"`
	// Waiting says why it yields no SyncTarget (a fork without the approval label, a
	// draft, the cap of previews, the ttl).
	// +optional
	Waiting string `json:"waiting,omitempty"`
}

// SyncTargetSetStatus is what the set generated.
type SyncTargetSetStatus struct {
	// ObservedGeneration is the generation last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready, Reconciling, Stalled.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Targets are the generated SyncTargets, sorted by name.
	// +optional
	Targets []GeneratedTarget `json:"targets,omitempty"`

	// CurrentStep is the rollout step being rolled out.
	// +optional
	CurrentStep int32 `json:"currentStep,omitempty"`

	// PullRequests are the open pull requests of the pullRequests generators, by number.
	// +optional
	PullRequests []PullRequestState `json:"pullRequests,omitempty"`
}

// SyncTargetSet generates SyncTargets from a template and generators.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sts,categories=converge
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
type SyncTargetSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec SyncTargetSetSpec `json:"spec"`

	// +optional
	Status SyncTargetSetStatus `json:"status,omitempty"`
}

// SyncTargetSetList is a list of SyncTargetSets.
// +kubebuilder:object:root=true
type SyncTargetSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SyncTargetSet `json:"items"`
}
