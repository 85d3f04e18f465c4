package e2e

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// result is what one scenario reports for the table TestMain prints at the end.
type result struct {
	id        int
	title     string
	outcome   string // pass, FAIL, skip
	wall      time.Duration
	latencies []latency
}

type latency struct {
	name string
	d    time.Duration
}

// resultTable collects the results of scenarios running in parallel.
type resultTable struct {
	mu   sync.Mutex
	rows []result
}

var results = &resultTable{}

func (r *resultTable) add(res result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rows = append(r.rows, res)
}

func (r *resultTable) print(w io.Writer, total time.Duration) {
	r.mu.Lock()
	rows := append([]result(nil), r.rows...)
	r.mu.Unlock()
	if len(rows) == 0 {
		return
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].id < rows[j].id })
	var b strings.Builder
	b.WriteString("\ne2e results\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "#\tSCENARIO\tRESULT\tWALL\tLATENCIES")
	for _, res := range rows {
		lat := make([]string, 0, len(res.latencies))
		for _, l := range res.latencies {
			lat = append(lat, fmt.Sprintf("%s %s", l.name, l.d.Round(10*time.Millisecond)))
		}
		if len(lat) == 0 {
			lat = append(lat, "-")
		}
		_, _ = fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", res.id, res.title, res.outcome,
			res.wall.Round(100*time.Millisecond), strings.Join(lat, "; "))
	}
	_ = tw.Flush()
	fmt.Fprintf(&b, "suite wall time %s (set-up included)\n", total.Round(100*time.Millisecond))
	_, _ = io.WriteString(w, b.String())
}
