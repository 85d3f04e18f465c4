package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NotifierKind is the kind name of the Notifier API.
const NotifierKind = "Notifier"

// NotificationEvent is what happened to a SyncTarget that a Notifier may report.
// +kubebuilder:validation:Enum=Succeeded;Failed;RolledBack;Stalled;DriftCorrected;Progressing
type NotificationEvent string

// The events a Notifier reports.
const (
	// EventSucceeded: a revision was applied and became healthy.
	EventSucceeded NotificationEvent = "Succeeded"
	// EventFailed: a revision failed and nothing was rolled back.
	EventFailed NotificationEvent = "Failed"
	// EventRolledBack: a revision failed and the last healthy one was applied again.
	EventRolledBack NotificationEvent = "RolledBack"
	// EventStalled: the SyncTarget cannot work as written until its spec changes.
	EventStalled NotificationEvent = "Stalled"
	// EventDriftCorrected: objects changed outside Git were restored.
	EventDriftCorrected NotificationEvent = "DriftCorrected"
	// EventProgressing: a revision started to deploy (a "pending" commit status).
	EventProgressing NotificationEvent = "Progressing"
)

// DefaultNotificationEvents are reported when spec.events is empty: every outcome, not the
// start of a deploy — except for commit-status providers, which add Progressing (pending).
var DefaultNotificationEvents = []NotificationEvent{
	EventSucceeded, EventFailed, EventRolledBack, EventStalled, EventDriftCorrected,
}

// ProviderType says where a Notifier delivers.
// +kubebuilder:validation:Enum=webhook;slack;teams;discord;github;gitlab;gitea;bitbucket
type ProviderType string

// The provider types.
const (
	WebhookProvider   ProviderType = "webhook"
	SlackProvider     ProviderType = "slack"
	TeamsProvider     ProviderType = "teams"
	DiscordProvider   ProviderType = "discord"
	GitHubProvider    ProviderType = "github"
	GitLabProvider    ProviderType = "gitlab"
	GiteaProvider     ProviderType = "gitea"
	BitbucketProvider ProviderType = "bitbucket"
)

// IsCommitStatus reports whether the provider sets commit statuses on a Git forge
// (rather than posting a message).
func (p ProviderType) IsCommitStatus() bool {
	switch p {
	case GitHubProvider, GitLabProvider, GiteaProvider, BitbucketProvider:
		return true
	}
	return false
}

// NotificationProvider is where and how a Notifier delivers.
// +kubebuilder:validation:XValidation:rule="self.type in ['github','gitlab','gitea','bitbucket'] || has(self.address) || has(self.secretRef)",message="address (or a secretRef with an address key) is required for webhook, slack, teams and discord"
// +kubebuilder:validation:XValidation:rule="!has(self.repository) || self.type in ['github','gitlab','gitea','bitbucket']",message="repository applies only to github, gitlab, gitea and bitbucket"
type NotificationProvider struct {
	// Type of the provider.
	// +required
	Type ProviderType `json:"type"`

	// Address is the URL to post to: the webhook URL of webhook, slack, teams and discord
	// (or the Secret's "address" key, to keep it secret), or the API base of a self-hosted
	// forge, e.g. https://gitlab.example.com (default: the public service of the type:
	// api.github.com, gitlab.com, gitea.com, api.bitbucket.org; SyncTargets whose source URL
	// is on another host are skipped).
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^https?://[^\s/?#]+[^\s]*$')`,message="must be an http:// or https:// URL"
	// +optional
	Address string `json:"address,omitempty"`

	// Repository overrides the repository commit statuses are set on, e.g. owner/repo
	// (a GitLab project path may have subgroups). Default: from the SyncTarget's URL.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+$`
	// +optional
	Repository string `json:"repository,omitempty"`

	// SecretRef names a Secret in the Notifier's namespace: "token" (forges; GitHub, GitLab,
	// Gitea), "username" and "password" (Bitbucket app password, or basic auth of a
	// webhook), "hmacKey" (signs generic webhooks) or "address" (a chat webhook URL).
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
}

// NotifierSpec says which SyncTargets to report on, what, and where.
type NotifierSpec struct {
	// TargetSelector selects the SyncTargets of the namespace to report on; empty: all.
	// +optional
	TargetSelector *metav1.LabelSelector `json:"targetSelector,omitempty"`

	// Events to report (default: Succeeded, Failed, RolledBack, Stalled, DriftCorrected;
	// commit-status providers add Progressing, the pending status).
	// +kubebuilder:validation:MaxItems=6
	// +listType=set
	// +optional
	Events []NotificationEvent `json:"events,omitempty"`

	// Provider is where to deliver.
	// +required
	Provider NotificationProvider `json:"provider"`

	// Summary is a Go text/template for the message text, executed over a
	// notify.Message (.Event, .Target, .Namespace, .Revision, .Commit, .Message, .Created,
	// .Configured, .Deleted). Default: "<namespace>/<name>: <event> <revision>: <message>".
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Summary string `json:"summary,omitempty"`

	// Suspend stops delivering; what happens meanwhile is not reported later.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// NotificationCursor records, for one SyncTarget, what a Notifier last delivered (or gave
// up on), so that a restart neither loses nor repeats a notification.
type NotificationCursor struct {
	// Name of the SyncTarget.
	// +required
	Name string `json:"name"`

	// Result is the key of the newest history entry reported: "<startedAt>/<revision>".
	// +optional
	Result string `json:"result,omitempty"`

	// Progressing is the key of the deploy start last reported.
	// +optional
	Progressing string `json:"progressing,omitempty"`

	// Stalled is the key of the Stalled condition last reported.
	// +optional
	Stalled string `json:"stalled,omitempty"`

	// Drift is the key of the drift correction last reported.
	// +optional
	Drift string `json:"drift,omitempty"`

	// Digest of the last message delivered: an identical message next is not sent again.
	// +optional
	Digest string `json:"digest,omitempty"`
}

// NotifierStatus is what the Notifier delivered.
type NotifierStatus struct {
	// ObservedGeneration is the generation of the spec last acted on.
	// +kubebuilder:default=-1
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready (False with reason DeliveryFailed after a give-up, or
	// InvalidSpec).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Targets holds a cursor per SyncTarget reported on.
	// +listType=map
	// +listMapKey=name
	// +optional
	Targets []NotificationCursor `json:"targets,omitempty"`

	// Delivered counts notifications delivered.
	// +optional
	Delivered int64 `json:"delivered,omitempty"`

	// Failed counts notifications given up on.
	// +optional
	Failed int64 `json:"failed,omitempty"`
}

// Reasons of a Notifier's Ready condition.
const (
	// DeliveredReason: the last notification was delivered.
	DeliveredReason = "Delivered"
	// DeliveryFailedReason: a notification was given up on after its retries, or refused.
	DeliveryFailedReason = "DeliveryFailed"
)

// Notifier reports what happens to the SyncTargets of its namespace: commit statuses on a
// Git forge, or messages to a chat or a webhook.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=converge
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.provider.type`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Delivered",type=integer,JSONPath=`.status.delivered`
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.failed`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
type Notifier struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec NotifierSpec `json:"spec"`

	// +kubebuilder:default={"observedGeneration":-1}
	// +optional
	Status NotifierStatus `json:"status,omitempty"`
}

// NotifierList is a list of Notifiers.
// +kubebuilder:object:root=true
type NotifierList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Notifier `json:"items"`
}

// GetEvents is the events the Notifier reports, defaults applied.
func (in *Notifier) GetEvents() []NotificationEvent {
	if len(in.Spec.Events) > 0 {
		return in.Spec.Events
	}
	ev := append([]NotificationEvent(nil), DefaultNotificationEvents...)
	if in.Spec.Provider.Type.IsCommitStatus() {
		ev = append(ev, EventProgressing)
	}
	return ev
}

// Reports says whether the Notifier reports events of kind e.
func (in *Notifier) Reports(e NotificationEvent) bool {
	for _, x := range in.GetEvents() {
		if x == e {
			return true
		}
	}
	return false
}
