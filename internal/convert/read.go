package convert

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Bounds on what Read reads.
const (
	// MaxFileSize is the largest file (or standard input) read.
	MaxFileSize = 8 << 20
	// MaxFiles is the most files read from the directories walked.
	MaxFiles = 10000
	// MaxObjects is the most objects read in all.
	MaxObjects = 20000
)

// Input reads Flux and Argo CD objects from files, directories and standard input.
type Input struct {
	// Stdin is read for the path "-".
	Stdin io.Reader
	// Objects read so far, in the order read; objects of other kinds are dropped.
	Objects []*unstructured.Unstructured
	// Problems: files that could not be parsed, patches left out.
	Problems []Problem
	files    int
	count    int
}

// Read reads path: "-" for standard input, a YAML or JSON file of one or more documents,
// or a directory walked recursively (hidden directories and symbolic links are skipped,
// and so are the files a kustomization.yaml names as patches). An unreadable path is an
// error; a document that does not parse is a Problem (a warning in a directory walked).
func (in *Input) Read(path string) error {
	if path == "-" {
		b, err := readBounded(in.Stdin, "standard input")
		if err != nil {
			return err
		}
		in.parse("standard input", b, false)
		return nil
	}
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return in.readFile(path, false)
	}
	return in.walk(path)
}

func readBounded(r io.Reader, name string) ([]byte, error) {
	if r == nil {
		return nil, fmt.Errorf("%s: nothing to read", name)
	}
	b, err := io.ReadAll(io.LimitReader(r, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if len(b) > MaxFileSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, MaxFileSize)
	}
	return b, nil
}

func (in *Input) readFile(path string, walked bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	b, err := readBounded(f, path)
	if err != nil {
		return err
	}
	in.parse(path, b, walked)
	return nil
}

// walk reads the YAML and JSON files under dir, in lexical order.
func (in *Input) walk(dir string) error {
	var files []string
	patches := map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != dir && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() || !isManifest(p) {
			return nil
		}
		if in.files++; in.files > MaxFiles {
			return fmt.Errorf("more than %d files under %s", MaxFiles, dir)
		}
		if isKustomization(p) {
			for _, patch := range kustomizePatches(p) {
				patches[patch] = true
			}
			return nil
		}
		files = append(files, p)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(files)
	for _, f := range files {
		if patches[filepath.Clean(f)] {
			in.Problems = append(in.Problems, Problem{From: f, Reason: "a kustomize patch, left out: to convert the patched objects, run `kustomize build DIR | converge convert -` on the directory of its kustomization.yaml"})
			continue
		}
		if err := in.readFile(f, true); err != nil {
			return err
		}
	}
	return nil
}

func isManifest(p string) bool {
	switch strings.ToLower(filepath.Ext(p)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

func isKustomization(p string) bool {
	switch filepath.Base(p) {
	case "kustomization.yaml", "kustomization.yml", "Kustomization":
		return true
	}
	return false
}

// kustomizePatches lists the files a kustomization.yaml names as patches, cleaned paths.
func kustomizePatches(p string) []string {
	b, err := os.ReadFile(p)
	if err != nil || len(b) > MaxFileSize {
		return nil
	}
	var k struct {
		Patches []struct {
			Path string `json:"path"`
		} `json:"patches"`
		PatchesStrategicMerge []string `json:"patchesStrategicMerge"`
	}
	if yaml.Unmarshal(b, &k) != nil {
		return nil
	}
	var out []string
	for _, pt := range k.Patches {
		if pt.Path != "" {
			out = append(out, filepath.Join(filepath.Dir(p), pt.Path))
		}
	}
	for _, pt := range k.PatchesStrategicMerge {
		if !strings.Contains(pt, "\n") {
			out = append(out, filepath.Join(filepath.Dir(p), pt))
		}
	}
	return out
}

// parse reads the documents of b; a document that does not parse is reported, and
// makes the conversion fail unless it was found by walking a directory.
func (in *Input) parse(name string, b []byte, walked bool) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return
		}
		if err == nil {
			err = in.add(doc)
		}
		if err != nil {
			in.Problems = append(in.Problems, Problem{From: name, Field: fmt.Sprintf("document %d", i),
				Reason: "not read: " + firstLine(err.Error()), Warning: walked})
			if errors.Is(err, errTooMany) {
				return
			}
		}
	}
}

var errTooMany = fmt.Errorf("more than %d objects", MaxObjects)

// add keeps the Flux and Argo CD objects of one document (a List is opened).
func (in *Input) add(doc []byte) error {
	var m map[string]any
	if err := yaml.Unmarshal(doc, &m); err != nil {
		return err
	}
	if len(m) == 0 {
		return nil
	}
	u := &unstructured.Unstructured{Object: m}
	if items, ok := m["items"].([]any); ok && strings.HasSuffix(u.GetKind(), "List") {
		for _, it := range items {
			if im, ok := it.(map[string]any); ok {
				if err := in.keep(&unstructured.Unstructured{Object: im}); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return in.keep(u)
}

func (in *Input) keep(u *unstructured.Unstructured) error {
	if !Relevant(u) {
		return nil
	}
	if in.count++; in.count > MaxObjects {
		return errTooMany
	}
	in.Objects = append(in.Objects, u)
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
