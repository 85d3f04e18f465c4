package v1alpha1

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// GetInterval is how often the source is polled when no schedule is set.
func (in *SyncTarget) GetInterval() time.Duration {
	if in.Spec.Source.Interval != nil && in.Spec.Source.Interval.Duration > 0 {
		return in.Spec.Source.Interval.Duration
	}
	return DefaultInterval
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

// VerifyMode is what spec.source.verify checks, or "" when no verification is asked for.
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
