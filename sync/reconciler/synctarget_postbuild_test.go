package reconciler_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// postBuild makes a SyncTarget substitute from refs, polling only hourly: whatever it
// does within a test, a watch made it do.
func postBuild(refs ...convergev1.SubstituteReference) func(*convergev1.SyncTarget) {
	return func(st *convergev1.SyncTarget) {
		st.Spec.Source.Interval = &metav1.Duration{Duration: time.Hour}
		st.Spec.PostBuild = &convergev1.PostBuildSpec{SubstituteFrom: refs}
	}
}

func (f *fixture) variables(kind, name string, data map[string]string) client.Object {
	f.t.Helper()
	meta := metav1.ObjectMeta{Namespace: f.ns, Name: name}
	var o client.Object = &corev1.ConfigMap{ObjectMeta: meta, Data: data}
	if kind == "Secret" {
		o = &corev1.Secret{ObjectMeta: meta, StringData: data}
	}
	if err := k8s.Create(context.Background(), o); err != nil {
		f.t.Fatal(err)
	}
	return o
}

func setVariable(g Gomega, ns, name, key, value string) {
	cm := getCM(g, ns, name)
	cm.Data[key] = value
	g.Expect(k8s.Update(context.Background(), cm)).To(Succeed())
}

// TestPostBuildVariableChangeRedeploys: a change to a ConfigMap of substituteFrom deploys
// the same revision again with the new value, at once (the SyncTarget polls hourly), and
// the history says why. A Secret's variables are substituted and never shown.
func TestPostBuildVariableChangeRedeploys(t *testing.T) {
	f := newFixture(t)
	g := NewWithT(t)
	rev := f.commit(map[string]string{
		"deploy/app.yaml": configMap("app", "${greeting}, ${who:=world}"),
		"deploy/db.yaml":  "apiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData: {url: 'postgres://app:${password}@db'}\n",
	})
	f.variables("ConfigMap", "vars", map[string]string{"greeting": "hello"})
	f.variables("Secret", "secret-vars", map[string]string{"password": "pw-8c1e5a"})
	st := f.syncTarget("vars", postBuild(
		convergev1.SubstituteReference{Kind: "ConfigMap", Name: "vars"},
		convergev1.SubstituteReference{Kind: "Secret", Name: "secret-vars"},
		convergev1.SubstituteReference{Kind: "ConfigMap", Name: "absent", Optional: true}))
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Status).To(Equal(metav1.ConditionTrue), ready(st).Message)
		g.Expect(getCM(g, f.app, "app").Data["value"]).To(Equal("hello, world"))
	})
	db := &corev1.Secret{}
	g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: f.app, Name: "db"}, db)).To(Succeed())
	g.Expect(string(db.Data["url"])).To(Equal("postgres://app:pw-8c1e5a@db"))

	setVariable(g, f.ns, "vars", "greeting", "goodbye")
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(getCM(g, f.app, "app").Data["value"]).To(Equal("goodbye, world"))
		g.Expect(st.Status.History[0].Revision).To(Equal(rev))
		g.Expect(st.Status.History[0].Message).To(ContainSubstring("(variables changed)"))
		g.Expect(st.Status.History[0].Configured).To(Equal(int32(1)))
	})
	noSecretAnywhere(g, st, "pw-8c1e5a")
}

// TestPostBuildMissingReferentRecovers: a missing ConfigMap stops the sync with
// SubstitutionFailed, nothing applied; creating it deploys at once.
func TestPostBuildMissingReferentRecovers(t *testing.T) {
	f := newFixture(t)
	f.commit(map[string]string{"deploy/app.yaml": configMap("app", "${greeting}")})
	st := f.syncTarget("late", postBuild(convergev1.SubstituteReference{Kind: "ConfigMap", Name: "late"}))
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready(st).Reason).To(Equal(convergev1.SubstitutionFailedReason))
		g.Expect(ready(st).Message).To(Equal("spec.postBuild.substituteFrom[0]: ConfigMap " + f.ns + "/late not found"))
	})
	g := NewWithT(t)
	g.Expect(get(g, st).Status.Inventory).To(BeNil(), "nothing was applied")

	f.variables("ConfigMap", "late", map[string]string{"greeting": "hi"})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Status).To(Equal(metav1.ConditionTrue), ready(st).Message)
		g.Expect(getCM(g, f.app, "app").Data["value"]).To(Equal("hi"))
	})
}

// TestPostBuildUnsetVariableRecovers: in strict mode a revision using unset variables
// fails, naming them all, with nothing applied and no secret shown; it is not retried
// until the variables change, and then it deploys.
func TestPostBuildUnsetVariableRecovers(t *testing.T) {
	f := newFixture(t)
	rev := f.commit(map[string]string{
		"deploy/app.yaml": configMap("app", "${token} ${zone} ${greeting}"),
		"deploy/b.yaml":   configMap("b", "${region}"),
	})
	f.variables("ConfigMap", "vars", map[string]string{"greeting": "hi"})
	f.variables("Secret", "token", map[string]string{"token": "tok-5d2b9f"})
	st := f.syncTarget("unset", postBuild(
		convergev1.SubstituteReference{Kind: "ConfigMap", Name: "vars"},
		convergev1.SubstituteReference{Kind: "Secret", Name: "token"}))
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Reason).To(Equal(convergev1.SubstitutionFailedReason), ready(st).Message)
		g.Expect(ready(st).Message).To(ContainSubstring("variables not set (strict): region, zone; used by ConfigMap "))
		g.Expect(st.Status.History[0]).To(HaveField("Revision", rev))
	})
	g := NewWithT(t)
	g.Expect(get(g, st).Status.Inventory.Entries).To(BeEmpty(), "nothing was applied")
	noSecretAnywhere(g, st, "tok-5d2b9f")

	setVariable(g, f.ns, "vars", "zone", "a")
	setVariable(g, f.ns, "vars", "region", "eu")
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Status).To(Equal(metav1.ConditionTrue), ready(st).Message)
		g.Expect(getCM(g, f.app, "app").Data["value"]).To(Equal("tok-5d2b9f a hi"))
		g.Expect(getCM(g, f.app, "b").Data["value"]).To(Equal("eu"))
	})
	noSecretAnywhere(g, st, "tok-5d2b9f")
}

// TestPostBuildReadsWithTheServiceAccount: the variables are read with the rights of the
// SyncTarget's service account, like its apply: a Secret it may not read is not read.
func TestPostBuildReadsWithTheServiceAccount(t *testing.T) {
	f := newFixture(t)
	g := NewWithT(t)
	tenant(g, f)
	f.commit(map[string]string{"deploy/app.yaml": configMap("app", "${token}")})
	f.variables("Secret", "token", map[string]string{"token": "tok-77aa01"})
	st := f.syncTarget("tenant", func(st *convergev1.SyncTarget) {
		postBuild(convergev1.SubstituteReference{Kind: "Secret", Name: "token"})(st)
		st.Spec.ServiceAccountName = "deployer"
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Reason).To(Equal(convergev1.SubstitutionFailedReason), ready(st).Message)
		g.Expect(ready(st).Message).To(ContainSubstring("forbidden"))
	})
	noSecretAnywhere(g, st, "tok-77aa01")
	gone(g, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.app, Name: "app"}})
}
