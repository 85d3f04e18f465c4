package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/converge-gitops/converge/internal/localcluster"
)

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on every Linux the benchmark runs on.
const clockTicks = 100

// cpuTimes is the CPU time, in seconds, of the machine (all) and of every running process
// by pid, with its command name.
type cpuTimes struct {
	all   float64
	procs map[int]procCPU
}

// procCPU is one process: its command name (a kernel thread's without its "/…", which
// names its current work), when it started (a pid used again is another process) and its
// CPU time.
type procCPU struct {
	comm    string
	start   string
	seconds float64
}

// machineBusy is the machine's busy CPU time, in seconds, from /proc/stat.
func machineBusy() (float64, error) {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := bytes.Cut(stat, []byte("\n"))
	fields := strings.Fields(string(line))
	busy := 0.0
	// cpu user nice system idle iowait irq softirq steal: all but idle and iowait are busy.
	for i, f := range fields[1:min(len(fields), 9)] {
		if i == 3 || i == 4 {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		busy += v / clockTicks
	}
	return busy, nil
}

// waitIdle waits until the machine used less than cores of CPU over a second (what a
// phase left behind, a namespace's deletion, the garbage collector, has settled), so that
// the timed phase that follows does not share the machine with it; at most timeout, then
// the phase runs anyway. It returns the use of the last second.
func waitIdle(ctx context.Context, cores float64, timeout time.Duration) (float64, error) {
	const window = time.Second
	deadline := time.Now().Add(timeout)
	last, err := machineBusy()
	if err != nil {
		return 0, err
	}
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(window):
		}
		busy, err := machineBusy()
		if err != nil {
			return 0, err
		}
		use := (busy - last) / window.Seconds()
		if use < cores || time.Now().After(deadline) {
			return use, nil
		}
		last = busy
	}
}

// readCPUTimes reads /proc/stat and every process's /proc/<pid>/stat.
func readCPUTimes() (cpuTimes, error) {
	t := cpuTimes{procs: map[int]procCPU{}}
	all, err := machineBusy()
	if err != nil {
		return t, err
	}
	t.all = all
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return t, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, f, err := localcluster.ProcStat(pid)
		if err != nil {
			continue // gone meanwhile
		}
		// After the command: state ppid pgrp session tty tpgid flags minflt cminflt majflt
		// cmajflt utime stime cutime cstime priority nice num_threads itrealvalue starttime.
		if len(f) < 20 {
			continue
		}
		utime, err1 := strconv.ParseFloat(f[11], 64)
		stime, err2 := strconv.ParseFloat(f[12], 64)
		if err1 != nil || err2 != nil {
			continue
		}
		comm, _, _ = strings.Cut(comm, "/")
		t.procs[pid] = procCPU{comm: comm, start: f[19], seconds: (utime + stime) / clockTicks}
	}
	return t, nil
}

// cpuUse is the CPU time spent between two readings, by command name; "other" is what
// processes that ended meanwhile (git's, mostly) and interrupts used: the machine's busy
// time less that of the processes running at the end.
type cpuUse map[string]float64

func (t cpuTimes) since(t0 cpuTimes) cpuUse {
	u := cpuUse{}
	running := 0.0
	for pid, p := range t.procs {
		d := p.seconds
		if p0, ok := t0.procs[pid]; ok && p0.start == p.start {
			d -= p0.seconds
		}
		if d > 0 {
			u[p.comm] += d
			running += d
		}
	}
	u["other"] = max(0, t.all-t0.all-running)
	return u
}

func (u cpuUse) total() float64 { return sumValues(u) }

// String is the total and the busiest first: "4.21 s (kube-apiserver 1.90, …)".
func (u cpuUse) String() string {
	names := make([]string, 0, len(u))
	for n, v := range u {
		if v >= 0.01 {
			names = append(names, n)
		}
	}
	slices.SortFunc(names, func(a, b string) int {
		switch {
		case u[a] > u[b]:
			return -1
		case u[a] < u[b]:
			return 1
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %.2f", n, u[n])
	}
	return fmt.Sprintf("%.2f s (%s)", u.total(), strings.Join(parts, ", "))
}
