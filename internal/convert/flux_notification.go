package convert

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// fluxProviders maps the Flux Provider types converge delivers to.
var fluxProviders = map[string]convergev1.ProviderType{
	"generic":   convergev1.WebhookProvider,
	"slack":     convergev1.SlackProvider,
	"msteams":   convergev1.TeamsProvider,
	"discord":   convergev1.DiscordProvider,
	"github":    convergev1.GitHubProvider,
	"gitlab":    convergev1.GitLabProvider,
	"gitea":     convergev1.GiteaProvider,
	"bitbucket": convergev1.BitbucketProvider,
}

// alert converts a Flux Alert and its Provider into a Notifier named after the Alert.
func (c *converter) alert(u *unstructured.Unstructured) {
	cv := newConv(c, u)
	spec := asMap(u.Object["spec"])
	ns := u.GetNamespace()
	prov := c.lookup(fluxNotificationGroup, "Provider", ns, str(spec, "providerRef", "name"))
	if prov == nil {
		cv.lost("providerRef", "", "the Provider is not in the input: nothing tells where to deliver")
		return
	}
	n := &convergev1.Notifier{
		TypeMeta:   metav1.TypeMeta{APIVersion: convergev1.GroupVersion.String(), Kind: convergev1.NotifierKind},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: u.GetName()},
	}
	pc := cv.at(keyOf(prov).String(), "spec.", "spec.provider.")
	mapFields(pc, asMap(prov.Object["spec"]), &n.Spec.Provider, providerRules, providerLost)
	if n.Spec.Provider.Type == "" {
		return
	}
	mapFields(cv, spec, &n.Spec, alertRules, alertLost)
	cv.object(n, cv.from, keyOf(prov).String())
}

var providerRules = []rule[*convergev1.NotificationProvider]{
	{"type", func(c *conv, v any, p *convergev1.NotificationProvider) {
		t, ok := fluxProviders[asString(v)]
		if !ok {
			c.lost("type", "", "converge delivers to webhook, slack, teams, discord, github, gitlab, gitea and bitbucket only")
			return
		}
		if asString(v) == "generic" {
			c.note("type", "Flux's generic provider posts Flux events; converge's webhook posts converge's own message (see the Notifier's documentation)")
		}
		p.Type = t
	}},
	{"address", func(_ *conv, v any, p *convergev1.NotificationProvider) { p.Address = asString(v) }},
	{"secretRef", func(c *conv, v any, p *convergev1.NotificationProvider) {
		p.SecretRef = localRef(v)
		c.note("secretRef", "converge reads the keys token, username, password, hmacKey and address of this Secret: check that they match")
	}},
	noteOnly[*convergev1.NotificationProvider]("channel", "address", "converge posts to the channel of the webhook URL"),
	noteOnly[*convergev1.NotificationProvider]("username", "", "converge posts with the name of the webhook"),
	noteOnly[*convergev1.NotificationProvider]("timeout", "", "converge bounds a delivery with its own timeout and retries"),
	noteOnly[*convergev1.NotificationProvider]("suspend", "", "suspend the Notifier instead (spec.suspend)"),
	noteOnly[*convergev1.NotificationProvider]("interval", "", "converge delivers as things happen"),
}

var providerLost = map[string]string{
	"certSecretRef":    "converge trusts the system's certificate authorities only",
	"proxy":            "converge uses the proxy of its environment (HTTPS_PROXY)",
	"proxySecretRef":   "converge uses the proxy of its environment (HTTPS_PROXY)",
	"commitStatusExpr": "converge names the commit status after the SyncTarget",
}

var alertRules = []rule[*convergev1.NotifierSpec]{
	ignored[*convergev1.NotifierSpec]("providerRef"),
	{"eventSeverity", func(c *conv, v any, n *convergev1.NotifierSpec) {
		if asString(v) == "error" {
			n.Events = []convergev1.NotificationEvent{convergev1.EventFailed, convergev1.EventRolledBack, convergev1.EventStalled}
			c.note("events", "eventSeverity error: the failures only")
		}
	}},
	{"eventSources", func(c *conv, v any, n *convergev1.NotifierSpec) { n.TargetSelector = c.eventSources(asSlice(v)) }},
	{"summary", func(_ *conv, v any, n *convergev1.NotifierSpec) { n.Summary = asString(v) }},
	{"suspend", func(_ *conv, v any, n *convergev1.NotifierSpec) { n.Suspend = asBool(v) }},
}

var alertLost = map[string]string{
	"inclusionList": "converge filters by event (spec.events), not by message",
	"exclusionList": "converge filters by event (spec.events), not by message",
	"eventMetadata": "no equivalent: converge's message has a fixed set of fields (spec.summary is a template over them)",
}

// eventSources becomes a label selector of SyncTargets: converge selects by label, not by
// name or kind, and reports on the SyncTargets of its own namespace.
func (c *conv) eventSources(srcs []any) *metav1.LabelSelector {
	var sel *metav1.LabelSelector
	named := false
	for i, x := range srcs {
		m := asMap(x)
		if labels := asMap(m["matchLabels"]); len(labels) > 0 && len(srcs) == 1 {
			sel = &metav1.LabelSelector{MatchLabels: map[string]string{}}
			for k, v := range labels {
				sel.MatchLabels[k] = asString(v)
			}
		}
		if name := str(m, "name"); name != "" && name != "*" {
			named = true
		}
		if ns := str(m, "namespace"); ns != "" {
			c.note("targetSelector", "eventSources[%d].namespace (Alert): a Notifier reports on the SyncTargets of its own namespace only", i)
		}
	}
	if named || (len(srcs) > 1) {
		c.note("targetSelector", "spec.eventSources (Alert) named objects; a Notifier selects SyncTargets by label: label the SyncTargets and set targetSelector, or it reports on all of its namespace")
	}
	return sel
}

// receiver: converge receives push webhooks per repository, on the SyncTarget.
func (c *converter) receiver(u *unstructured.Unstructured) {
	c.problem(keyOf(u).String(), "", "no Receiver kind in converge: set spec.source.webhookSecretRef on the SyncTargets and point the forge's webhook at converge's receiver", false)
}

// appProject: converge has no projects.
func (c *converter) appProject(u *unstructured.Unstructured) {
	c.problem(keyOf(u).String(), "", "no projects in converge: restrict a SyncTarget with spec.serviceAccountName and RBAC, or the multi-tenant install", false)
}
