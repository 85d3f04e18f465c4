package e2e

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// madeBy is a Deployment another tool made: its field manager and the labels and
// annotations it left (besides "legacy", a label Git does not set).
type madeBy struct {
	name, manager       string
	labels, annotations map[string]string
}

var (
	helmMade = madeBy{name: "web-helm", manager: "helm",
		labels:      map[string]string{"app.kubernetes.io/managed-by": "Helm", "helm.sh/chart": "web-1.0.0"},
		annotations: map[string]string{"meta.helm.sh/release-name": "web", "meta.helm.sh/release-namespace": "apps"}}
	argoMade = madeBy{name: "web-argo", manager: "argocd-controller",
		labels:      map[string]string{"app.kubernetes.io/instance": "web"},
		annotations: map[string]string{corev1.LastAppliedConfigAnnotation: `{"kind":"Deployment"}`}}
	editMade = madeBy{name: "web-edit", manager: "kubectl-edit"}
	fluxMade = madeBy{name: "web-flux", manager: "kustomize-controller",
		labels: map[string]string{"kustomize.toolkit.fluxcd.io/name": "apps", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}}
	argoTrackedMade = madeBy{name: "web-argo-id", manager: "argocd-controller",
		annotations: map[string]string{"argocd.argoproj.io/tracking-id": "web:apps/Deployment:apps/web-argo-id"}}
)

// TestTakeoverCleansUpOtherTools: a SyncTarget annotated clean-up-other-tools takes over
// Deployments Helm and Argo CD made in place (same UID, no rollout), removes the label Git
// no longer sets and the labels and annotations Helm and Argo CD left.
func TestTakeoverCleansUpOtherTools(t *testing.T) {
	run(t, 46, "takeover cleaning up Helm's and Argo CD's metadata", parallel, func(s *scenario) {
		takeover(s, true, helmMade, argoMade)
	})
}

// TestTakeoverKeepsOtherToolsMetadata: without the annotation, what Helm, Flux, Argo CD
// and `kubectl edit` made is taken over in place too, and the label Git no longer sets is
// gone, but the labels and annotations Helm, Flux and Argo CD left stay, with their values.
func TestTakeoverKeepsOtherToolsMetadata(t *testing.T) {
	run(t, 47, "takeover keeping Helm's metadata", parallel, func(s *scenario) {
		takeover(s, false, helmMade, fluxMade, argoTrackedMade, editMade)
	})
}

func takeover(s *scenario, cleanUp bool, made ...madeBy) {
	g := NewWithT(s.t)
	files := map[string]string{}
	before := map[string]*appsv1.Deployment{}
	for _, m := range made {
		files["deploy/"+m.name+".yaml"] = deploymentYAML(m.name, "1")
		live := &appsv1.Deployment{}
		g.Expect(yaml.NewYAMLOrJSONDecoder(bytes.NewBufferString(deploymentYAML(m.name, "1")), 4096).Decode(live)).To(Succeed())
		live.Namespace = s.app
		live.Labels = map[string]string{"legacy": "true"}
		for k, v := range m.labels {
			live.Labels[k] = v
		}
		live.Annotations = m.annotations
		g.Expect(suite.k8s.Create(s.t.Context(), live, fieldOwner(m.manager))).To(Succeed())
		before[m.name] = live
	}
	pods := map[string][]types.UID{}
	for _, m := range made {
		g.Eventually(func(g Gomega) {
			pods[m.name] = podUIDs(g, s.app, m.name)
			g.Expect(pods[m.name]).To(HaveLen(1))
		}).WithTimeout(60*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(), "%s's Pod", m.name)
	}
	r := s.repo("takeover")
	rev := r.commit(files)
	st := s.syncTarget("takeover", r, func(st *convergev1.SyncTarget) {
		if cleanUp {
			st.Annotations = map[string]string{convergev1.CleanUpOtherToolsAnnotation: convergev1.EnabledValue}
		}
	})
	s.waitHealthy(st, rev, 90*time.Second)
	for _, m := range made {
		dep := &appsv1.Deployment{}
		object(g, s.app, m.name, dep)
		g.Expect(dep.UID).To(Equal(before[m.name].UID), "%s taken over in place", m.name)
		g.Expect(equality.Semantic.DeepEqual(dep.Spec.Template, before[m.name].Spec.Template)).To(BeTrue(),
			"%s: the pod template is unchanged, no rollout", m.name)
		g.Expect(podUIDs(g, s.app, m.name)).To(Equal(pods[m.name]), "%s: the same Pod runs on", m.name)
		g.Expect(dep.Labels).NotTo(HaveKey("legacy"), "%s: a label Git does not set is gone", m.name)
		g.Expect(dep.Annotations).NotTo(HaveKey(corev1.LastAppliedConfigAnnotation))
		for k, v := range m.labels {
			if cleanUp {
				g.Expect(dep.Labels).NotTo(HaveKey(k), "%s: %s cleaned up", m.name, k)
			} else {
				g.Expect(dep.Labels).To(HaveKeyWithValue(k, v), "%s: %s kept", m.name, k)
			}
		}
		for k, v := range m.annotations {
			switch {
			case k == corev1.LastAppliedConfigAnnotation:
			case cleanUp:
				g.Expect(dep.Annotations).NotTo(HaveKey(k), "%s: %s cleaned up", m.name, k)
			default:
				g.Expect(dep.Annotations).To(HaveKeyWithValue(k, v), "%s: %s kept", m.name, k)
			}
		}
	}
}

// podUIDs are the UIDs of the Pods of the Deployment name (label app=name) in ns, sorted,
// those being deleted aside.
func podUIDs(g Gomega, ns, name string) []types.UID {
	list := &corev1.PodList{}
	g.Expect(suite.k8s.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{"app": name})).To(Succeed())
	var uids []types.UID
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			uids = append(uids, p.UID)
		}
	}
	slices.Sort(uids)
	return uids
}
