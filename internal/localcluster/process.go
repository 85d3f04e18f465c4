package localcluster

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// childAttrs puts a component in a process group of its own, so that Stop controls its
// end, and asks the kernel to kill it if the thread that started it goes away.
func childAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func stopProcess(p *component) error {
	select {
	case <-p.exit:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exit:
		return nil
	case <-time.After(10 * time.Second):
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.exit
	return nil
}

func (c *Cluster) logFile(name string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(c.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	return f, nil
}

// tail returns the last lines a component logged, to explain a failed start.
func (c *Cluster) tail(name string) string {
	b, err := os.ReadFile(filepath.Join(c.Dir, name+".log"))
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return fmt.Sprintf("\n--- last lines of %s ---\n%s", name, strings.Join(lines, "\n"))
}

// guardEnvtestProcesses finds etcd and kube-apiserver, which envtest started as our
// children with their data under c.Dir, and hands them to the watchdog.
func (c *Cluster) guardEnvtestProcesses() {
	for _, pid := range ChildrenMentioning(os.Getpid(), c.Dir) {
		c.watchdog.guard(pid)
	}
}

// ChildrenMentioning lists the processes whose parent is ppid (any parent when ppid is 0)
// and whose command line contains s.
func ChildrenMentioning(ppid int, s string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid != 0 && parentOf(pid) != ppid {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(s)) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

func parentOf(pid int) int {
	_, fields, err := ProcStat(pid)
	if err != nil || len(fields) < 2 {
		return -1
	}
	ppid, err := strconv.Atoi(fields[1])
	if err != nil {
		return -1
	}
	return ppid
}

// watchdog is a small shell process that outlives its parent only to kill the processes
// it was told about: its stdin is a pipe whose write end only the parent holds, so it reads
// EOF exactly when the parent dies, whatever the cause. A clean Stop kills the watchdog
// first, so it never touches a process after its orderly end.
type watchdog struct {
	cmd *exec.Cmd
	in  *os.File
}

const watchdogScript = `trap '' INT TERM HUP
pids=
while read -r pid; do pids="$pids $pid"; done
for pid in $pids; do kill -KILL -- "-$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null; done
exit 0`

func startWatchdog() (*watchdog, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	cmd := exec.Command("/bin/sh", "-c", watchdogScript)
	cmd.Stdin = r
	// Its own process group: a Ctrl-C sent to ours does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = r.Close()
		_ = w.Close()
		return nil, fmt.Errorf("localcluster: starting the watchdog: %w", err)
	}
	_ = r.Close()
	return &watchdog{cmd: cmd, in: w}, nil
}

func (w *watchdog) guard(pid int) {
	_, _ = fmt.Fprintf(w.in, "%d\n", pid)
}

func (w *watchdog) close() {
	_ = w.cmd.Process.Kill()
	_ = w.cmd.Wait()
	_ = w.in.Close()
}
