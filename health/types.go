package health

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// DefaultTimeout bounds Wait when Options.Timeout is zero; it matches the SyncTarget
// default of spec.timeout.
const DefaultTimeout = 5 * time.Minute

// Status is the readiness of one object, in kstatus terms.
type Status string

// The statuses an object can have. Only Current is ready; Failed ends a wait at once.
const (
	// Current: the object exists and has reached its desired state.
	Current Status = "Current"
	// InProgress: the object is still converging (or its controller has not caught up).
	InProgress Status = "InProgress"
	// Failed: the object will not become ready without a change (kstatus Failed, or a
	// CEL "failed" expression that holds).
	Failed Status = "Failed"
	// Terminating: the object is being deleted.
	Terminating Status = "Terminating"
	// NotFound: the object does not exist.
	NotFound Status = "NotFound"
	// Unknown: the object has not been observed yet, or its status could not be read.
	Unknown Status = "Unknown"
)

// ObjectRef names an object to wait for.
type ObjectRef struct {
	// GVK is the group, version and kind the object is read as.
	GVK schema.GroupVersionKind
	// Namespace is empty for cluster-scoped objects.
	Namespace string
	Name      string
}

// String formats the reference as "apps/v1 Deployment shop/web" (or "v1 Namespace shop"
// for a cluster-scoped object), the form used in every message.
func (r ObjectRef) String() string {
	name := r.Name
	if r.Namespace != "" {
		name = r.Namespace + "/" + r.Name
	}
	return r.GVK.GroupVersion().String() + " " + r.GVK.Kind + " " + name
}

// RefForObject returns the reference of obj, which must carry its apiVersion and kind
// (unstructured objects and objects as rendered from manifests do).
func RefForObject(obj client.Object) ObjectRef {
	return ObjectRef{
		GVK:       obj.GetObjectKind().GroupVersionKind(),
		Namespace: obj.GetNamespace(),
		Name:      obj.GetName(),
	}
}

// RefForReference turns a SyncTarget healthChecks entry into a reference; an empty
// namespace becomes defaultNamespace (the SyncTarget's target namespace). For a
// cluster-scoped kind the namespace is ignored when waiting.
func RefForReference(r convergev1.NamespacedObjectKindReference, defaultNamespace string) (ObjectRef, error) {
	gv, err := schema.ParseGroupVersion(r.APIVersion)
	if err != nil {
		return ObjectRef{}, fmt.Errorf("health check %s %s: %w", r.Kind, r.Name, err)
	}
	ns := r.Namespace
	if ns == "" {
		ns = defaultNamespace
	}
	return ObjectRef{GVK: gv.WithKind(r.Kind), Namespace: ns, Name: r.Name}, nil
}

// Options tune one Wait.
type Options struct {
	// Timeout bounds the wait; zero means DefaultTimeout.
	Timeout time.Duration
	// Exprs read the status of the kinds they name with CEL instead of kstatus.
	Exprs []convergev1.CustomHealthCheck
	// Selector, when set, narrows the list and watch of every group of several objects to
	// objects carrying these labels (the owner labels converge.dev/name and
	// converge.dev/namespace). An object the selector does not find is looked up by name,
	// so a wrong selector costs requests, never correctness.
	Selector labels.Selector
	// Since is when the apply being waited for started. A Failed status whose failing
	// conditions were all written before it is stale — the object's controller has not
	// judged the new spec yet — and counts as InProgress. Zero takes every status as is.
	Since time.Time
	// Observed are objects as read (or written) after Since, e.g. the answers of the apply
	// being waited for. An object Current in them is not watched: a Namespace or a
	// ServiceAccount is ready the moment it is written, and listing it again would only
	// cost requests. Objects not Current in them are watched as usual.
	Observed []*unstructured.Unstructured
	// OnSlow, when set, is called once if the wait is still going after Slow: a caller
	// says what it waits for only when the wait is long enough for anyone to see it. It
	// is called from the goroutine that called Wait, with the report so far.
	OnSlow func(Report)
	// Slow is when OnSlow is called; zero calls it at once, before anything is watched.
	Slow time.Duration
}

func (o Options) timeout() time.Duration {
	if o.Timeout <= 0 {
		return DefaultTimeout
	}
	return o.Timeout
}

// ObjectStatus is the last observed status of one object.
type ObjectStatus struct {
	Ref    ObjectRef
	Status Status
	// Message says why, e.g. "Available: 1/2 (LessAvailable)". It never holds object data.
	Message string
}

// String formats the status as "apps/v1 Deployment shop/web (InProgress): Available: 1/2".
func (s ObjectStatus) String() string {
	if s.Message == "" {
		return fmt.Sprintf("%s (%s)", s.Ref, s.Status)
	}
	return fmt.Sprintf("%s (%s): %s", s.Ref, s.Status, s.Message)
}

// Report is what Wait observed: one entry per distinct object, in the order given.
type Report struct {
	Objects []ObjectStatus
	// Elapsed is how long the wait took.
	Elapsed time.Duration
}

// NotReady returns the objects that are not Current, failed ones first.
func (r Report) NotReady() []ObjectStatus {
	return notReady(r.Objects)
}

// Ready reports whether every object is Current.
func (r Report) Ready() bool {
	return len(r.NotReady()) == 0
}

// Sentinel errors a Wait failure wraps; test them with errors.Is.
var (
	// ErrFailed: at least one object reached the Failed status.
	ErrFailed = errors.New("health check failed")
	// ErrTimeout: some objects were not Current when the timeout expired.
	ErrTimeout = errors.New("health check timed out")
)

// Error is returned by Wait when an object failed or the timeout expired. Its message
// names every object that is not ready with its status message, failed ones first, and
// is meant to go into SyncTarget status as it is.
type Error struct {
	// Err is ErrFailed or ErrTimeout, or an error wrapping the deadline of the caller's
	// context when that ended the wait first.
	Err error
	// Timeout is the limit that expired (for ErrTimeout).
	Timeout time.Duration
	// Total is the number of objects waited for.
	Total int
	// NotReady are the objects that were not Current, failed ones first.
	NotReady []ObjectStatus
}

func (e *Error) Error() string { return formatError(e) }

// Unwrap returns ErrFailed or ErrTimeout.
func (e *Error) Unwrap() error { return e.Err }
