package apply

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestRedactSecretValues(t *testing.T) {
	secret := parse(t, `apiVersion: v1
kind: Secret
metadata: {name: db, namespace: shop}
data: {token: aHVudGVyMi1iNjQ=}
stringData: {password: hunter2-plain, pin: "12"}
`)
	notASecret := parse(t, `apiVersion: v1
kind: ConfigMap
metadata: {name: conf, namespace: shop}
data: {mode: plain-config-value}
`)
	objects := []*unstructured.Unstructured{secret, notASecret}
	tests := []struct {
		name string
		msg  string
		want string
	}{
		{name: "string value", msg: `invalid: hunter2-plain`, want: `invalid: [redacted]`},
		{name: "base64 value and its decoded form", msg: `got aHVudGVyMi1iNjQ= (hunter2-b64)`, want: `got [redacted] ([redacted])`},
		{name: "too short to redact", msg: `pin 12`, want: `pin 12`},
		{name: "ConfigMaps are not secret", msg: `mode plain-config-value`, want: `mode plain-config-value`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			orig := errors.New(tt.msg)
			err := RedactSecretValues(orig, objects)
			g.Expect(err).To(MatchError(tt.want))
			g.Expect(errors.Is(err, orig)).To(BeTrue(), "unwraps to the original")
		})
	}
	g := NewWithT(t)
	g.Expect(RedactSecretValues(nil, objects)).To(Succeed())
}
