package ui

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

var fixedNow = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func sha(i int) string { return fmt.Sprintf("%06x%034x", 0xabc000+i, i) }

// fakeTarget is a SyncTarget as the daemon leaves it after some syncs.
func fakeTarget(ns, name string, ready bool, deps ...string) convergev1.SyncTarget {
	st := convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	st.Spec.Source.URL = "https://github.com/acme/" + name + ".git"
	st.Spec.Source.Ref.Branch = "main"
	for _, d := range deps {
		st.Spec.DependsOn = append(st.Spec.DependsOn, convergev1.DependencyReference{Name: d})
	}
	applied := "main@sha1:" + sha(2)
	st.Status.LastAppliedRevision, st.Status.LastFetchedRevision = applied, applied
	status, reason, msg := metav1.ConditionTrue, convergev1.SucceededReason, "applied revision "+applied+": 3 unchanged"
	if !ready {
		status, reason, msg = metav1.ConditionFalse, convergev1.RolledBackReason, "rolled back: Deployment web did not become ready"
	}
	t := metav1.NewTime(fixedNow.Add(-5 * time.Minute))
	st.Status.Conditions = []metav1.Condition{
		{Type: convergev1.ReadyCondition, Status: status, Reason: reason, Message: msg, LastTransitionTime: t},
		{Type: convergev1.HealthyCondition, Status: status, Reason: reason, LastTransitionTime: t},
	}
	for i := 1; i <= 3; i++ {
		start := metav1.NewTime(fixedNow.Add(-time.Duration(i) * 10 * time.Minute))
		res := convergev1.SyncSucceeded
		if i == 3 {
			res = convergev1.SyncRolledBack
		}
		st.Status.History = append(st.Status.History, convergev1.HistoryEntry{
			Revision: "main@sha1:" + sha(i), StartedAt: start, Result: res, Created: 1, Configured: int32(i),
			Duration: &metav1.Duration{Duration: 2 * time.Second}, Message: "revision " + sha(i)[:7]})
	}
	return st
}

func fakeEvent(ns, name, reason, msg string) corev1.Event {
	return corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "." + reason},
		InvolvedObject: corev1.ObjectReference{Kind: convergev1.SyncTargetKind, Namespace: ns, Name: name},
		Type:           corev1.EventTypeNormal, Reason: reason, Message: msg, Count: 1,
		LastTimestamp: metav1.NewTime(fixedNow.Add(-time.Minute))}
}

// fakeTargets are n SyncTargets in 10 namespaces, one in 10 failed, chains of dependencies.
func fakeTargets(n int) []convergev1.SyncTarget {
	out := make([]convergev1.SyncTarget, 0, n)
	for i := range n {
		var deps []string
		if i%10 != 0 {
			deps = []string{fmt.Sprintf("app-%04d", i-1)}
		}
		out = append(out, fakeTarget(fmt.Sprintf("team-%d", i/100), fmt.Sprintf("app-%04d", i), i%10 != 7, deps...))
	}
	return out
}

func metaNS(ns, name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: ns, Name: name} }

// chartDigest is the digest of a chart version in fakeChartTarget's revisions.
const chartDigest = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// fakeChartTarget is a SyncTarget of a chart repository after some syncs: its repository
// URL carries credentials and its values a secret, neither of which may be shown.
func fakeChartTarget(ns, name string) convergev1.SyncTarget {
	st := fakeTarget(ns, name, true)
	st.Spec.Source = convergev1.GitSource{}
	st.Spec.Chart = &convergev1.ChartSource{Repository: "https://robot:chart-pa55@charts.example.com/stable",
		Name: "podinfo", Version: ">=6.5 <7"}
	st.Spec.Helm = &convergev1.HelmSpec{ReleaseName: "web",
		Values: &apiextensionsv1.JSON{Raw: []byte(`{"auth":{"password":"values-s3cret"}}`)}}
	applied := "6.5.1@sha256:" + chartDigest
	st.Status.LastAppliedRevision, st.Status.LastFetchedRevision = applied, applied
	st.Status.Conditions[0].Message = "applied revision " + applied + ": 3 unchanged"
	for i := range st.Status.History {
		st.Status.History[i].Revision = fmt.Sprintf("6.5.%d@sha256:%d%s", 2-i, i, chartDigest[1:])
	}
	return st
}
