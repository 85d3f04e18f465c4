package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// Stamped at build time by `make build` and `make image`:
//
//	-ldflags "-X main.version=$(git describe --tags --always --dirty) -X main.commit=$(git rev-parse HEAD)
//	  -X main.date=<the commit time, RFC 3339> [-X main.installImage=<name:tag@digest>]"
//
// Left empty, they are read from what the Go toolchain recorded (buildInfo).
var (
	version string
	commit  string
	date    string
	// installImage, when stamped, is the image `converge install` deploys by default,
	// typically digest-pinned: a CLI built after its image was pushed can name the digest
	// (an image's own binary cannot, it is part of what the digest hashes).
	installImage string
)

// build is what `converge version` prints about this binary.
type build struct {
	Version, Commit, Date string
	Go, Platform          string
}

// currentBuild is this binary's build: the stamped values, else the module version of
// `go install …@v1.2.3` and the VCS revision and time `go build` records, else dev.
func currentBuild() build {
	bi, _ := debug.ReadBuildInfo()
	return resolveBuild(version, commit, date, bi)
}

// resolveBuild fills what was not stamped from bi (nil when the binary has none).
func resolveBuild(version, commit, date string, bi *debug.BuildInfo) build {
	b := build{Version: version, Commit: commit, Date: date, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && b.Commit == "":
				b.Commit = s.Value
			case s.Key == "vcs.time" && b.Date == "":
				b.Date = s.Value
			}
		}
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	if b.Date == "" {
		b.Date = "unknown"
	}
	return b
}

func (b build) print(w io.Writer) error {
	_, err := fmt.Fprintf(w, "converge %s\ncommit:  %s\nbuilt:   %s\ngo:      %s %s\n", b.Version, b.Commit, b.Date, b.Go, b.Platform)
	return err
}
