package render

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/converge-gitops/converge/sync/helm"
)

// workerProc is the parent's handle on one worker process.
type workerProc struct {
	cmd     *exec.Cmd
	mu      sync.Mutex // one writer of requests and replies at a time
	in      *bufio.Writer
	inFile  *os.File
	out     *bufio.Reader
	stderr  *headWriter
	renders int
	readErr error         // why the last read of the worker's messages failed
	exited  chan struct{} // closed once the process is reaped
	dead    atomic.Bool
}

// startWorker starts a worker process with a minimal environment (nothing of the
// daemon's: no credentials, no proxy, no kubeconfig).
func startWorker(command []string, memoryLimit int64) (*workerProc, error) {
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	resR, resW, err := os.Pipe()
	if err != nil {
		_ = reqR.Close()
		_ = reqW.Close()
		return nil, err
	}
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env = []string{workerEnv + "=1", workerMemoryEnv + "=" + strconv.FormatInt(memoryLimit, 10),
		"GOMAXPROCS=1", "GOTRACEBACK=single"}
	cmd.ExtraFiles = []*os.File{reqR, resW}
	w := &workerProc{cmd: cmd, in: bufio.NewWriter(reqW), inFile: reqW, out: bufio.NewReaderSize(resR, 64<<10),
		stderr: &headWriter{max: 8 << 10}, exited: make(chan struct{})}
	cmd.Stderr = w.stderr
	cmd.SysProcAttr = workerProcAttr()
	err = cmd.Start()
	_ = reqR.Close()
	_ = resW.Close()
	if err != nil {
		_ = reqW.Close()
		_ = resR.Close()
		return nil, fmt.Errorf("starting a render worker: %w", err)
	}
	go func() {
		_ = cmd.Wait()
		w.dead.Store(true)
		_ = resR.Close()
		close(w.exited)
	}()
	return w, nil
}

func (w *workerProc) pid() int { return w.cmd.Process.Pid }

func (w *workerProc) done() bool { return w.dead.Load() }

// kill ends the worker and waits until it is reaped.
func (w *workerProc) kill() {
	w.dead.Store(true)
	_ = w.cmd.Process.Kill()
	_ = w.inFile.Close()
	<-w.exited
}

func (w *workerProc) send(m *toWorker) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return writeMessage(w.in, m)
}

// render runs one render on w. reason is set when the worker was killed or died: the
// worker is then dead.
func (w *workerProc) render(ctx context.Context, opts Options, timeout time.Duration, limit int64) (*Result, string, error) {
	w.renders++
	opts.Timeout = timeout
	if err := w.send(&toWorker{Request: requestOf(opts)}); err != nil {
		return nil, "crash", w.lost()
	}
	msgs, stop := w.messages()
	defer close(stop)
	deadline := time.NewTimer(timeout + timeoutGrace)
	defer deadline.Stop()
	watch := time.NewTicker(watchInterval)
	defer watch.Stop()
	calls := newCalls(ctx, opts)
	for {
		select {
		case m, ok := <-msgs:
			switch {
			case !ok:
				reason, err := w.crashed(limit)
				return nil, reason, err
			case m.Call != nil:
				go func() { _ = w.send(&toWorker{Reply: calls.answer(m.Call)}) }()
			case m.Result != nil:
				return w.finish(m.Result)
			}
		case <-watch.C:
			if residentBytes(w.pid()) > limit {
				w.kill()
				return nil, "memory", memoryError(limit)
			}
		case <-deadline.C:
			w.kill()
			return nil, "timeout", &Error{Err: timeoutError{after: timeout}}
		case <-ctx.Done():
			w.kill()
			return nil, "", ctx.Err()
		}
	}
}

// finish turns the worker's result into Render's; a worker still running a template
// past its deadline is ended.
func (w *workerProc) finish(r *wireResult) (*Result, string, error) {
	res, err := r.result()
	if r.Dirty {
		w.kill()
		return res, "timeout", err
	}
	return res, "", err
}

// messages reads the worker's messages until a result, an error or stop; the channel
// is closed on an error (the worker died or wrote nonsense).
func (w *workerProc) messages() (<-chan *fromWorker, chan struct{}) {
	msgs, stop := make(chan *fromWorker), make(chan struct{})
	go func() {
		defer close(msgs)
		for {
			m := &fromWorker{}
			if err := readMessage(w.out, maxMessage, m); err != nil {
				w.readErr = err
				return
			}
			select {
			case msgs <- m:
			case <-stop:
				return
			}
			if m.Result != nil {
				return
			}
		}
	}()
	return msgs, stop
}

// lost is the error of a worker that could not be written to.
func (w *workerProc) lost() error {
	w.kill()
	return workerError("render worker went away")
}

// crashed explains a worker that stopped answering: reaped, it left its reason on stderr.
func (w *workerProc) crashed(limit int64) (string, error) {
	w.kill()
	head := w.stderr.String()
	switch {
	case strings.Contains(head, "stack exceeds") || strings.Contains(head, "stack overflow"):
		return "stack", workerError(fmt.Sprintf("render recursed past its stack bound of %d MiB (a template calling itself through tpl or include); its worker was stopped",
			WorkerStack>>20))
	case strings.Contains(head, "out of memory"):
		return "memory", memoryError(limit)
	case errors.Is(w.readErr, errTooLarge):
		return "crash", workerError(fmt.Sprintf("render returned more than %d MiB of objects; its worker was stopped", maxMessage>>20), ErrLimitExceeded)
	}
	return "crash", workerError(fmt.Sprintf("render worker crashed (%s)", w.cmd.ProcessState))
}

func memoryError(limit int64) error {
	return workerError(fmt.Sprintf("render used more than %d MiB of memory; its worker was stopped", limit>>20), ErrLimitExceeded)
}

// workerError is the *Error of a worker the pool stopped or lost: msg is all it says, and
// it is ErrRenderWorker and the other classes given.
func workerError(msg string, classes ...error) error {
	return &Error{Err: &classedError{msg: msg, classes: append(classes, ErrRenderWorker), whole: true}}
}

// calls answers a worker's calls with the render's own functions, bounded.
type calls struct {
	ctx     context.Context
	opts    Options
	lookups atomic.Int64
}

func newCalls(ctx context.Context, opts Options) *calls { return &calls{ctx: ctx, opts: opts} }

func (c *calls) answer(call *wireCall) *wireReply {
	rep := &wireReply{ID: call.ID}
	if call.Scope != nil {
		if c.opts.IsNamespaced == nil {
			rep.Namespaced = true
			return rep
		}
		ns, err := c.opts.IsNamespaced(*call.Scope)
		if err != nil {
			rep.Err = err.Error()
		}
		rep.Namespaced = ns
		return rep
	}
	if c.opts.Helm == nil || c.opts.Helm.Lookup == nil {
		return rep
	}
	if c.lookups.Add(1) > helm.DefaultMaxLookups {
		rep.Err = fmt.Sprintf("more than %d lookup calls", helm.DefaultMaxLookups)
		return rep
	}
	obj, err := c.opts.Helm.Lookup(c.ctx, call.APIVersion, call.Kind, call.Namespace, call.Name)
	if err != nil {
		rep.Err = err.Error()
		return rep
	}
	if rep.Object, err = json.Marshal(obj); err != nil {
		rep.Err = err.Error()
	}
	return rep
}

// headWriter keeps the first max bytes written to it: where the Go runtime says why it
// crashed, before the stacks.
type headWriter struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *headWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if room := t.max - len(t.b); room > 0 {
		t.b = append(t.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (t *headWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
