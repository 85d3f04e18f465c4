package localcluster_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/converge-gitops/converge/internal/localcluster"
)

// TestProcStat reads a child whose command name holds spaces and parentheses: the name is
// whole and the fields after it are in place (the parent's pid second, the state first).
func TestProcStat(t *testing.T) {
	g := NewWithT(t)
	sleep, err := exec.LookPath("sleep")
	g.Expect(err).NotTo(HaveOccurred())
	name := filepath.Join(t.TempDir(), "a) b (c")
	g.Expect(os.Symlink(sleep, name)).To(Succeed())
	cmd := exec.Command(name, "60")
	g.Expect(cmd.Start()).To(Succeed())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})

	// Until the child has exec'd, its command name is still this test binary's.
	var fields []string
	g.Eventually(func(g Gomega) string {
		comm, f, err := localcluster.ProcStat(cmd.Process.Pid)
		g.Expect(err).NotTo(HaveOccurred())
		fields = f
		return comm
	}).WithTimeout(10 * time.Second).WithPolling(5 * time.Millisecond).Should(Equal("a) b (c"))
	g.Expect(len(fields)).To(BeNumerically(">=", 20))
	g.Expect(fields[0]).To(BeElementOf("R", "S", "D"))
	g.Expect(fields[1]).To(Equal(strconv.Itoa(os.Getpid())))

	g.Expect(cmd.Process.Kill()).To(Succeed())
	_, _ = cmd.Process.Wait()
	_, _, err = localcluster.ProcStat(cmd.Process.Pid)
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "a process gone: %v", err)
}
