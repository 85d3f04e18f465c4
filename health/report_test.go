package health

import (
	"errors"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime/schema"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

var (
	deployGVK = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	cmGVK     = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
)

func st(name string, s Status, msg string) ObjectStatus {
	return ObjectStatus{Ref: ObjectRef{GVK: deployGVK, Namespace: "shop", Name: name}, Status: s, Message: msg}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name string
		objs []ObjectStatus
		want verdict
	}{
		{name: "nothing to wait for", want: allCurrent},
		{name: "all current", objs: []ObjectStatus{st("a", Current, ""), st("b", Current, "")}, want: allCurrent},
		{name: "one in progress", objs: []ObjectStatus{st("a", Current, ""), st("b", InProgress, "")}, want: waiting},
		{name: "not found is not ready", objs: []ObjectStatus{st("a", NotFound, "")}, want: waiting},
		{name: "terminating is not ready", objs: []ObjectStatus{st("a", Terminating, "")}, want: waiting},
		{name: "not observed yet", objs: []ObjectStatus{st("a", Unknown, "")}, want: waiting},
		{name: "one failed ends it", objs: []ObjectStatus{st("a", InProgress, ""), st("b", Failed, ""), st("c", Current, "")}, want: anyFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(decide(tt.objs)).To(Equal(tt.want))
		})
	}
}

func TestNotReady(t *testing.T) {
	tests := []struct {
		name string
		objs []ObjectStatus
		want []string
	}{
		{name: "none", objs: []ObjectStatus{st("a", Current, "")}},
		{
			name: "failed first, otherwise in order",
			objs: []ObjectStatus{st("a", InProgress, ""), st("b", Current, ""), st("c", NotFound, ""), st("d", Failed, ""), st("e", Unknown, ""), st("f", Failed, "")},
			want: []string{"d", "f", "a", "c", "e"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			var names []string
			for _, o := range (Report{Objects: tt.objs}).NotReady() {
				names = append(names, o.Ref.Name)
			}
			g.Expect(names).To(Equal(tt.want))
			g.Expect(Report{Objects: tt.objs}.Ready()).To(Equal(len(tt.want) == 0))
		})
	}
}

func TestErrorMessage(t *testing.T) {
	many := make([]ObjectStatus, 25)
	for i := range many {
		many[i] = st(fmt.Sprintf("w%d", i), InProgress, "Available: 0/1")
	}
	tests := []struct {
		name   string
		err    *Error
		want   string // the whole message, or when empty:
		prefix string
		suffix string
		absent string
	}{
		{
			name: "one failed among others",
			err: &Error{Err: ErrFailed, Total: 3, NotReady: []ObjectStatus{
				st("web", Failed, "Progress deadline exceeded (ProgressDeadlineExceeded)"),
				{Ref: ObjectRef{GVK: cmGVK, Namespace: "shop", Name: "conf"}, Status: NotFound, Message: "not found"},
			}},
			want: "health check failed: 1 of 3 objects failed, 1 not ready: " +
				"apps/v1 Deployment shop/web (Failed): Progress deadline exceeded (ProgressDeadlineExceeded); " +
				"v1 ConfigMap shop/conf (NotFound): not found",
		},
		{
			name: "timeout of a single object",
			err:  &Error{Err: ErrTimeout, Timeout: 30 * time.Second, Total: 1, NotReady: []ObjectStatus{st("web", InProgress, "Available: 1/2 (LessAvailable)")}},
			want: "health check timed out after 30s: 1 of 1 object not ready: apps/v1 Deployment shop/web (InProgress): Available: 1/2 (LessAvailable)",
		},
		{
			name: "cluster-scoped object without message",
			err: &Error{Err: ErrTimeout, Timeout: time.Minute, Total: 2, NotReady: []ObjectStatus{
				{Ref: ObjectRef{GVK: schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, Name: "shop"}, Status: Terminating},
			}},
			want: "health check timed out after 1m0s: 1 of 2 objects not ready: v1 Namespace shop (Terminating)",
		},
		{
			name:   "a long list is cut",
			err:    &Error{Err: ErrTimeout, Timeout: time.Minute, Total: 25, NotReady: many},
			prefix: "health check timed out after 1m0s: 25 of 25 objects not ready: apps/v1 Deployment shop/w0 (InProgress): Available: 0/1; ",
			suffix: "shop/w4 (InProgress): Available: 0/1; and 20 more",
			absent: "shop/w5 ",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			msg := tt.err.Error()
			if tt.want != "" {
				g.Expect(msg).To(Equal(tt.want))
			} else {
				g.Expect(msg).To(And(HavePrefix(tt.prefix), HaveSuffix(tt.suffix), Not(ContainSubstring(tt.absent))))
			}
			g.Expect(errors.Is(tt.err, tt.err.Err)).To(BeTrue())
			var he *Error
			g.Expect(errors.As(fmt.Errorf("wrapped: %w", tt.err), &he)).To(BeTrue())
		})
	}
}

func TestObjectRef(t *testing.T) {
	tests := []struct {
		name      string
		ref       convergev1.NamespacedObjectKindReference
		defaultNS string
		want      string
		wantErr   bool
	}{
		{
			name: "namespace given",
			ref:  convergev1.NamespacedObjectKindReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", Namespace: "shop"},
			want: "apps/v1 Deployment shop/web",
		},
		{
			name: "default namespace",
			ref:  convergev1.NamespacedObjectKindReference{APIVersion: "v1", Kind: "Service", Name: "web"},
			want: "v1 Service team-a/web", defaultNS: "team-a",
		},
		{
			name: "cluster-scoped",
			ref:  convergev1.NamespacedObjectKindReference{APIVersion: "v1", Kind: "Namespace", Name: "shop"},
			want: "v1 Namespace shop",
		},
		{
			name:    "bad apiVersion",
			ref:     convergev1.NamespacedObjectKindReference{APIVersion: "a/b/c", Kind: "X", Name: "x"},
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			r, err := RefForReference(tt.ref, tt.defaultNS)
			if tt.wantErr {
				g.Expect(err).To(HaveOccurred())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(r.String()).To(Equal(tt.want))
		})
	}
}

func TestDistinct(t *testing.T) {
	a := ObjectRef{GVK: deployGVK, Namespace: "shop", Name: "a"}
	b := ObjectRef{GVK: cmGVK, Namespace: "shop", Name: "a"}
	tests := []struct {
		name    string
		in      []ObjectRef
		want    []ObjectRef
		wantErr string
	}{
		{name: "repeats dropped, order kept", in: []ObjectRef{a, b, a}, want: []ObjectRef{a, b}},
		{name: "no name", in: []ObjectRef{{GVK: cmGVK, Namespace: "shop"}}, wantErr: "apiVersion, kind and name are required"},
		{name: "no kind", in: []ObjectRef{{Namespace: "shop", Name: "x"}}, wantErr: "apiVersion, kind and name are required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := distinct(tt.in)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
		})
	}
}
