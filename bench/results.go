package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Unit of a figure.
type Unit string

const (
	Seconds  Unit = "s"
	MiB      Unit = "MiB"
	Requests Unit = "requests"
)

// Stat is the median, min and max of repeated measurements.
type Stat struct {
	Samples []float64 `json:"samples"`
	Median  float64   `json:"median"`
	Min     float64   `json:"min"`
	Max     float64   `json:"max"`
}

func newStat(samples []float64) Stat {
	s := Stat{Samples: slices.Clone(samples)}
	if len(samples) == 0 {
		return s
	}
	sorted := slices.Sorted(slices.Values(samples))
	s.Min, s.Max = sorted[0], sorted[len(sorted)-1]
	if n := len(sorted); n%2 == 1 {
		s.Median = sorted[n/2]
	} else {
		s.Median = (sorted[n/2-1] + sorted[n/2]) / 2
	}
	return s
}

// Target is what the issue sets out to beat: the figure (or, with OnRatio, the ratio to the
// baseline) must be at most Max; with FluxMax, converge/Flux must be at most FluxMax too
// when Flux was measured.
type Target struct {
	Text    string  `json:"text"`
	Max     float64 `json:"max,omitempty"`
	OnRatio bool    `json:"onRatio,omitempty"`
	FluxMax float64 `json:"fluxMax,omitempty"`
}

// Result is one row of the table.
type Result struct {
	Workload string `json:"workload"`
	Metric   string `json:"metric"`
	Unit     Unit   `json:"unit"`
	Stat
	// Baseline, when set, is the run this figure is compared with, made in the same
	// invocation on the same cluster; Ratio is median / baseline median, RatioSamples the
	// ratio of each repetition's pair.
	BaselineName string    `json:"baselineName,omitempty"`
	Baseline     *Stat     `json:"baseline,omitempty"`
	Ratio        float64   `json:"ratio,omitempty"`
	RatioSamples []float64 `json:"ratioSamples,omitempty"`
	Target       *Target   `json:"target,omitempty"`
	// Met says whether the median meets the target (nil without a target).
	Met *bool `json:"met,omitempty"`
	// Flux is the same figure for Flux, measured in the same invocation on the same
	// cluster (BENCH_BASELINES=flux); FluxRatio is converge's median / Flux's median.
	Flux      *Stat   `json:"flux,omitempty"`
	FluxRatio float64 `json:"fluxRatio,omitempty"`
	// Detail carries what else was measured (e.g. a breakdown of API requests per rep).
	Detail any `json:"detail,omitempty"`
}

// Results collects the rows in the order they were measured.
type Results struct {
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Host     HostInfo  `json:"host"`
	Config   Config    `json:"config"`
	Notes    []string  `json:"notes"`
	Rows     []*Result `json:"results"`
}

// HostInfo describes where the figures come from.
type HostInfo struct {
	GoVersion string   `json:"goVersion"`
	CPUs      int      `json:"cpus"`
	Kernel    string   `json:"kernel,omitempty"`
	LoadAvg   string   `json:"loadAvgAtStart,omitempty"`
	Commit    string   `json:"commit,omitempty"`
	Dirty     bool     `json:"dirty,omitempty"`
	Notes     []string `json:"notes,omitempty"`
}

// add records a figure; baseline may be nil.
func (rs *Results) add(workload, metric string, unit Unit, samples []float64, baselineName string, baseline []float64, target *Target) *Result {
	r := &Result{Workload: workload, Metric: metric, Unit: unit, Stat: newStat(samples), Target: target}
	if baseline != nil {
		b := newStat(baseline)
		r.BaselineName, r.Baseline = baselineName, &b
		if b.Median > 0 {
			r.Ratio = r.Median / b.Median
		}
		for i := range min(len(samples), len(baseline)) {
			if baseline[i] > 0 {
				r.RatioSamples = append(r.RatioSamples, samples[i]/baseline[i])
			}
		}
	}
	if target != nil && target.Max > 0 && len(samples) > 0 {
		v := r.Median
		if target.OnRatio {
			v = r.Ratio
		}
		met := v <= target.Max
		r.Met = &met
	}
	rs.Rows = append(rs.Rows, r)
	return r
}

// addFlux records Flux's figure beside converge's row of the same workload and metric.
func (rs *Results) addFlux(workload, metric string, samples []float64) {
	if len(samples) == 0 {
		return
	}
	for _, r := range rs.Rows {
		if r.Workload != workload || r.Metric != metric {
			continue
		}
		f := newStat(samples)
		r.Flux = &f
		if f.Median > 0 {
			r.FluxRatio = r.Median / f.Median
		}
		if r.Met != nil && r.Target.FluxMax > 0 && r.FluxRatio > 0 {
			met := *r.Met && r.FluxRatio <= r.Target.FluxMax
			r.Met = &met
		}
	}
}

// find returns the row of a workload and metric, or nil.
func (rs *Results) find(workload, metric string) *Result {
	for _, r := range rs.Rows {
		if r.Workload == workload && r.Metric == metric {
			return r
		}
	}
	return nil
}

func format(v float64, u Unit) string {
	switch u {
	case Seconds:
		switch {
		case v == 0:
			return "0 s"
		case v < 1:
			return fmt.Sprintf("%.0f ms", v*1000)
		case v < 10:
			return fmt.Sprintf("%.2f s", v)
		}
		return fmt.Sprintf("%.1f s", v)
	case MiB:
		return fmt.Sprintf("%.0f MiB", v)
	case Requests:
		if v != float64(int64(v)) && v < 100 {
			return fmt.Sprintf("%.1f", v) // a mean per object
		}
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%g %s", v, u)
}

// WriteTable prints the rows as an aligned table.
func (rs *Results) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintf(tw, "workload\tmetric\tmedian\tmin\tmax\tbaseline (median)\tratio\tFlux --concurrent=%d, storage and TMPDIR on tmpfs (median, min–max)\tconverge/Flux\ttarget\tmet\n", fluxConcurrency)
	for _, r := range rs.Rows {
		base, ratio, target, met := "—", "—", "—", "—"
		flux, fluxRatio := "—", "—"
		if r.Flux != nil {
			flux = fmt.Sprintf("%s (%s–%s)", format(r.Flux.Median, r.Unit), format(r.Flux.Min, r.Unit), format(r.Flux.Max, r.Unit))
			fluxRatio = fmt.Sprintf("%.2f×", r.FluxRatio)
			if r.FluxRatio < 0.1 {
				fluxRatio = fmt.Sprintf("%.3f×", r.FluxRatio)
			}
		}
		if r.Baseline != nil {
			base = r.BaselineName + " " + format(r.Baseline.Median, r.Unit)
			ratio = fmt.Sprintf("%.2f×", r.Ratio)
		}
		if r.Target != nil {
			target = r.Target.Text
		}
		if r.Met != nil {
			met = map[bool]string{true: "yes", false: "NO"}[*r.Met]
		}
		median, lo, hi := "—", "—", "—"
		if len(r.Samples) > 0 {
			median, lo, hi = format(r.Median, r.Unit), format(r.Min, r.Unit), format(r.Max, r.Unit)
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Workload, r.Metric, median, lo, hi, base, ratio, flux, fluxRatio, target, met)
	}
	_ = tw.Flush()
}

// WriteJSON writes the results to path, creating its directory.
func (rs *Results) WriteJSON(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(rs, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func hostInfo(root string) HostInfo {
	h := HostInfo{GoVersion: runtime.Version(), CPUs: runtime.NumCPU()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		h.LoadAvg = strings.Join(strings.Fields(string(b))[:min(3, len(strings.Fields(string(b))))], " ")
	}
	if out, err := gitOutput(root, "rev-parse", "HEAD"); err == nil {
		h.Commit = out
	}
	if out, err := gitOutput(root, "status", "--porcelain", "--untracked-files=no"); err == nil {
		h.Dirty = out != ""
	}
	return h
}

// seconds turns durations into the float samples of a Stat.
func seconds(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = d.Seconds()
	}
	return out
}
