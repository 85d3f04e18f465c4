package reconciler

import (
	"errors"
	"fmt"
	"net/url"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/remote"
)

// TestClassifyRemoteClusterErrors: a remote cluster that is away, or whose kubeconfig
// Secret is missing or refused, is retried with backoff; no revision is failed (and rolled
// back) for it.
func TestClassifyRemoteClusterErrors(t *testing.T) {
	unreachable := &url.Error{Op: "Get", URL: "https://cluster.example.com/api",
		Err: &remote.UnreachableError{Cluster: "team/kc", Err: syscall.ECONNREFUSED}}
	missing := &remote.ConfigError{Secret: "team/kc", Err: apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, "kc")}
	refused := &remote.ConfigError{Secret: "team/kc", Err: fmt.Errorf("%w: exec plugins are not run", remote.ErrRefused)}
	for name, err := range map[string]error{
		"unreachable":     fmt.Errorf("checking who manages ConfigMap app/a: %w", unreachable),
		"missing secret":  missing,
		"refused":         refused,
		"address refused": fmt.Errorf("dial: %w", &remote.AddressRefusedError{Address: "127.0.0.1", Why: "a loopback address"}),
	} {
		if f := classify(phaseApply, err); f.then != retry || f.reason != convergev1.ApplyFailedReason {
			t.Errorf("%s: then %v, reason %s; want a retry", name, f.then, f.reason)
		}
	}
	if f := classify(phaseApply, errors.New("admission webhook denied the request")); f.then != failRevision {
		t.Errorf("a refusal of the revision's objects: then %v, want failRevision", f.then)
	}
}
