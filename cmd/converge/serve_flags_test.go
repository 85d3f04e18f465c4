package main

import (
	"os/exec"
	"testing"

	. "github.com/onsi/gomega"
)

// TestServeRenderFlags: --max-concurrent-per-namespace defaults to no cap (the
// multi-tenant install sets one), and unusable values of it, of --render-timeout and of
// the render workers' flags are refused before anything starts.
func TestServeRenderFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want int
	}{
		{nil, 0},
		{[]string{"--concurrency", "7"}, 0},
		{[]string{"--concurrency", "20", "--max-concurrent-per-namespace", "10"}, 10},
	} {
		g := NewWithT(t)
		cmd := newServeCommand()
		g.Expect(cmd.Flags().Parse(tt.args)).To(Succeed())
		o := &managerOptions{}
		o.concurrency, _ = cmd.Flags().GetInt("concurrency")
		o.perNamespace, _ = cmd.Flags().GetInt("max-concurrent-per-namespace")
		g.Expect(o.maxPerNamespace()).To(Equal(tt.want), "%v", tt.args)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--render-timeout", "0"}, "--render-timeout must be positive"},
		{[]string{"serve", "--max-concurrent-per-namespace", "-1"}, "--max-concurrent-per-namespace must not be negative"},
		{[]string{"serve", "--render-workers", "0"}, "--render-workers must be at least 1"},
		{[]string{"serve", "--render-workers-per-namespace", "-1"}, "--render-workers-per-namespace must not be negative"},
		{[]string{"serve", "--render-memory-limit", "lots"}, `--render-memory-limit must be a quantity of at least 64Mi, got "lots"`},
		{[]string{"serve", "--render-memory-limit", "16Mi"}, `--render-memory-limit must be a quantity of at least 64Mi, got "16Mi"`},
	} {
		g := NewWithT(t)
		// The real binary: serve sets up a signal handler, which a process may do once.
		out, err := exec.Command(binary, tt.args...).CombinedOutput()
		g.Expect(err).To(HaveOccurred(), "%s", out)
		g.Expect(string(out)).To(ContainSubstring(tt.want))
	}
}
