package reconciler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/testcharts"
)

// chart is a small chart at deploy/: a ConfigMap telling .Release.IsInstall, a Secret with
// a random password, and extra templates.
func chart(version string, extra map[string]string) map[string]string {
	files := map[string]string{
		"deploy/Chart.yaml":  "apiVersion: v2\nname: shop\nversion: " + version + "\n",
		"deploy/values.yaml": "message: hello\n",
		"deploy/templates/release.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: release
data:
  install: "{{ .Release.IsInstall }}"
  message: {{ .Values.message | quote }}
  version: {{ .Chart.Version | quote }}
---
apiVersion: v1
kind: Secret
metadata:
  name: password
stringData:
  password: {{ randAlphaNum 24 | quote }}
`,
	}
	for k, v := range extra {
		files["deploy/"+k] = v
	}
	return files
}

func helmTarget(values string) func(*convergev1.SyncTarget) {
	return func(st *convergev1.SyncTarget) {
		st.Spec.Helm = &convergev1.HelmSpec{}
		if values != "" {
			st.Spec.Helm.Values = &apiextensionsv1.JSON{Raw: []byte(values)}
		}
	}
}

func (f *fixture) liveData(g Gomega, kind client.Object, name string) map[string]string {
	key := client.ObjectKey{Namespace: f.app, Name: name}
	g.Expect(k8s.Get(context.Background(), key, kind)).To(Succeed())
	switch o := kind.(type) {
	case *corev1.ConfigMap:
		return o.Data
	case *corev1.Secret:
		out := map[string]string{}
		for k, v := range o.Data {
			out[k] = string(v)
		}
		return out
	}
	return nil
}

// TestChartInGitInstallsThenUpgradesWithHooks: a chart kept in Git is rendered with Helm and
// applied; its pre-install hook runs before the rest and stays (before-hook-creation), the
// Job of its post-upgrade hook runs to completion on the next revision and is deleted once
// it succeeded; .Release.IsInstall follows the target's history.
func TestChartInGitInstallsThenUpgradesWithHooks(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	hooks := map[string]string{"templates/hooks.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: pre-install
  annotations: {"helm.sh/hook": pre-install}
data:
  ran: "yes"
---
apiVersion: batch/v1
kind: Job
metadata:
  generateName: migrate-
  annotations: {"helm.sh/hook": post-upgrade, "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded"}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: migrate, image: example.com/migrate:1}]
`}
	first := f.commit(chart("1.0.0", hooks))
	st := f.syncTarget("chart", helmTarget(`{"message":"from the spec"}`))
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Status).To(BeEquivalentTo("True"), ready(st).Message)
		g.Expect(st.Status.LastAppliedRevision).To(Equal(first))
	})
	g := NewWithT(t)
	data := f.liveData(g, &corev1.ConfigMap{}, "release")
	g.Expect(data).To(HaveKeyWithValue("install", "true"))
	g.Expect(data).To(HaveKeyWithValue("message", "from the spec"))
	g.Expect(f.liveData(g, &corev1.ConfigMap{}, "pre-install")).To(HaveKeyWithValue("ran", "yes"))
	for _, e := range get(g, st).Status.Inventory.Entries {
		g.Expect(e.ID).NotTo(ContainSubstring("pre-install"), "hooks are not in the inventory")
	}

	second := f.commit(chart("1.1.0", hooks))
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(second))
		g.Expect(ready(st).Status).To(BeEquivalentTo("True"), ready(st).Message)
	})
	data = f.liveData(g, &corev1.ConfigMap{}, "release")
	g.Expect(data).To(HaveKeyWithValue("install", "false"), "an upgrade now")
	g.Expect(data).To(HaveKeyWithValue("version", "1.1.0"))
	g.Eventually(func(g Gomega) {
		jobs := &batchv1.JobList{}
		g.Expect(k8s.List(context.Background(), jobs, client.InNamespace(f.app))).To(Succeed())
		g.Expect(jobs.Items).To(BeEmpty(), "the succeeded hook Job is deleted")
	}).Should(Succeed())
}

// TestChartHookFailureRollsBack: a pre-upgrade hook Job that fails fails the revision,
// which is rolled back to the last healthy one.
func TestChartHookFailureRollsBack(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	first := f.commit(chart("1.0.0", nil))
	st := f.syncTarget("chart-hook", helmTarget(""))
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(first))
	})
	// The Job's Pod asks for a node that does not exist: its deadline fails it.
	bad := f.commit(chart("2.0.0", map[string]string{"values.yaml": "message: broken\n", "templates/hook.yaml": `apiVersion: batch/v1
kind: Job
metadata:
  name: check
  annotations: {"helm.sh/hook": pre-upgrade, "helm.sh/hook-delete-policy": hook-failed}
spec:
  backoffLimit: 0
  activeDeadlineSeconds: 2
  template:
    spec:
      restartPolicy: Never
      nodeSelector: {no-such-node: "true"}
      containers: [{name: check, image: example.com/check:1}]
`}))
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Reason).To(Equal(convergev1.RolledBackReason), ready(st).Message)
		g.Expect(ready(st).Message).To(ContainSubstring("pre-upgrade hook Job"))
		g.Expect(st.Status.LastAttemptedRevision).To(Equal(bad))
		g.Expect(st.Status.LastAppliedRevision).To(Equal(first))
	})
	g := NewWithT(t)
	g.Expect(f.liveData(g, &corev1.ConfigMap{}, "release")).To(HaveKeyWithValue("message", "hello"),
		"the failed revision's objects were never applied: the hook runs first")
	err := k8s.Get(context.Background(), client.ObjectKey{Namespace: f.app, Name: "check"}, &batchv1.Job{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "hook-failed deletes the failed Job: %v", err)
}

// TestChartRandomValuesAreRenderedOnce: a chart drawing a random password is not
// re-rendered at every look: a requested full reconcile and the heal of drift re-apply
// the password rendered the first time.
func TestChartRandomValuesAreRenderedOnce(t *testing.T) {
	f := newFixture(t)
	f.commit(chart("1.0.0", nil))
	st := f.syncTarget("chart-random", helmTarget(""))
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Status).To(BeEquivalentTo("True"), ready(st).Message)
	})
	g := NewWithT(t)
	password := f.liveData(g, &corev1.Secret{}, "password")["password"]
	g.Expect(password).To(HaveLen(24))

	latest := get(g, st)
	latest.Annotations = map[string]string{convergev1.RequestedAtAnnotation: fmt.Sprint(time.Now().UnixNano())}
	g.Expect(k8s.Update(context.Background(), latest)).To(Succeed())
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHandledReconcileAt).To(Equal(latest.Annotations[convergev1.RequestedAtAnnotation]))
	})
	g.Expect(f.liveData(g, &corev1.Secret{}, "password")).To(HaveKeyWithValue("password", password))

	g.Expect(k8s.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.app, Name: "password"}})).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(f.liveData(g, &corev1.Secret{}, "password")).To(HaveKeyWithValue("password", password))
	}).WithTimeout(60 * time.Second).Should(Succeed())
}

// TestChartCRDsAreUpgraded: a chart's crds/ are applied before the rest and upgraded with
// the chart (Helm leaves them as first installed); under the Create policy they are not.
// TestChartCRDsAreUpgraded: a chart's CRDs are upgraded under CreateReplace and left as
// first created under Create — and, with prune and pruneCRDs, never pruned by the next
// revision, which still has them.
func TestChartCRDsAreUpgraded(t *testing.T) {
	t.Parallel()
	for _, policy := range []convergev1.CRDPolicy{convergev1.CRDsCreateReplace, convergev1.CRDsCreate} {
		t.Run(string(policy), func(t *testing.T) {
			f := newFixture(t)
			group := fmt.Sprintf("%s.example.com", f.ns)
			f.commit(chart("1.0.0", map[string]string{"crds/gadgets.yaml": gadgetCRD(group, "size")}))
			st := f.syncTarget("chart-crd", func(st *convergev1.SyncTarget) {
				helmTarget("")(st)
				st.Spec.Helm.CRDs, st.Spec.Helm.PruneCRDs = policy, true
			})
			eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
				g.Expect(ready(st).Status).To(BeEquivalentTo("True"), ready(st).Message)
			})
			second := f.commit(chart("1.1.0", map[string]string{"crds/gadgets.yaml": gadgetCRD(group, "colour")}))
			eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
				g.Expect(st.Status.LastHealthyRevision).To(Equal(second))
			})
			g := NewWithT(t)
			crd := &unstructured.Unstructured{}
			crd.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
			g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: "gadgets." + group}, crd)).To(Succeed())
			versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
			g.Expect(versions).To(HaveLen(1))
			props, _, _ := unstructured.NestedMap(versions[0].(map[string]any), "schema", "openAPIV3Schema", "properties", "spec", "properties")
			if policy == convergev1.CRDsCreate {
				g.Expect(props).To(HaveKey("size"), "Create leaves the CRD as first created")
				g.Expect(props).NotTo(HaveKey("colour"))
			} else {
				g.Expect(props).To(HaveKey("colour"), "CreateReplace upgrades the CRD with the chart")
			}
			t.Cleanup(func() { _ = k8s.Delete(context.Background(), crd) })
		})
	}
}

func gadgetCRD(group, field string) string {
	return fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.%[1]s
spec:
  group: %[1]s
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget, listKind: GadgetList}
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
              %[2]s: {type: string}
`, group, field)
}

// TestRealChartDeploys: the podinfo chart, unmodified, deploys and becomes healthy.
func TestRealChartDeploys(t *testing.T) {
	f := newFixture(t)
	files, err := testcharts.Files(testcharts.Podinfo, "deploy")
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	rev := f.commit(files)
	st := f.syncTarget("podinfo", func(st *convergev1.SyncTarget) {
		st.Spec.Helm = &convergev1.HelmSpec{ReleaseName: "web",
			Values: &apiextensionsv1.JSON{Raw: []byte(`{"hooks":{"preInstall":{"job":{"enabled":true}}}}`)}}
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Status).To(BeEquivalentTo("True"), ready(st).Message)
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev))
	})
}

// TestChartLargerThanAHelmReleaseDeploysAndIdlesCheaply: a chart rendering more than 1 MiB
// (Helm's limit on a release Secret) deploys — converge keeps no release Secret — and an
// idle reconcile of it sends a handful of requests, as for Git targets, and renders nothing.
func TestChartLargerThanAHelmReleaseDeploysAndIdlesCheaply(t *testing.T) {
	f := newFixture(t)
	rev := f.commit(chart("1.0.0", map[string]string{"templates/big.yaml": `{{- range $i := until 6 }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: big-{{ $i }}
data:
  blob: {{ repeat 300000 "x" | quote }}
{{- end }}
`}))
	st := f.syncTarget("chart-big", func(st *convergev1.SyncTarget) {
		helmTarget("")(st)
		st.Spec.Source.Interval = &metav1.Duration{Duration: time.Hour}
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev), ready(st).Message)
	})
	g := NewWithT(t)
	g.Expect(f.liveData(g, &corev1.ConfigMap{}, "big-5")["blob"]).To(HaveLen(300000))
	reconciles := 3
	before, start := requests.Load(), reconcileCount(g)
	for i := range reconciles {
		latest := get(g, st)
		latest.Annotations = map[string]string{"example.com/poke": fmt.Sprint(i)}
		g.Expect(k8s.Update(context.Background(), latest)).To(Succeed())
		g.Eventually(func() float64 { return reconcileCount(g) }).Should(BeNumerically(">=", start+float64(i+1)))
	}
	sent := requests.Load() - before
	t.Logf("%d idle reconciles of a chart sent %d API requests", reconciles, sent)
	g.Expect(sent).To(BeNumerically("<=", 2*reconciles), "an idle chart reconcile costs what a Git one does")
}

// TestChartLookupAndValuesFrom: lookup reads live objects through the SyncTarget's client;
// values from a Secret (whole documents and targetPath) are used, a change to the Secret
// redeploys, and a Secret value quoted in an API server refusal never reaches the status.
func TestChartLookupAndValuesFrom(t *testing.T) {
	f := newFixture(t)
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(k8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.app, Name: "existing"},
		Data: map[string]string{"value": "found"}})).To(Succeed())
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "db"},
		StringData: map[string]string{"values.yaml": "message: from-the-secret\n", "password": "hunter2-secret"}}
	g.Expect(k8s.Create(ctx, secret)).To(Succeed())
	f.commit(chart("1.0.0", map[string]string{"templates/lookup.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: looked-up
  labels:
    team: {{ .Values.name | default "ok" | quote }}
data:
  seen: {{ (lookup "v1" "ConfigMap" .Release.Namespace "existing").data.value | default "nothing" | quote }}
  password: {{ .Values.db.password | quote }}
  name: {{ .Values.name | default "ok" | quote }}
`}))
	st := f.syncTarget("chart-values", func(st *convergev1.SyncTarget) {
		st.Spec.Helm = &convergev1.HelmSpec{ValuesFrom: []convergev1.ValuesReference{
			{Kind: "Secret", Name: "db"},
			{Kind: "Secret", Name: "db", ValuesKey: "password", TargetPath: "db.password"},
		}}
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Status).To(BeEquivalentTo("True"), ready(st).Message)
	})
	g.Expect(f.liveData(g, &corev1.ConfigMap{}, "looked-up")).To(And(HaveKeyWithValue("seen", "found"),
		HaveKeyWithValue("password", "hunter2-secret")))
	g.Expect(f.liveData(g, &corev1.ConfigMap{}, "release")).To(HaveKeyWithValue("message", "from-the-secret"))

	setData := func(data map[string]string) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(secret), secret)).To(Succeed())
		secret.Data = map[string][]byte{}
		for k, v := range data {
			secret.Data[k] = []byte(v)
		}
		g.Expect(k8s.Update(ctx, secret)).To(Succeed())
	}
	setData(map[string]string{"values.yaml": "message: changed\n", "password": "hunter2-secret"})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(f.liveData(g, &corev1.ConfigMap{}, "release")).To(HaveKeyWithValue("message", "changed"), "a change to the Secret redeploys")
	})
	// A value the API server refuses (a label value holds no "/"): its refusal quotes the
	// value, the status must not.
	setData(map[string]string{"values.yaml": "message: changed\nname: Not/A-Label-s3cr3t\n", "password": "hunter2-secret"})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Reason).To(Equal(convergev1.ApplyFailedReason), ready(st).Message)
		g.Expect(ready(st).Message).To(ContainSubstring("[redacted]"))
	})
	s := get(g, st)
	for _, c := range s.Status.Conditions {
		g.Expect(c.Message).NotTo(ContainSubstring("hunter2-secret"))
		g.Expect(c.Message).NotTo(ContainSubstring("s3cr3t"))
	}
	for _, h := range s.Status.History {
		g.Expect(h.Message).NotTo(ContainSubstring("hunter2-secret"))
	}
}
