package config_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	// The daemon's packages, for the metrics they register with controller-runtime's
	// registry, the one `converge serve` exports.
	_ "github.com/converge-gitops/converge/notify"
	_ "github.com/converge-gitops/converge/sources"
	_ "github.com/converge-gitops/converge/sync/reconciler"
)

// TestMonitoringNamesExportedMetrics: every PromQL expression of the Grafana dashboard and
// of the alerting rules names only metrics the daemon's registry holds.
func TestMonitoringNamesExportedMetrics(t *testing.T) {
	exprs := map[string]string{}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	raw, err := os.ReadFile("monitoring/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs["dashboard panel "+p.Title+": "+tg.Expr] = tg.Expr
		}
	}
	var rule struct {
		Kind string
		Spec struct {
			Groups []struct {
				Rules []struct{ Alert, Expr string }
			}
		}
	}
	raw, err = os.ReadFile("monitoring/prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &rule); err != nil {
		t.Fatalf("prometheusrule.yaml: %v", err)
	}
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			exprs["alert "+r.Alert] = r.Expr
		}
	}
	if len(dash.Panels) < 6 || len(exprs) < 12 || rule.Kind != "PrometheusRule" {
		t.Fatalf("read %d panels and %d expressions from a %q: the files are not what this test expects", len(dash.Panels), len(exprs), rule.Kind)
	}
	for where, expr := range exprs {
		names := metricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: no metric found in %q", where, expr)
		}
		for _, name := range names {
			if !registered(name) {
				t.Errorf("%s: %s is not a metric converge exports", where, name)
			}
		}
	}
}

// registered asks the real registry whether it holds a metric of that name (or the
// histogram a _bucket, _sum or _count series belongs to): registering a collector of
// the same name fails when it does.
func registered(name string) bool {
	candidates := []string{name}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			candidates = append(candidates, base)
		}
	}
	for _, n := range candidates {
		probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: n, Help: "probe of the monitoring test"})
		if err := metrics.Registry.Register(probe); err != nil {
			return true
		}
		metrics.Registry.Unregister(probe)
	}
	return false
}

// promqlToken reads PromQL: strings, label matchers, ranges, identifiers, the rest.
var promqlToken = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|\{[^}]*\}|\[[^\]]*\]|[A-Za-z_:][A-Za-z0-9_:]*|\S`)

var identifier = regexp.MustCompile(`^[A-Za-z_:][A-Za-z0-9_:]*$`)

// notMetrics are PromQL's keywords and aggregation modifiers.
var notMetrics = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "bool",
	"and", "or", "unless", "offset", "inf", "nan"}

// metricNames returns the metric names of a PromQL expression: the identifiers that are
// not a function or aggregation (followed by "(", "by" or "without"), not a keyword, and not a label in a
// by/without/on/ignoring list.
func metricNames(expr string) []string {
	toks := promqlToken.FindAllString(expr, -1)
	var names []string
	inLabels := false
	for i, tok := range toks {
		switch {
		case tok == ")":
			inLabels = false
		case tok == "(" && i > 0 && slices.Contains([]string{"by", "without", "on", "ignoring", "group_left", "group_right"}, toks[i-1]):
			inLabels = true
		}
		if inLabels || !identifier.MatchString(tok) ||
			slices.Contains(notMetrics, strings.ToLower(tok)) || (i+1 < len(toks) && slices.Contains([]string{"(", "by", "without"}, toks[i+1])) {
			continue
		}
		names = append(names, tok)
	}
	return names
}

func TestMetricNames(t *testing.T) {
	got := metricNames(`sum by (le, phase) (rate(a_seconds_bucket{phase="x(y)"}[5m])) > 0 and on (name) b == bool 1`)
	if !slices.Equal(got, []string{"a_seconds_bucket", "b"}) {
		t.Fatalf("metricNames = %v", got)
	}
}
