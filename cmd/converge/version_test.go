package main

import (
	"runtime"
	"runtime/debug"
	"testing"

	. "github.com/onsi/gomega"
)

// stamp sets what -ldflags -X would for the rest of the test.
func stamp(t *testing.T, v, c, d, img string) {
	t.Helper()
	old := []string{version, commit, date, installImage}
	version, commit, date, installImage = v, c, d, img
	t.Cleanup(func() { version, commit, date, installImage = old[0], old[1], old[2], old[3] })
}

// TestResolveBuild: stamped values win; a binary built without them shows what the Go
// toolchain recorded; one with neither says dev.
func TestResolveBuild(t *testing.T) {
	vcs := &debug.BuildInfo{
		Main: debug.Module{Path: "github.com/converge-gitops/converge", Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-01-02T03:04:05Z"},
		},
	}
	goInstall := &debug.BuildInfo{Main: debug.Module{Path: "github.com/converge-gitops/converge", Version: "v1.2.3"}}
	for _, tc := range []struct {
		name                string
		version, commit, dt string
		bi                  *debug.BuildInfo
		want                build
	}{
		{name: "stamped", version: "v1.2.3-4-gabcdef0", commit: "abcdef0", dt: "2026-02-03T04:05:06Z", bi: vcs,
			want: build{Version: "v1.2.3-4-gabcdef0", Commit: "abcdef0", Date: "2026-02-03T04:05:06Z"}},
		{name: "go build in a checkout", bi: vcs,
			want: build{Version: "dev", Commit: "0123456789abcdef0123456789abcdef01234567", Date: "2026-01-02T03:04:05Z"}},
		{name: "go install module@version", bi: goInstall,
			want: build{Version: "v1.2.3", Commit: "unknown", Date: "unknown"}},
		{name: "nothing known",
			want: build{Version: "dev", Commit: "unknown", Date: "unknown"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			tc.want.Go, tc.want.Platform = runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH
			g.Expect(resolveBuild(tc.version, tc.commit, tc.dt, tc.bi)).To(Equal(tc.want))
		})
	}
}

// TestVersionCommand: `converge version` prints the stamped version, commit and date.
func TestVersionCommand(t *testing.T) {
	g := NewWithT(t)
	stamp(t, "v0.3.0-2-g1a2b3c4-dirty", "1a2b3c4d5e6f", "2026-03-04T05:06:07Z", "")
	g.Expect(string(runCommand(t, "version"))).To(Equal("converge v0.3.0-2-g1a2b3c4-dirty\n" +
		"commit:  1a2b3c4d5e6f\nbuilt:   2026-03-04T05:06:07Z\n" +
		"go:      " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"))
}
