package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/converge-gitops/converge/internal/freeport"
)

// daemon is a `converge serve` process of the real binary. Its output is kept in memory,
// to look for lines and to show what it did when a scenario fails.
type daemon struct {
	name  string
	args  []string
	probe string // base URL of /healthz and /readyz

	mu       sync.Mutex
	out      bytes.Buffer
	log      *os.File // a copy of out in the suite's log directory
	cmd      *exec.Cmd
	done     chan struct{}
	from     int  // where the running process's output starts in out
	stopping bool // kill or stop was asked: no restart

	restart sync.Mutex // one startIfExited at a time
}

// The positions in daemon.args of the metrics and probe addresses, which start may change.
const (
	metricsArg = 4
	probeArg   = 6
)

// startDaemon runs `converge serve` against the suite's cluster with free ports for
// metrics and probes, no webhook receiver unless args set one, and a checkout cache of its
// own; args come last and win. tb's cleanup stops it.
func startDaemon(tb testing.TB, name string, args ...string) *daemon {
	tb.Helper()
	metrics, probe := freeAddr(tb), freeAddr(tb)
	d := &daemon{
		name:  name,
		probe: "http://" + probe,
		args: append([]string{"serve", "--kubeconfig", suite.cluster.Kubeconfig,
			"--metrics-bind-address", metrics, "--health-probe-bind-address", probe,
			"--webhook-bind-address", "", "--cache-dir", tb.TempDir()}, args...),
	}
	log, err := os.Create(filepath.Join(suite.logDir, name+".log"))
	if err != nil {
		tb.Fatal(err)
	}
	d.log = log
	if err := d.start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		d.stop()
		_ = log.Close()
	})
	return d
}

// start runs the process (again, after kill or stop), with the same flags. A port picked
// by freeAddr can be taken by another process before the daemon binds it: a daemon that
// exits because its metrics or probe port is in use is started again on other ports.
func (d *daemon) start() error {
	d.mu.Lock()
	d.stopping = false
	d.mu.Unlock()
	cmd, err := d.spawn()
	if err != nil {
		return err
	}
	done := make(chan struct{})
	d.mu.Lock()
	d.cmd, d.done = cmd, done
	d.mu.Unlock()
	go func() {
		defer close(done)
		for restarts := 0; ; restarts++ {
			err := cmd.Wait()
			_, _ = fmt.Fprintf(d, "=== e2e: daemon %s exited at %s: %v\n", d.name, time.Now().Format(time.RFC3339Nano), err)
			if restarts == 5 || !d.lostPort() {
				return
			}
			next, err := d.spawn()
			if err != nil {
				return
			}
			cmd = next
		}
	}()
	return nil
}

// spawn starts one process with d.args and makes it d.cmd.
func (d *daemon) spawn() (*exec.Cmd, error) {
	d.mu.Lock()
	args := append([]string(nil), d.args...)
	d.mu.Unlock()
	cmd := exec.Command(suite.binary, args...)
	cmd.Stdout, cmd.Stderr = d, d
	// Dies with the suite whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	_, _ = fmt.Fprintf(d, "=== e2e: starting daemon %s at %s\n", d.name, time.Now().Format(time.RFC3339Nano))
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopping && d.cmd != nil {
		return nil, fmt.Errorf("daemon %s stopped", d.name)
	}
	d.from = d.out.Len()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting daemon %s: %w", d.name, err)
	}
	d.cmd = cmd
	return cmd, nil
}

// lostPort reports whether the process that just exited did so because its metrics or
// probe address was in use, and if so picks new ones for the next start.
func (d *daemon) lostPort() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopping {
		return false
	}
	out := d.out.Bytes()[d.from:]
	lost := false
	for _, i := range []int{metricsArg, probeArg} {
		if bytes.Contains(out, []byte("listen tcp "+d.args[i]+": bind: address already in use")) {
			lost = true
		}
	}
	if !lost {
		return false
	}
	metrics, err := freeport.Addr()
	if err != nil {
		return false
	}
	probe, err := freeport.Addr()
	if err != nil {
		return false
	}
	d.args[metricsArg], d.args[probeArg] = metrics, probe
	d.probe = "http://" + d.args[probeArg]
	return true
}

func (d *daemon) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, _ = d.log.Write(p)
	return d.out.Write(p)
}

// process returns the running process and the channel closed when it exits.
func (d *daemon) process() (*exec.Cmd, chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cmd, d.done
}

// signal marks the daemon as stopping, so it is not started again, and signals the
// running process.
func (d *daemon) signal(sig syscall.Signal) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopping = true
	_ = d.cmd.Process.Signal(sig)
}

// kill ends the daemon with SIGKILL: no chance to release a lease or finish a write.
func (d *daemon) kill() {
	cmd, done := d.process()
	if cmd == nil {
		return
	}
	d.signal(syscall.SIGKILL)
	<-done
	_, _ = fmt.Fprintf(d, "=== e2e: daemon %s killed at %s\n", d.name, time.Now().Format(time.RFC3339Nano))
}

// stop ends the daemon as an orchestrator would: SIGTERM, then SIGKILL after 10 s.
func (d *daemon) stop() {
	cmd, done := d.process()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	d.signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		d.signal(syscall.SIGKILL)
		<-done
	}
}

// startIfExited starts the daemon again if its process ended and no stop was asked since,
// as an orchestrator restarts a container that exits (a replica that loses its lease
// does): it reports whether it did.
func (d *daemon) startIfExited() (bool, error) {
	d.restart.Lock()
	defer d.restart.Unlock()
	d.mu.Lock()
	stopping := d.stopping
	d.mu.Unlock()
	if !d.exited() || stopping {
		return false, nil
	}
	return true, d.start()
}

// exited reports whether the process ended.
func (d *daemon) exited() bool {
	_, done := d.process()
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// waitReady waits for /readyz to answer 200.
func (d *daemon) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if d.exited() {
			return fmt.Errorf("daemon %s exited:\n%s", d.name, d.tail(40))
		}
		d.mu.Lock()
		probe := d.probe
		d.mu.Unlock()
		if code, err := httpGet(probe + "/readyz"); err == nil && code == 200 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("daemon %s not ready after %s:\n%s", d.name, timeout, d.tail(40))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// logged reports whether the daemon wrote s.
func (d *daemon) logged(s string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return bytes.Contains(d.out.Bytes(), []byte(s))
}

// loggedSinceStart reports whether the running process (or the last one) wrote s.
func (d *daemon) loggedSinceStart(s string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return bytes.Contains(d.out.Bytes()[d.from:], []byte(s))
}

// tail returns the last n lines of output that contain one of filters (all lines when
// there is none), and the harness's own lines.
func (d *daemon) tail(n int, filters ...string) string {
	d.mu.Lock()
	text := d.out.String()
	d.mu.Unlock()
	var keep []string
	for _, l := range strings.Split(text, "\n") {
		if len(filters) == 0 || strings.HasPrefix(l, "=== e2e:") || slices.ContainsFunc(filters, func(f string) bool { return strings.Contains(l, f) }) {
			keep = append(keep, l)
		}
	}
	if len(keep) > n {
		keep = keep[len(keep)-n:]
	}
	return strings.Join(keep, "\n")
}

// freeAddr returns a loopback address with a port free right now and not handed out
// before in this process.
func freeAddr(tb testing.TB) string {
	tb.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		tb.Fatal(err)
	}
	return addr
}
