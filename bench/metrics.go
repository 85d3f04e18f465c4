package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
)

// sample is one line of the Prometheus text format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// parseMetrics reads the Prometheus text exposition format, keeping the samples whose metric
// name starts with one of prefixes (all when none is given).
func parseMetrics(r io.Reader, prefixes ...string) ([]sample, error) {
	var out []sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		if len(prefixes) > 0 && !hasAnyPrefix(line, prefixes) {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// parseSample reads `name{a="x",b="y"} value [timestamp]`.
func parseSample(line string) (sample, error) {
	s := sample{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return s, fmt.Errorf("metrics: malformed line %q", line)
	}
	s.name = line[:i]
	rest := line[i:]
	if rest[0] == '{' {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, ", ")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.Index(rest, "=\"")
			if eq < 0 {
				return s, fmt.Errorf("metrics: malformed labels in %q", line)
			}
			key := rest[:eq]
			rest = rest[eq+2:]
			var val strings.Builder
			j := 0
			for ; j < len(rest) && rest[j] != '"'; j++ {
				if rest[j] == '\\' && j+1 < len(rest) {
					j++
					switch rest[j] {
					case 'n':
						val.WriteByte('\n')
					default:
						val.WriteByte(rest[j])
					}
					continue
				}
				val.WriteByte(rest[j])
			}
			if j >= len(rest) {
				return s, fmt.Errorf("metrics: unterminated label value in %q", line)
			}
			s.labels[key] = val.String()
			rest = rest[j+1:]
		}
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return s, fmt.Errorf("metrics: no value in %q", line)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, fmt.Errorf("metrics: value in %q: %w", line, err)
	}
	s.value = v
	return s, nil
}

// sum adds the values of the samples named name whose labels include match.
func sum(samples []sample, name string, match map[string]string) float64 {
	total := 0.0
next:
	for _, s := range samples {
		if s.name != name {
			continue
		}
		for k, v := range match {
			if s.labels[k] != v {
				continue next
			}
		}
		total += s.value
	}
	return total
}

// scrape reads a plain-HTTP metrics endpoint (the daemon's).
func scrape(ctx context.Context, url string, prefixes ...string) ([]sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseMetrics(resp.Body, prefixes...)
}

// requestCounts is apiserver_request_total by "VERB group/resource[/subresource]".
type requestCounts map[string]float64

// apiserverRequests reads apiserver_request_total from the API server's /metrics.
func apiserverRequests(ctx context.Context, cs kubernetes.Interface) (requestCounts, error) {
	body, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	samples, err := parseMetrics(bytes.NewReader(body), "apiserver_request_total{")
	if err != nil {
		return nil, err
	}
	out := requestCounts{}
	for _, s := range samples {
		if s.name != "apiserver_request_total" {
			continue
		}
		out[requestKey(s.labels)] += s.value
	}
	return out, nil
}

func requestKey(l map[string]string) string {
	res := l["resource"]
	if res == "" {
		res = "(non-resource)"
	}
	if l["group"] != "" {
		res = l["group"] + "/" + res
	}
	if l["subresource"] != "" {
		res += "/" + l["subresource"]
	}
	k := l["verb"] + " " + res
	if l["dry_run"] != "" {
		k += " (dry-run)"
	}
	return k
}

// minus returns the positive differences after - before, by key.
func (after requestCounts) minus(before requestCounts) requestCounts {
	out := requestCounts{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// top returns the n largest counts, and the rest summed as "other".
func (c requestCounts) top(n int) requestCounts {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return c[keys[i]] > c[keys[j]] })
	out := requestCounts{}
	for i, k := range keys {
		if i < n {
			out[k] = c[k]
		} else {
			out["other"] += c[k]
		}
	}
	return out
}

func (c requestCounts) total() float64 { return sumValues(c) }

// sumValues is the sum of m's values.
func sumValues[M ~map[string]float64](m M) float64 {
	t := 0.0
	for _, v := range m {
		t += v
	}
	return t
}

func (c requestCounts) String() string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%.0f", k, c[k]))
	}
	return strings.Join(parts, ", ")
}

// peakRSS reads VmHWM, the peak resident set size, of a process in MiB.
func peakRSS(pid int) (float64, error) {
	kb, err := statusField(fmt.Sprintf("/proc/%d/status", pid), "VmHWM:")
	return kb / 1024, err
}

// statusField reads a field in kB of a /proc/<pid>/status file.
func statusField(path, field string) (float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			f := strings.Fields(rest)
			if len(f) < 1 {
				break
			}
			return strconv.ParseFloat(f[0], 64)
		}
	}
	return 0, fmt.Errorf("no %s in %s", field, path)
}
