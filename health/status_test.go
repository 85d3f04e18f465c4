package health

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

func mustObject(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(j); err != nil {
		t.Fatal(err)
	}
	return u
}

const deploymentHead = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop, generation: 1}
spec: {replicas: 2, progressDeadlineSeconds: 10}
`

func TestComputeStatus(t *testing.T) {
	widgetRules, err := compileRules(programs, []convergev1.CustomHealthCheck{widgetCheck()})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		obj     string
		rule    *exprRule
		want    Status
		wantMsg string // the exact message, unless a prefix or suffix is given instead
		prefix  string
		suffix  string
	}{
		{
			name: "available deployment",
			obj: deploymentHead + `
status:
  observedGeneration: 1
  replicas: 2
  updatedReplicas: 2
  readyReplicas: 2
  availableReplicas: 2
  conditions:
  - {type: Available, status: "True", reason: MinimumReplicasAvailable}
  - {type: Progressing, status: "True", reason: NewReplicaSetAvailable}
`,
			want: Current, wantMsg: "Deployment is available. Replicas: 2",
		},
		{
			name: "rolling deployment says how far and why",
			obj: deploymentHead + `
status:
  observedGeneration: 1
  replicas: 2
  updatedReplicas: 2
  readyReplicas: 1
  availableReplicas: 1
  conditions:
  - {type: Progressing, status: "True", reason: ReplicaSetUpdated}
`,
			want: InProgress, wantMsg: "Available: 1/2 (LessAvailable)",
		},
		{
			name: "deployment past its progress deadline",
			obj: deploymentHead + `
status:
  observedGeneration: 1
  replicas: 2
  updatedReplicas: 2
  unavailableReplicas: 2
  conditions:
  - {type: Available, status: "False", reason: MinimumReplicasUnavailable}
  - {type: Progressing, status: "False", reason: ProgressDeadlineExceeded, message: 'ReplicaSet "web-5d9c" has timed out progressing.'}
`,
			want:    Failed,
			wantMsg: `Progress deadline exceeded (ProgressDeadlineExceeded: ReplicaSet "web-5d9c" has timed out progressing.)`,
		},
		{
			name: "deployment its controller has not seen yet",
			obj:  deploymentHead,
			want: InProgress, wantMsg: "Replicas: 0/2 (LessReplicas)",
		},
		{
			name: "stale status of an older generation",
			obj: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop, generation: 3}
status: {observedGeneration: 2}
`,
			want: InProgress, wantMsg: "Deployment generation is 3, but latest observed generation is 2 (LatestGenerationNotObserved)",
		},
		{
			name: "failed job",
			obj: `
apiVersion: batch/v1
kind: Job
metadata: {name: migrate, namespace: shop}
status:
  failed: 3
  conditions: [{type: Failed, status: "True", reason: BackoffLimitExceeded}]
`,
			want: Failed, wantMsg: "Job Failed. failed: 3/1 (JobFailed)",
		},
		{
			name: "configmap",
			obj:  `{apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: shop}, data: {k: v}}`,
			want: Current, wantMsg: "Resource is always ready",
		},
		{
			name: "service account has no status and is current",
			obj:  `{apiVersion: v1, kind: ServiceAccount, metadata: {name: sa, namespace: shop}}`,
			want: Current, wantMsg: "Resource is current",
		},
		{
			name: "object being deleted",
			obj:  `{apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: shop, deletionTimestamp: "2026-01-01T00:00:00Z"}}`,
			want: Terminating, wantMsg: "Resource scheduled for deletion",
		},
		{
			name: "custom kind read by CEL",
			obj:  `{apiVersion: test.converge.dev/v1, kind: Widget, metadata: {name: w, namespace: shop}, status: {phase: Ready}}`,
			rule: widgetRules[widgetGVK],
			want: Current, prefix: "current expression holds: has(self.status)",
		},
		{
			name: "CEL is not asked about a stale status",
			obj:  `{apiVersion: test.converge.dev/v1, kind: Widget, metadata: {name: w, namespace: shop, generation: 2}, status: {phase: Ready, observedGeneration: 1}}`,
			rule: widgetRules[widgetGVK],
			want: InProgress, wantMsg: "Widget generation is 2, but latest observed generation is 1",
		},
		{
			name: "CEL is not asked about an object being deleted",
			obj:  `{apiVersion: test.converge.dev/v1, kind: Widget, metadata: {name: w, namespace: shop, deletionTimestamp: "2026-01-01T00:00:00Z"}, status: {phase: Ready}}`,
			rule: widgetRules[widgetGVK],
			want: Terminating, wantMsg: "Resource scheduled for deletion",
		},
		{
			name: "a long condition message is cut",
			obj: `
apiVersion: test.converge.dev/v1
kind: Gadget
metadata: {name: g, namespace: shop}
status:
  conditions: [{type: Ready, status: "False", reason: Waiting, message: "` + strings.Repeat("x", 2000) + `"}]
`,
			want: InProgress, prefix: "xxxxxxxxxx", suffix: "xxx…",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, msg := computeStatus(mustObject(t, tt.obj), tt.rule)
			g.Expect(got).To(Equal(tt.want), msg)
			g.Expect(len([]rune(msg))).To(BeNumerically("<=", maxMessage))
			if tt.prefix != "" || tt.suffix != "" {
				g.Expect(msg).To(And(HavePrefix(tt.prefix), HaveSuffix(tt.suffix)))
				return
			}
			g.Expect(msg).To(Equal(tt.wantMsg))
		})
	}
}

// A Secret is read without its data whatever the client returns, so no message or CEL
// rule can ever see it.
func TestSecretDataIsDropped(t *testing.T) {
	secretGVK := schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	tests := []struct {
		name string
		obj  func() runtime.Object
	}{
		{
			name: "full object",
			obj: func() runtime.Object {
				return mustObject(t, `{apiVersion: v1, kind: Secret, metadata: {name: s, namespace: shop}, data: {password: aHVudGVyMg==}, stringData: {token: hunter2}}`)
			},
		},
		{
			name: "metadata only",
			obj: func() runtime.Object {
				return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "shop", ResourceVersion: "7"}}
			},
		},
		{
			name: "typed object",
			obj: func() runtime.Object {
				return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "shop"},
					Data: map[string][]byte{"password": []byte("hunter2")}, StringData: map[string]string{"token": "hunter2"}}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s := &stream{resource: resource{gvk: secretGVK}}
			u, err := s.object(tt.obj())
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(u.Object).NotTo(HaveKey("data"))
			g.Expect(u.Object).NotTo(HaveKey("stringData"))
			g.Expect(u.GroupVersionKind()).To(Equal(secretGVK))
			g.Expect(u.GetName()).To(Equal("s"))
			st, msg := computeStatus(u, nil)
			g.Expect(st).To(Equal(Current))
			g.Expect(msg).To(Equal("Resource is always ready"))
		})
	}
}
