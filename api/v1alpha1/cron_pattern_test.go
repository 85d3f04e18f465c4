package v1alpha1_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	_ "time/tzdata" // zone names in schedules resolve the same on every machine

	. "github.com/onsi/gomega"
	"github.com/robfig/cron/v3"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/converge-gitops/converge/internal/localcluster/clustertest"
)

// schedulePattern reads the pattern the API server enforces on spec.source.schedule from
// the generated CRD, so the test checks what is really installed.
func schedulePattern(t *testing.T) *regexp.Regexp {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(clustertest.CRDDir(), "converge.dev_synctargets.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	p := matchesRule(t, spec.Properties["source"].Properties["schedule"])
	w := matchesRule(t, spec.Properties["syncWindows"].Items.Schema.Properties["schedule"])
	if p != w {
		t.Fatalf("source and sync window schedules must share one pattern")
	}
	return regexp.MustCompile(p)
}

// matchesRule returns the regular expression of the CEL rule self.matches(r'...').
func matchesRule(t *testing.T, s apiextensionsv1.JSONSchemaProps) string {
	t.Helper()
	for _, v := range s.XValidations {
		if p, ok := strings.CutPrefix(v.Rule, "self.matches(r'"); ok {
			if p, ok := strings.CutSuffix(p, "')"); ok {
				return p
			}
		}
	}
	t.Fatalf("no self.matches rule in %+v", s.XValidations)
	return ""
}

// TestSchedulePatternAgreesWithCron checks that the API server's pattern accepts what the
// daemon's cron parser accepts and refuses what it refuses, except for the one thing a
// pattern cannot see: a range whose start is past its end.
func TestSchedulePatternAgreesWithCron(t *testing.T) {
	re := schedulePattern(t)
	parser := cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	for _, s := range []string{
		"* * * * *", "*/5 * * * *", "0 22 * * *", "0,15,30,45 9-17 * * MON-FRI", "5 4 1 JAN,jul *",
		"0 0 ? * SUN", "59 23 31 12 6", "0 0 1-15/2 * *", "@hourly", "@daily", "@every 90s", "@every 1h30m",
		"CRON_TZ=Europe/Berlin 0 6 * * *", "TZ=America/Argentina/Buenos_Aires 0 6 * * *",
		"every five minutes", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * 32 * *", "* * * 13 *",
		"* * * * 7", "* * * * * *", "* * * *", "*/0 * * * *", "@weekdays", "@every", "@every soon",
		"0 0 * * FOO", "-1 * * * *", "1- * * * *", "", "0 * * * * ; rm -rf /",
	} {
		_, parseErr := parser.Parse(s)
		if got, want := re.MatchString(s), parseErr == nil; got != want {
			t.Errorf("schedule %q: pattern accepts=%v, cron parser accepts=%v (%v)", s, got, want, parseErr)
		}
	}
	// The one known gap: syntactically fine, refused by the daemon when it parses it.
	g := NewWithT(t)
	g.Expect(re.MatchString("30-10 * * * *")).To(BeTrue())
	_, err := parser.Parse("30-10 * * * *")
	g.Expect(err).To(HaveOccurred())
}
