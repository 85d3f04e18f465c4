package health

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// StatusOf reads the status of one live object as Wait would, once, without waiting:
// with the CEL rule of its kind from exprs when there is one, otherwise with kstatus.
// Views of the current state (converge tree, the web UI) use it. Invalid expressions
// are an error wrapping ErrInvalidExpr.
func StatusOf(u *unstructured.Unstructured, exprs []convergev1.CustomHealthCheck) (Status, string, error) {
	rules, err := compileRules(programs, exprs)
	if err != nil {
		return Unknown, "", err
	}
	s, msg := computeStatus(u, rules[u.GroupVersionKind()])
	return s, msg, nil
}
