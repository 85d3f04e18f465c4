package main

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
)

func TestUIRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{args: []string{"ui", "--port", "70000"}, want: "converge: --port 70000 is not a port\n"},
		{args: []string{"ui", "extra"}, want: `converge: unknown command "extra" for "converge ui"` + "\n"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			g := NewWithT(t)
			_, errOut, code := cliRun(context.Background(), "/nonexistent/kubeconfig", tc.args...)
			g.Expect(code).To(Equal(2))
			g.Expect(errOut).To(Equal(tc.want))
		})
	}
}
