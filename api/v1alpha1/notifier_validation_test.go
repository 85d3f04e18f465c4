package v1alpha1_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

func validNotifier(name string) *convergev1.Notifier {
	return &convergev1.Notifier{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: convergev1.NotifierSpec{Provider: convergev1.NotificationProvider{
			Type: convergev1.GitHubProvider, SecretRef: &convergev1.LocalObjectReference{Name: "github-token"}}},
	}
}

// TestNotifierValidation: the API server refuses a Notifier that cannot work, naming the
// field, and keeps a valid one with its status defaulted.
func TestNotifierValidation(t *testing.T) {
	if k8s == nil {
		t.Skip("needs a local cluster: make test")
	}
	tests := []struct {
		name   string
		mutate func(*convergev1.Notifier)
		msg    string
	}{
		{"unknown provider", func(n *convergev1.Notifier) { n.Spec.Provider.Type = "pagerduty" }, "spec.provider.type"},
		{"unknown event", func(n *convergev1.Notifier) { n.Spec.Events = []convergev1.NotificationEvent{"Deployed"} }, "spec.events"},
		{"chat without address", func(n *convergev1.Notifier) {
			n.Spec.Provider = convergev1.NotificationProvider{Type: convergev1.SlackProvider}
		}, "address (or a secretRef with an address key) is required"},
		{"address not http", func(n *convergev1.Notifier) { n.Spec.Provider.Address = "ftp://example.com" }, "must be an http:// or https:// URL"},
		{"repository for a chat", func(n *convergev1.Notifier) {
			n.Spec.Provider = convergev1.NotificationProvider{Type: convergev1.DiscordProvider, Address: "https://discord.com/api/webhooks/1/x", Repository: "a/b"}
		}, "repository applies only to"},
		{"repository not owner/repo", func(n *convergev1.Notifier) { n.Spec.Provider.Repository = "just-a-name" }, "spec.provider.repository"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			n := validNotifier("invalid")
			tt.mutate(n)
			err := k8s.Create(context.Background(), n)
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			g.Expect(err.Error()).To(ContainSubstring(tt.msg))
		})
	}
	g := NewWithT(t)
	n := validNotifier("valid")
	n.Spec.Provider.Repository = "group/sub/app"
	n.Spec.Events = []convergev1.NotificationEvent{convergev1.EventProgressing, convergev1.EventRolledBack}
	g.Expect(k8s.Create(context.Background(), n)).To(Succeed())
	g.Expect(n.Status.ObservedGeneration).To(BeEquivalentTo(-1))
	g.Expect(n.GetEvents()).To(HaveLen(2))
	g.Expect(validNotifier("x").GetEvents()).To(ContainElement(convergev1.EventProgressing), "forges report pending by default")
}
