package v1alpha1

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// GetInterval is how often the source (spec.source, spec.chart or spec.oci) is polled
// when no schedule is set.
func (in *SyncTarget) GetInterval() time.Duration {
	iv := in.Spec.Source.Interval
	switch {
	case in.Spec.Chart != nil:
		iv = in.Spec.Chart.Interval
	case in.Spec.OCI != nil:
		iv = in.Spec.OCI.Interval
	}
	if iv != nil && iv.Duration > 0 {
		return iv.Duration
	}
	return DefaultInterval
}

// GetSchedule is the cron schedule the source is polled on, or "" for an interval.
func (in *SyncTarget) GetSchedule() CronSchedule {
	switch {
	case in.Spec.Chart != nil:
		return in.Spec.Chart.Schedule
	case in.Spec.OCI != nil:
		return in.Spec.OCI.Schedule
	}
	return in.Spec.Source.Schedule
}

// IsChart reports whether the SyncTarget follows a chart repository (spec.chart)
// rather than a Git repository.
func (in *SyncTarget) IsChart() bool {
	return in.Spec.Chart != nil
}

// IsOCI reports whether the SyncTarget follows a configuration artifact of an OCI
// registry (spec.oci) rather than a Git repository. A chart of an OCI registry is
// spec.chart: IsChart, not IsOCI.
func (in *SyncTarget) IsOCI() bool {
	return in.Spec.OCI != nil
}

// ReleaseName is the Helm release name of a chart: spec.helm.releaseName, or the
// SyncTarget's name.
func (in *SyncTarget) ReleaseName() string {
	if in.Spec.Helm != nil && in.Spec.Helm.ReleaseName != "" {
		return in.Spec.Helm.ReleaseName
	}
	return in.Name
}

// CRDPolicy is what happens to a chart's crds/ (default CreateReplace).
func (in *SyncTarget) CRDPolicy() CRDPolicy {
	if in.Spec.Helm == nil || in.Spec.Helm.CRDs == "" {
		return CRDsCreateReplace
	}
	return in.Spec.Helm.CRDs
}

// GetTimeout bounds applying and health checking one revision.
func (in *SyncTarget) GetTimeout() time.Duration {
	if in.Spec.Timeout != nil && in.Spec.Timeout.Duration > 0 {
		return in.Spec.Timeout.Duration
	}
	return DefaultTimeout
}

// GetHistoryLimit is the number of history entries kept.
func (in *SyncTarget) GetHistoryLimit() int {
	if in.Spec.HistoryLimit != nil && *in.Spec.HistoryLimit > 0 {
		return int(*in.Spec.HistoryLimit)
	}
	return DefaultHistoryLimit
}

// WaitEnabled reports whether applied objects are health-checked (the default).
func (in *SyncTarget) WaitEnabled() bool {
	return in.Spec.Wait == nil || *in.Spec.Wait
}

// RollbackEnabled reports whether a failed revision is rolled back automatically.
func (in *SyncTarget) RollbackEnabled() bool {
	if in.Spec.Rollback == nil || in.Spec.Rollback.Enabled == nil {
		return true
	}
	return *in.Spec.Rollback.Enabled
}

// VerifyMode is what spec.source.verify checks, or "" when no verification is asked for
// (always "" for spec.chart and spec.oci, whose verify is of their own kind).
func (in *SyncTarget) VerifyMode() VerifyMode {
	v := in.Spec.Source.Verify
	switch {
	case v == nil:
		return ""
	case v.Mode == "":
		return VerifyHEAD
	default:
		return v.Mode
	}
}

// SubstitutionStrict reports whether an unset variable without a default fails the
// render (the default).
func (in *SyncTarget) SubstitutionStrict() bool {
	pb := in.Spec.PostBuild
	return pb == nil || pb.Strict == nil || *pb.Strict
}

// OwnerLabels are the labels converge sets on every object this SyncTarget applies.
func (in *SyncTarget) OwnerLabels() map[string]string {
	return map[string]string{NameLabel: in.Name, NamespaceLabel: in.Namespace}
}

// DependencyKey is the namespaced name of a dependency, defaulting to this SyncTarget's namespace.
func (in *SyncTarget) DependencyKey(d DependencyReference) types.NamespacedName {
	ns := d.Namespace
	if ns == "" {
		ns = in.Namespace
	}
	return types.NamespacedName{Namespace: ns, Name: d.Name}
}

// CleanUpOtherTools reports whether the SyncTarget asks, with CleanUpOtherToolsAnnotation,
// that taking over an object also removes the labels and annotations of the tool that
// made it.
func (in *SyncTarget) CleanUpOtherTools() bool {
	return in.GetAnnotations()[CleanUpOtherToolsAnnotation] == EnabledValue
}
