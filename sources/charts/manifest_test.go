package charts

import (
	"os"
	"path"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestShippedDeploymentKeepsChartsOnAWritableVolume: the daemon of config/manager runs
// with a read-only root filesystem; the chart cache derived from its --cache-dir (as the
// daemon derives it, CacheDir) lies under a volume mounted writable, like the cache
// directory itself and TMPDIR.
func TestShippedDeploymentKeepsChartsOnAWritableVolume(t *testing.T) {
	g := NewWithT(t)
	b, err := os.ReadFile("../../config/manager/deployment.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	var dep appsv1.Deployment
	g.Expect(yaml.UnmarshalStrict(b, &dep)).To(Succeed())
	spec := dep.Spec.Template.Spec
	g.Expect(spec.Containers).NotTo(BeEmpty())
	c := spec.Containers[0]
	g.Expect(c.SecurityContext).NotTo(BeNil())
	g.Expect(c.SecurityContext.ReadOnlyRootFilesystem).To(HaveValue(BeTrue()), "the test is about a read-only root")

	cacheDir := flagValue(c.Args, "--cache-dir")
	g.Expect(cacheDir).NotTo(BeEmpty(), "the Deployment sets --cache-dir")
	tmp := ""
	for _, e := range c.Env {
		if e.Name == "TMPDIR" {
			tmp = e.Value
		}
	}
	for what, dir := range map[string]string{"--cache-dir": cacheDir, "the chart cache": CacheDir(cacheDir), "TMPDIR": tmp} {
		g.Expect(writableMount(spec, c, dir)).NotTo(BeEmpty(), "%s (%s) is on a writable volume", what, dir)
	}
}

// flagValue is the value of a flag in args, as --flag=value or --flag value.
func flagValue(args []string, flag string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// writableMount is the volume of the pod mounted writable in c whose mount path holds dir,
// "" when none does.
func writableMount(spec corev1.PodSpec, c corev1.Container, dir string) string {
	if !path.IsAbs(dir) {
		return ""
	}
	dir = path.Clean(dir)
	for _, m := range c.VolumeMounts {
		mp := path.Clean(m.MountPath)
		if m.ReadOnly || (dir != mp && !strings.HasPrefix(dir, mp+"/")) {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && (v.EmptyDir != nil || v.PersistentVolumeClaim != nil || v.Ephemeral != nil) {
				return v.Name
			}
		}
	}
	return ""
}
