package render

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// addressSpaceSlack is what a Go process reserves without using it (the heap's page
// summaries alone reserve hundreds of MiB): a worker's address space is bounded at its
// memory bound plus this, a backstop behind the resident-size watch that ends a render
// allocating faster than it is read.
const addressSpaceSlack = 2 << 30

// limitAddressSpace bounds the worker's address space (setrlimit RLIMIT_AS): an
// allocation past it ends the worker with "out of memory".
func limitAddressSpace(limit int64) {
	l := uint64(limit) + addressSpaceSlack
	_ = syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: l, Max: l})
}

// raiseOOMScore makes the worker the kernel's first choice when memory runs out, before
// the daemon it serves.
func raiseOOMScore() {
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
}

// workerProcAttr kills the worker when the process that started it dies.
func workerProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// residentBytes is the resident memory of process pid (0 when it cannot be read).
func residentBytes(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}
