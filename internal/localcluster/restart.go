package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// RestartAPIServer stops kube-apiserver and starts it again with the very same command
// line — the same port, certificates, users and etcd — so that Config, the kubeconfig
// file and every component keep working once it is back. It returns when the API server
// answers /readyz again. Tests use it to see clients live through an API server restart.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	if err := c.StopAPIServer(); err != nil {
		return err
	}
	return c.StartAPIServer(ctx)
}

// StopAPIServer stops kube-apiserver and leaves it stopped, etcd and the other components
// running: the cluster is away for its clients until StartAPIServer. Tests use it to see
// what a client does while an API server is down.
func (c *Cluster) StopAPIServer() error {
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		return errors.New("localcluster: the cluster is stopped")
	}
	if c.stoppedArgs != nil {
		c.mu.Unlock()
		return errors.New("localcluster: kube-apiserver is already stopped")
	}
	current := c.apiserver
	c.apiserver = nil
	c.mu.Unlock()

	var args []string
	if current != nil {
		args = current.cmd.Args[1:]
		if err := stopProcess(current); err != nil {
			return err
		}
	} else {
		var err error
		if args, err = c.stopEnvtestAPIServer(); err != nil {
			return err
		}
	}
	c.mu.Lock()
	c.stoppedArgs = args
	c.mu.Unlock()
	return nil
}

// StartAPIServer starts the kube-apiserver StopAPIServer stopped, with the very same
// command line, and returns when it answers /readyz.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	c.mu.Lock()
	args := c.stoppedArgs
	c.stoppedArgs = nil
	c.mu.Unlock()
	if args == nil {
		return errors.New("localcluster: kube-apiserver is not stopped")
	}
	p, err := c.spawn("kube-apiserver", args...)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		return errors.Join(errors.New("localcluster: the cluster was stopped during the start of kube-apiserver"), stopProcess(p))
	}
	c.apiserver = p
	c.mu.Unlock()

	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return fmt.Errorf("localcluster: %w", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case <-p.exit:
			return false, fmt.Errorf("kube-apiserver exited: %v", p.err)
		default:
		}
		_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("localcluster: waiting for the restarted kube-apiserver: %w%s", err, c.tail("kube-apiserver"))
	}
	return nil
}

// stopEnvtestAPIServer ends the kube-apiserver envtest started (a child of this process
// with its certificates under c.Dir) and returns its arguments. envtest reaps it and,
// finding it exited, leaves its replacement to Stop.
func (c *Cluster) stopEnvtestAPIServer() ([]string, error) {
	for _, pid := range ChildrenMentioning(os.Getpid(), c.Dir) {
		cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err != nil {
			continue
		}
		argv := bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0})
		if len(argv) == 0 || filepath.Base(string(argv[0])) != "kube-apiserver" {
			continue
		}
		args := make([]string, 0, len(argv)-1)
		for _, a := range argv[1:] {
			args = append(args, string(a))
		}
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			return nil, fmt.Errorf("localcluster: stopping kube-apiserver: %w", err)
		}
		// A graceful stop waits for every open request and watch to end; past a few
		// seconds it is killed, as a kubelet would after its grace period.
		if !gone(pid, 5*time.Second) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			if !gone(pid, 10*time.Second) {
				return nil, fmt.Errorf("localcluster: kube-apiserver (pid %d) does not stop", pid)
			}
		}
		return args, nil
	}
	return nil, errors.New("localcluster: no running kube-apiserver found")
}

// gone waits up to timeout for pid to end.
func gone(pid int, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); running(pid); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// running reports whether pid is a live process (not gone, not a zombie awaiting its reaper).
func running(pid int) bool {
	_, fields, err := ProcStat(pid)
	return err == nil && len(fields) > 0 && fields[0] != "Z"
}
