package render

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestRenderTimeout: a render stuck on a file read (a hostile or broken file
// system) ends soon after its deadline with "render exceeded <timeout>", reads
// nothing more once the deadline has passed — wherever it was stuck: the preflight,
// kustomize, or a plain-YAML walk — and leaves no goroutine or temporary directory
// behind.
func TestRenderTimeout(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	const files = 200
	tests := []struct {
		name      string
		path      string
		blockOn   string // the read that blocks until the deadline
		kustomize bool
	}{
		{name: "in the preflight", path: "app", blockOn: "app/kustomization.yaml", kustomize: true},
		{name: "in kustomize", path: "app", blockOn: "app/r/cm-000.yaml", kustomize: true},
		{name: "in a plain-YAML walk", path: "app/r", blockOn: "app/r/cm-000.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			root, _ := newRepo(t)
			var res []string
			for i := range files {
				p := fmt.Sprintf("r/cm-%03d.yaml", i)
				write(t, root, "app/"+p, cm(fmt.Sprintf("cm-%03d", i), "v"))
				res = append(res, p)
			}
			write(t, root, "app/kustomization.yaml", "resources:\n- "+strings.Join(res, "\n- ")+"\n")
			tmpBefore := tempEntries(t, tmp)
			goroutines := runtime.NumGoroutine()

			var blocked atomic.Bool
			var lateReads atomic.Int64 // reads that reached the file system after the deadline
			unblock := make(chan struct{})
			defer close(unblock) // should the deadline never come, do not leak the test's render
			hook := func(ctx context.Context, rel string) {
				if ctx.Err() != nil {
					lateReads.Add(1)
				}
				if rel == tt.blockOn && blocked.CompareAndSwap(false, true) {
					select {
					case <-ctx.Done():
					case <-unblock:
					}
				}
			}
			type outcome struct {
				res *Result
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				r, err := Render(context.Background(), Options{Root: root, Path: tt.path, Timeout: 300 * time.Millisecond, readHook: hook})
				done <- outcome{r, err}
			}()
			var out outcome
			g.Eventually(done).WithTimeout(20*time.Second).Should(Receive(&out), "the render ends soon after its deadline")

			g.Expect(blocked.Load()).To(BeTrue(), "the render did reach the blocking read")
			g.Expect(out.res).To(BeNil())
			g.Expect(out.err).To(MatchError(ErrRenderTimeout))
			g.Expect(out.err.Error()).To(Equal("render exceeded 300ms"))
			var re *Error
			g.Expect(errors.As(out.err, &re)).To(BeTrue(), "a timeout is the commit's fault: a *render.Error")
			g.Expect(errors.Is(out.err, context.DeadlineExceeded)).To(BeFalse(), "not the caller's context")
			g.Expect(lateReads.Load()).To(BeZero(), "no file is read after the deadline")
			g.Eventually(runtime.NumGoroutine).Should(BeNumerically("<=", goroutines), "no goroutine outlives the render")
			g.Expect(tempEntries(t, tmp)).To(Equal(tmpBefore), "no temporary directory is left")
		})
	}
}

// TestRenderTimeoutDefault: without Options.Timeout a render gets DefaultTimeout,
// and a render that finishes in time is not affected by its deadline.
func TestRenderTimeoutDefault(t *testing.T) {
	g := NewWithT(t)
	root, _ := newRepo(t)
	write(t, root, "kustomization.yaml", "resources: [cm.yaml]\n")
	write(t, root, "cm.yaml", cm("c", "1"))
	var deadline time.Time
	hook := func(ctx context.Context, _ string) { deadline, _ = ctx.Deadline() }
	start := time.Now()
	res, err := Render(context.Background(), Options{Root: root, readHook: hook})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ids(res.Objects)).To(Equal([]string{"ConfigMap c"}))
	g.Expect(deadline).To(BeTemporally("~", start.Add(DefaultTimeout), time.Minute))
	g.Expect(DefaultTimeout.String()).To(Equal("2m0s"))
	g.Expect((&Error{Err: timeoutError{after: DefaultTimeout}}).Error()).To(Equal("render exceeded 2m0s"))
}
