package convert

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const oneKustomization = `apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: %s, namespace: flux-system}
spec: {interval: 1m, sourceRef: {kind: GitRepository, name: repo}, path: ./x}
`

// TestReadDirectory: a directory walk reads YAML files only, skips hidden directories and
// symbolic links, and reports (as a warning) a file it cannot parse.
func TestReadDirectory(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	write := func(dir, name, content string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(dir, "a/one.yaml", strings.Replace(oneKustomization, "%s", "one", 1))
	write(dir, ".git/two.yaml", strings.Replace(oneKustomization, "%s", "two", 1))
	write(dir, "a/three.txt", strings.Replace(oneKustomization, "%s", "three", 1))
	write(outside, "four.yaml", strings.Replace(oneKustomization, "%s", "four", 1))
	write(dir, "chart/templates/deploy.yaml", "{{ if .Values.x }}\nkind: [\n")
	if err := os.Symlink(filepath.Join(outside, "four.yaml"), filepath.Join(dir, "a", "four.yaml")); err != nil {
		t.Fatal(err)
	}
	in := &Input{}
	if err := in.Read(dir); err != nil {
		t.Fatal(err)
	}
	if len(in.Objects) != 1 || in.Objects[0].GetName() != "one" {
		var names []string
		for _, o := range in.Objects {
			names = append(names, o.GetName())
		}
		t.Errorf("read %v, want only one", names)
	}
	if len(in.Problems) != 1 || !in.Problems[0].Warning || !strings.HasSuffix(in.Problems[0].From, "deploy.yaml") {
		t.Errorf("the template that does not parse: %+v", in.Problems)
	}
}

func TestReadBounds(t *testing.T) {
	in := &Input{Stdin: bytes.NewReader(make([]byte, MaxFileSize+1))}
	if err := in.Read("-"); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("an input over %d bytes: %v", MaxFileSize, err)
	}
	in = &Input{Stdin: strings.NewReader("kind: [\n")}
	if err := in.Read("-"); err != nil {
		t.Fatal(err)
	}
	if len(in.Problems) != 1 || in.Problems[0].Warning {
		t.Errorf("a document given that does not parse fails the conversion: %+v", in.Problems)
	}
}

// TestConvertCollision: a Kustomization and a HelmRelease of one name would both be the
// SyncTarget of that name.
func TestConvertCollision(t *testing.T) {
	res, _ := convertString(t, strings.Replace(oneKustomization, "%s", "web", 1)+`---
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: repo, namespace: flux-system}
spec: {interval: 1m, url: "https://github.com/acme/web", ref: {branch: main}}
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata: {name: charts, namespace: flux-system}
spec: {url: "https://charts.example.com", interval: 1h}
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {name: web, namespace: flux-system}
spec:
  interval: 10m
  chart: {spec: {chart: web, sourceRef: {kind: HelmRepository, name: charts}}}
`)
	found := false
	for _, p := range res.Problems {
		if p.Field == "metadata.name" && strings.Contains(p.Reason, "converts to the same SyncTarget") {
			found = true
		}
	}
	if !found {
		t.Errorf("no collision reported:\n%s", problemList(res))
	}
}
