package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// profileWindow is the length of one CPU profile request: the daemon is profiled in back-to-back
// windows while a workload runs, merged afterwards.
const profileWindow = 2 * time.Second

// profiler takes a daemon's CPU profile while a workload runs (BENCH_PROFILE=1).
type profiler struct {
	url      string // the daemon's /debug/pprof
	workload string
	files    []string
	stop     chan struct{}
	done     chan struct{}
	err      error
}

// profileDir is where profiles go: bin/bench/ under the module.
func (b *Bench) profileDir() string { return filepath.Join(b.root, "bin", "bench") }

// profilePath is the path of the profile file in profileDir, which it makes if missing.
func (b *Bench) profilePath(file string) (string, error) {
	if err := os.MkdirAll(b.profileDir(), 0o755); err != nil {
		return "", err
	}
	return filepath.Join(b.profileDir(), file), nil
}

// startProfile starts profiling d for workload; nil (a no-op) unless BENCH_PROFILE is set.
func (b *Bench) startProfile(d *daemon, workload string) *profiler {
	if !b.cfg.Profile || d.pprofURL == "" {
		return nil
	}
	p := &profiler{url: d.pprofURL, workload: workload, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for i := 0; ; i++ {
			select {
			case <-p.stop:
				return
			default:
			}
			f := filepath.Join(b.work, fmt.Sprintf("cpu-%s-%p-%d.pprof", sanitize(workload), p, i))
			if err := fetchTo(p.url+fmt.Sprintf("/profile?seconds=%d", int(profileWindow.Seconds())), f); err != nil {
				p.err = err
				return
			}
			p.files = append(p.files, f)
		}
	}()
	return p
}

// finish stops the CPU profile, takes a heap profile and keeps both for the workload.
func (b *Bench) finishProfile(p *profiler) error {
	if p == nil {
		return nil
	}
	close(p.stop)
	<-p.done
	if p.err != nil {
		return fmt.Errorf("profiling %s: %w", p.workload, p.err)
	}
	heap, err := b.profilePath(sanitize(p.workload) + ".heap.pprof")
	if err != nil {
		return err
	}
	if err := fetchTo(p.url+"/heap", heap); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cpuProfiles == nil {
		b.cpuProfiles = map[string][]string{}
	}
	if _, ok := b.cpuProfiles[p.workload]; !ok {
		b.profileOrder = append(b.profileOrder, p.workload)
	}
	b.cpuProfiles[p.workload] = append(b.cpuProfiles[p.workload], p.files...)
	return nil
}

// writeProfiles merges each workload's CPU profiles into bin/bench/<workload>.cpu.pprof and
// notes its top five functions by CPU (flat), so the next bottleneck shows without a second run.
func (b *Bench) writeProfiles(ctx context.Context) error {
	for _, w := range b.profileOrder {
		files := b.cpuProfiles[w]
		if len(files) == 0 {
			continue
		}
		out := filepath.Join(b.profileDir(), sanitize(w)+".cpu.pprof")
		merge := exec.CommandContext(ctx, "go", append([]string{"tool", "pprof", "-proto"}, files...)...)
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		merge.Stdout = f
		err = merge.Run()
		_ = f.Close()
		if err != nil {
			return fmt.Errorf("merging the CPU profiles of %s: %w", w, err)
		}
		top, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=5", b.binary, out).Output()
		if err != nil {
			return fmt.Errorf("reading the CPU profile of %s: %w", w, err)
		}
		b.res.Notes = append(b.res.Notes, fmt.Sprintf("profile %s (%s, heap beside it): top CPU %s", w, out, topFunctions(string(top))))
	}
	return nil
}

// topFunctions reads `go tool pprof -top` output into "f 12.3%, g 8.1%, …".
func topFunctions(out string) string {
	var parts []string
	header := false
	for line := range strings.SplitSeq(out, "\n") {
		fields := strings.Fields(line)
		if slices.Contains(fields, "flat%") {
			header = true
			continue
		}
		if !header || len(fields) < 6 {
			continue
		}
		parts = append(parts, strings.Join(fields[5:], " ")+" "+fields[1])
	}
	if len(parts) == 0 {
		return "(no samples)"
	}
	return strings.Join(parts, ", ")
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == ' ' || r == '/' || r == '=' {
			return '-'
		}
		return r
	}, s)
}

// fetchTo saves the body of a GET to path.
func fetchTo(url, path string) error {
	resp, err := http.Get(url) //nolint:gosec,noctx // the daemon's loopback pprof endpoint
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
