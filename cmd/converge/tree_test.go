package main

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// TestTreeAgainstAPIServer prints the inventory of a SyncTarget with the live health of
// each object read from a real API server: a ConfigMap is Current, a Deployment no
// controller rolled out is InProgress, a deleted object is NotFound.
func TestTreeAgainstAPIServer(t *testing.T) {
	t.Parallel()
	a := startAPIServer(t)
	g := NewWithT(t)
	ctx := context.Background()
	for _, ns := range []string{"tree-team", "tree-app"} {
		g.Expect(a.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	g.Expect(a.c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "tree-app", Name: "settings"}})).To(Succeed())
	labels := map[string]string{"app": "web"}
	g.Expect(a.c.Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "tree-app", Name: "web"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "example.com/web:1"}}}}}})).To(Succeed())
	st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "tree-team", Name: "shop"},
		Spec: convergev1.SyncTargetSpec{Source: convergev1.GitSource{URL: "https://git.example.com/shop.git", Ref: convergev1.GitRef{Branch: "main"}}}}
	st.Status.LastAppliedRevision = "main@sha1:0a1b2c3d4e5f60718293a4b5c6d7e8f901234567"
	st.Status.Conditions = []metav1.Condition{{Type: convergev1.ReadyCondition, Status: metav1.ConditionTrue, Reason: convergev1.SucceededReason, LastTransitionTime: metav1.Now()}}
	st.Status.Inventory = &convergev1.ResourceInventory{Entries: []convergev1.InventoryEntry{
		{ID: "_tree-app__Namespace", Version: "v1"},
		{ID: "tree-app_gone__ConfigMap", Version: "v1"},
		{ID: "tree-app_settings__ConfigMap", Version: "v1"},
		{ID: "tree-app_web_apps_Deployment", Version: "v1"},
	}}
	a.create(t, st)

	out, errOut, code := cliRun(ctx, a.kubeconfig, "tree", "shop", "-n", "tree-team")
	g.Expect(errOut).To(BeEmpty())
	g.Expect(code).To(Equal(0))
	g.Expect(out).To(Equal(`SyncTarget tree-team/shop  main@sha1:0a1b2c3  Ready=True
├── (cluster-scoped)
│   └── Namespace
│       └── tree-app  Current  Resource is current
└── tree-app
    ├── ConfigMap
    │   ├── gone  NotFound  not found in the cluster
    │   └── settings  Current  Resource is always ready
    └── Deployment.apps
        └── web  InProgress  Replicas: 0/1 (LessReplicas)
`))

	_, errOut, code = cliRun(ctx, a.kubeconfig, "tree", "nope", "-n", "tree-team")
	g.Expect(code).To(Equal(1))
	g.Expect(errOut).To(Equal("converge: SyncTarget tree-team/nope not found\n"))
}
