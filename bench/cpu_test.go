package main

import (
	"bytes"
	"crypto/sha256"
	"os"
	"testing"
	"time"
)

// CPU this process burns between two readings is put down to its command name, and the
// machine's total holds it.
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
	buf := make([]byte, 1<<20)
	for start := time.Now(); time.Since(start) < 300*time.Millisecond; {
		sha256.Sum256(buf)
	}
	t1, err := readCPUTimes()
	if err != nil {
		t.Fatal(err)
	}
	u := t1.since(t0)
	if u[comm] < 0.2 {
		t.Fatalf("%s used %.2f s of CPU in a 300 ms busy loop, want ≥ 0.2: %s", comm, u[comm], u)
	}
	if u.total() < u[comm] {
		t.Fatalf("total %.2f s < %s's %.2f s", u.total(), comm, u[comm])
	}
}
