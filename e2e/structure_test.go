package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/gittest"
)

// Scenario 6: a CRD with its custom resources in one commit, then a new namespace with
// its contents in one commit: both apply in one go, definitions first.
func TestCRDAndNamespace(t *testing.T) {
	run(t, 6, "CRD with CRs, namespace with contents", parallel, func(s *scenario) {
		g := NewWithT(t)
		ctx := context.Background()
		group := "e2e06.example.com"
		fresh := s.app + "-fresh"
		r := s.repo("platform")
		rev1 := r.commit(map[string]string{
			"deploy/crd.yaml": `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.` + group + `}
spec:
  group: ` + group + `
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
`,
			"deploy/widgets.yaml": "apiVersion: " + group + "/v1\nkind: Widget\nmetadata: {name: small, namespace: " + s.app + "}\nspec: {size: 1}\n---\n" +
				"apiVersion: " + group + "/v1\nkind: Widget\nmetadata: {name: large, namespace: " + s.app + "}\nspec: {size: 9}\n",
		})
		// Objects say their namespaces themselves.
		st := s.syncTarget("platform", r, func(st *convergev1.SyncTarget) { st.Spec.TargetNamespace = "" })
		s.eventually(st, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			healthy(g, st, rev1)
			g.Expect(st.Status.Inventory.Entries).To(HaveLen(3))
			g.Expect(st.Status.History[0].Created).To(Equal(int32(3)))
		})
		crd := &apiextensionsv1.CustomResourceDefinition{}
		g.Expect(suite.k8s.Get(ctx, client.ObjectKey{Name: "widgets." + group}, crd)).To(Succeed())
		for name, size := range map[string]int64{"small": 1, "large": 9} {
			w := &unstructured.Unstructured{}
			w.SetAPIVersion(group + "/v1")
			w.SetKind("Widget")
			object(g, s.app, name, w)
			got, found, err := unstructured.NestedInt64(w.Object, "spec", "size")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(found).To(BeTrue())
			g.Expect(got).To(Equal(size))
			g.Expect(w.GetLabels()).To(HaveKeyWithValue(convergev1.NameLabel, "platform"))
		}
		s.expectEvent(st, corev1.EventTypeNormal, convergev1.SucceededReason, rev1)

		rev2 := r.commit(map[string]string{
			"deploy/fresh/namespace.yaml": "apiVersion: v1\nkind: Namespace\nmetadata: {name: " + fresh + "}\n",
			"deploy/fresh/contents.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: inside, namespace: " + fresh + "}\ndata: {value: here}\n" +
				"---\n" + strings.Replace(deployment("inside", 1, "example.com/inside:1", ""),
				"  name: inside\n", "  name: inside\n  namespace: "+fresh+"\n", 1),
		})
		s.eventually(st, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			healthy(g, st, rev2)
			g.Expect(st.Status.Inventory.Entries).To(HaveLen(6))
		})
		ns := &corev1.Namespace{}
		g.Expect(suite.k8s.Get(ctx, client.ObjectKey{Name: fresh}, ns)).To(Succeed())
		g.Expect(ns.Status.Phase).To(Equal(corev1.NamespaceActive))
		g.Expect(configMapValue(g, fresh, "inside")).To(Equal("here"))
		d := &appsv1.Deployment{}
		object(g, fresh, "inside", d)
		g.Expect(d.Status.AvailableReplicas).To(Equal(int32(1)))
		s.expectEvent(st, corev1.EventTypeNormal, convergev1.SucceededReason, rev2)
	})
}

// Scenario 7: an app SyncTarget waits for its platform SyncTarget: nothing of the app is
// applied before the platform is Ready at its revision.
func TestDependsOn(t *testing.T) {
	run(t, 7, "dependsOn", parallel, func(s *scenario) {
		g := NewWithT(t)
		ctx := context.Background()
		r := s.repo("fleet")
		rev := r.commit(map[string]string{
			"platform/db.yaml": deployment("db", 2, "example.com/db:1", ""),
			"platform/cm.yaml": configMap("platform", "ready"),
			"app/cm.yaml":      configMap("app", "1"),
		})
		app := s.syncTarget("app", r, func(st *convergev1.SyncTarget) {
			st.Spec.Path = "app"
			st.Spec.DependsOn = []convergev1.DependencyReference{{Name: "platform"}}
		})
		s.eventually(app, 60*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(ready(st).Status).To(Equal(metav1.ConditionFalse))
			g.Expect(ready(st).Reason).To(Equal(convergev1.DependencyNotReadyReason))
			g.Expect(ready(st).Message).To(ContainSubstring(s.ns + "/platform"))
			g.Expect(st.Status.LastAttemptedRevision).To(BeEmpty())
		})
		gone(g, s.app, "app", &corev1.ConfigMap{})

		platform := s.syncTarget("platform", r, func(st *convergev1.SyncTarget) { st.Spec.Path = "platform" })
		// Watch the app's ConfigMap appear: the platform must be healthy by then.
		early := ""
		g.Eventually(func(g Gomega) {
			err := suite.k8s.Get(ctx, client.ObjectKey{Namespace: s.app, Name: "app"}, &corev1.ConfigMap{})
			if err == nil {
				if p := get(g, platform); p.Status.LastHealthyRevision != rev {
					early = fmt.Sprintf("the app was applied while the platform was %q: %s", ready(p).Reason, ready(p).Message)
				}
			}
			g.Expect(apierrors.IsNotFound(err) || err == nil).To(BeTrue(), "%v", err)
			g.Expect(err).NotTo(HaveOccurred(), "the app's ConfigMap is applied in the end")
		}).WithTimeout(90 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
		g.Expect(early).To(BeEmpty())
		s.eventually(app, 60*time.Second, func(g Gomega, st *convergev1.SyncTarget) { healthy(g, st, rev) })
		p, a := get(g, platform), get(g, app)
		healthy(g, p, rev)
		g.Expect(p.Status.History[0].FinishedAt.Time).NotTo(BeTemporally(">", a.Status.History[0].StartedAt.Time),
			"the app started after the platform finished")
		d := &appsv1.Deployment{}
		object(g, s.app, "db", d)
		g.Expect(d.Status.AvailableReplicas).To(Equal(int32(2)))
		s.expectEvent(platform, corev1.EventTypeNormal, convergev1.SucceededReason, rev)
		s.expectEvent(app, corev1.EventTypeNormal, convergev1.SucceededReason, rev)
	})
}

// Scenario 12: two SyncTargets claim one object: the second reports the conflict, the
// first keeps the object, and neither deletes it, not even when the second goes away.
func TestTwoSyncTargetsClaimOneObject(t *testing.T) {
	run(t, 12, "two SyncTargets claim one object", parallel, func(s *scenario) {
		g := NewWithT(t)
		ctx := context.Background()
		r := s.repo("teams")
		rev := r.commit(map[string]string{
			"first/shared.yaml":  configMap("shared", "from first"),
			"first/own.yaml":     configMap("first-own", "1"),
			"second/shared.yaml": configMap("shared", "from second"),
			"second/own.yaml":    configMap("second-own", "1"),
		})
		first := s.syncTarget("first", r, func(st *convergev1.SyncTarget) { st.Spec.Path = "first" })
		s.waitHealthy(first, rev, 90*time.Second)

		second := s.syncTarget("second", r, func(st *convergev1.SyncTarget) { st.Spec.Path = "second" })
		s.eventually(second, 60*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(st.Status.LastAttemptedRevision).To(Equal(rev))
			g.Expect(ready(st).Status).To(Equal(metav1.ConditionFalse), "the second SyncTarget reports the conflict")
			g.Expect(ready(st).Message).To(And(ContainSubstring("ConfigMap"), ContainSubstring("shared"),
				ContainSubstring(s.ns+"/first")), "it names the object and who owns it")
		})
		expectFirstKeepsIt := func(g Gomega) {
			cm := &corev1.ConfigMap{}
			object(g, s.app, "shared", cm)
			g.Expect(cm.Data["value"]).To(Equal("from first"))
			g.Expect(cm.Labels).To(And(HaveKeyWithValue(convergev1.NameLabel, "first"),
				HaveKeyWithValue(convergev1.NamespaceLabel, s.ns)))
			healthy(g, get(g, first), rev)
		}
		g.Consistently(expectFirstKeepsIt).WithTimeout(5 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())
		g.Expect(get(g, second).Status.Inventory).To(Or(BeNil(),
			HaveField("Entries", Not(ContainElement(HaveField("ID", s.app+"_shared__ConfigMap"))))),
			"the second does not track what it does not own")
		g.Expect(events(g, second)).To(ContainElement(And(HaveField("Type", corev1.EventTypeWarning),
			HaveField("Message", ContainSubstring("shared")))))

		// The second goes away, pruning what it applied: the shared object stays.
		g.Expect(suite.k8s.Delete(ctx, second)).To(Succeed())
		g.Eventually(func(g Gomega) { gone(g, s.ns, "second", &convergev1.SyncTarget{}) }).
			WithTimeout(60 * time.Second).Should(Succeed())
		expectFirstKeepsIt(g)
		g.Expect(configMapValue(g, s.app, "first-own")).To(Equal("1"))
	})
}

// Scenario 14: a force-push rewrites main over SSH: the new head is deployed and recorded,
// and what only the dropped commit had is pruned.
func TestForcePush(t *testing.T) {
	run(t, 14, "force-push (ssh)", parallel, func(s *scenario) {
		g := NewWithT(t)
		r := s.repo("app")
		c1 := r.Commit(t, "main", map[string]string{"deploy/cm.yaml": configMap("settings", "1")})
		c2 := r.Commit(t, "main", map[string]string{
			"deploy/cm.yaml":    configMap("settings", "2"),
			"deploy/extra.yaml": configMap("only-in-c2", "x"),
		})
		st := s.syncTarget("app", r, func(st *convergev1.SyncTarget) {
			st.Spec.Source.URL = r.sshURL()
			st.Spec.Source.SecretRef = &convergev1.LocalObjectReference{Name: sshSecret}
		})
		s.waitHealthy(st, revision(c2), 90*time.Second)
		g.Expect(configMapValue(g, s.app, "only-in-c2")).To(Equal("x"))

		// git push --force: main now points at a commit on top of c1; c2 is gone from it.
		c3 := r.CommitOnto(t, "rewrite", c1, gittest.Change{Path: "deploy/cm.yaml", Content: configMap("settings", "3")},
			gittest.Change{Path: "deploy/new.yaml", Content: configMap("rewritten", "y")})
		r.ForcePush(t, "main", c3)
		pushed := time.Now()
		s.eventually(st, 60*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			healthy(g, st, revision(c3))
			g.Expect(st.Status.LastFetchedRevision).To(Equal(revision(c3)))
			g.Expect(st.Status.History[1]).To(HaveField("Revision", revision(c2)))
			g.Expect(st.Status.History[0].Deleted).To(Equal(int32(1)))
		})
		s.latency("force-push→healthy (ssh, poll 2s)", time.Since(pushed))
		g.Expect(configMapValue(g, s.app, "settings")).To(Equal("3"))
		g.Expect(configMapValue(g, s.app, "rewritten")).To(Equal("y"))
		gone(g, s.app, "only-in-c2", &corev1.ConfigMap{})
		s.expectEvent(st, corev1.EventTypeNormal, convergev1.SucceededReason, revision(c3))
	})
}
