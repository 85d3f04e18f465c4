package render

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/converge-gitops/converge/sync/helm"
)

// Environment of a render worker: the variable that makes a process one, and its memory
// bound in bytes.
const (
	workerEnv       = "CONVERGE_RENDER_WORKER"
	workerMemoryEnv = "CONVERGE_RENDER_WORKER_MEMORY"
)

// WorkerStack bounds a render worker's goroutine stacks: a template recursion the engines
// do not bound (tpl calling tpl) ends the worker at this depth instead of growing to the
// Go runtime's 1 GB. Real charts nest includes a few hundred KiB deep at most.
const WorkerStack = 64 << 20

// ServeWorkerIfAsked turns the process into a render worker when a Pool started it: it
// serves render requests until its parent goes away, then exits. Otherwise it returns at
// once. The converge binary calls it first thing in main, and so must the TestMain of any
// test binary whose tests render through a Pool (the worker is the same executable).
func ServeWorkerIfAsked() {
	if os.Getenv(workerEnv) != "1" {
		return
	}
	os.Exit(serveWorker())
}

// serveWorker is the worker's main: requests on fd 3, messages to the parent on fd 4.
func serveWorker() int {
	debug.SetMaxStack(WorkerStack)
	if limit, err := strconv.ParseInt(os.Getenv(workerMemoryEnv), 10, 64); err == nil && limit > 0 {
		debug.SetMemoryLimit(limit * 3 / 4)
		limitAddressSpace(limit)
	}
	raiseOOMScore()
	in, out := os.NewFile(3, "render-requests"), os.NewFile(4, "render-results")
	if in == nil || out == nil {
		fmt.Fprintln(os.Stderr, "render worker: started without its pipes")
		return 2
	}
	// Whatever a library prints goes to stderr: the protocol has pipes of its own.
	os.Stdout = os.Stderr
	w := &worker{out: bufio.NewWriter(out), pending: map[int64]chan *wireReply{}}
	requests := make(chan *wireRequest)
	go w.read(bufio.NewReader(in), requests)
	for req := range requests {
		res := w.render(req)
		if err := w.send(&fromWorker{Result: res}); err != nil {
			return 1
		}
		returnMemory()
	}
	return 0
}

// returnMemory gives a large render's memory back to the system, so that the next render's
// resident size is its own; after a small one (most) it is not worth a forced collection.
func returnMemory() {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	if m.HeapSys-m.HeapReleased > 64<<20 {
		debug.FreeOSMemory()
	}
}

// worker is the state of a render worker: the pipe to its parent and the calls waiting for
// an answer.
type worker struct {
	mu      sync.Mutex
	out     *bufio.Writer
	nextID  atomic.Int64
	pmu     sync.Mutex
	pending map[int64]chan *wireReply
}

// read dispatches the parent's messages: requests to the serving loop, replies to their
// calls. The parent going away ends the worker.
func (w *worker) read(r *bufio.Reader, requests chan<- *wireRequest) {
	for {
		var m toWorker
		if err := readMessage(r, maxMessage, &m); err != nil {
			os.Exit(0)
		}
		switch {
		case m.Request != nil:
			requests <- m.Request
		case m.Reply != nil:
			w.pmu.Lock()
			ch := w.pending[m.Reply.ID]
			delete(w.pending, m.Reply.ID)
			w.pmu.Unlock()
			if ch != nil {
				ch <- m.Reply
			}
		}
	}
}

func (w *worker) send(m *fromWorker) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return writeMessage(w.out, m)
}

func (w *worker) render(req *wireRequest) *wireResult {
	opts, err := req.options(caller{w})
	if err != nil {
		return resultOf(nil, &Error{Err: err})
	}
	res := resultOf(Render(context.Background(), opts))
	res.Dirty = helm.OverdueRenders() > 0
	return res
}

// call asks the parent and waits for its answer.
func (w *worker) call(c *wireCall) (*wireReply, error) {
	c.ID = w.nextID.Add(1)
	ch := make(chan *wireReply, 1)
	w.pmu.Lock()
	w.pending[c.ID] = ch
	w.pmu.Unlock()
	if err := w.send(&fromWorker{Call: c}); err != nil {
		return nil, err
	}
	rep := <-ch
	if rep.Err != "" {
		return nil, errors.New(rep.Err)
	}
	return rep, nil
}

// caller answers a render's functions through the parent.
type caller struct{ w *worker }

func (c caller) namespaced(gvk schema.GroupVersionKind) (bool, error) {
	rep, err := c.w.call(&wireCall{Scope: &gvk})
	if err != nil {
		return false, err
	}
	return rep.Namespaced, nil
}

func (c caller) lookup(_ context.Context, apiVersion, kind, namespace, name string) (map[string]any, error) {
	rep, err := c.w.call(&wireCall{APIVersion: apiVersion, Kind: kind, Namespace: namespace, Name: name})
	if err != nil {
		return nil, err
	}
	obj := map[string]any{}
	if len(rep.Object) > 0 {
		if err := utiljson.Unmarshal(rep.Object, &obj); err != nil {
			return nil, err
		}
	}
	return obj, nil
}
