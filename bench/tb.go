package main

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// programTB lets the benchmark program use the test helpers of internal/gittest, which take
// a testing.TB, outside a test. The embedded interface is nil: only the methods below are
// implemented, and they are all gittest calls. A failure panics with fatalError, which main
// recovers after running the cleanups.
type programTB struct {
	testing.TB

	mu       sync.Mutex
	cleanups []func()
}

// fatalError is the panic value of programTB.Fatal and Fatalf.
type fatalError struct{ msg string }

func (e fatalError) Error() string { return e.msg }

func (*programTB) Helper()      {}
func (*programTB) Name() string { return "bench" }

func (*programTB) Fatal(args ...any) { panic(fatalError{fmt.Sprint(args...)}) }

func (*programTB) Fatalf(format string, args ...any) {
	panic(fatalError{fmt.Sprintf(format, args...)})
}

func (*programTB) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "error: "+format+"\n", args...)
}

func (*programTB) Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}

func (t *programTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

// runCleanups runs the registered cleanups, last registered first, as testing does.
func (t *programTB) runCleanups() {
	t.mu.Lock()
	fs := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}
