package main

import (
	"bytes"
	"crypto/sha256"
	"os"
	"syscall"
	"testing"
	"time"
)

// CPU this process burns between two readings is put down to its command name, and the
// machine's total holds it. The loop runs on CPU time, not wall time, so a loaded machine
// only makes it longer.
func TestCPUUseByCommand(t *testing.T) {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skip("no /proc:", err)
	}
	comm := string(stat[bytes.IndexByte(stat, '(')+1 : bytes.LastIndexByte(stat, ')')])
	t0, err := readCPUTimes()
	if err != nil {
		t.Fatal(err)
	}
	// Busy until the kernel's own count for this process (getrusage) grew by 0.3 s, however
	// long a loaded machine takes to give it that.
	burnt := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	buf := make([]byte, 1<<20)
	for from, start := burnt(), time.Now(); burnt()-from < 300*time.Millisecond; {
		if time.Since(start) > time.Minute {
			t.Fatal("the busy loop got less than 0.3 s of CPU in a minute")
		}
		sha256.Sum256(buf)
	}
	t1, err := readCPUTimes()
	if err != nil {
		t.Fatal(err)
	}
	u := t1.since(t0)
	// /proc counts in clock ticks: allow a few.
	if u[comm] < 0.25 {
		t.Fatalf("%s used %.2f s of CPU by /proc where getrusage counted ≥ 0.3 s: %s", comm, u[comm], u)
	}
	if u.total() < u[comm] {
		t.Fatalf("total %.2f s < %s's %.2f s", u.total(), comm, u[comm])
	}
}
