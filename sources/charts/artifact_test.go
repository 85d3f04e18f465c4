package charts

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	. "github.com/onsi/gomega"

	"github.com/converge-gitops/converge/sources"
)

// writeTree writes files (slash path → content) under dir.
func writeTree(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// config is a small kustomization.
var config = map[string]string{
	"kustomization.yaml": "resources: [cm.yaml]\n",
	"cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {mode: blue}\n",
	"base/deploy.yaml":   "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n",
}

// artifactSource is the artifact source of path in the registry.
func artifactSource(reg *ociRegistry, path string) Source {
	return Source{Kind: KindArtifact, Repository: "oci://" + hostOf(reg.open) + "/" + path}
}

// pushDir packs dir and pushes it under tag.
func pushDir(t testing.TB, c *Client, dst Source, tag, dir string, meta ArtifactMeta) Resolved {
	t.Helper()
	a, err := PackArtifact(dir, meta)
	if err != nil {
		t.Fatal(err)
	}
	dst.Tag = tag
	r, err := c.PushArtifact(t.Context(), dst, a)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestArtifactRoundTrip: a directory packed and pushed is resolved by its tag and fetched
// whole — .git left out, a link inside packed as its file, modes normalized — read back
// from the revision, and then from the cache; the same content pushed again has the same
// digest.
func TestArtifactRoundTrip(t *testing.T) {
	g := NewWithT(t)
	reg := newOCIRegistry(t)
	dir := t.TempDir()
	writeTree(t, dir, config)
	writeTree(t, dir, map[string]string{".git/HEAD": "ref: refs/heads/main\n", "sub/.git": "gitdir: ../x\n"})
	g.Expect(os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\n"), 0o700)).To(Succeed())
	g.Expect(os.Symlink("cm.yaml", filepath.Join(dir, "alias.yaml"))).To(Succeed())
	c := newClient(t)
	src := artifactSource(reg, "config/app")
	meta := ArtifactMeta{Source: "https://github.com/org/app", Revision: "main@sha1:0123456789abcdef0123456789abcdef01234567"}
	pushed := pushDir(t, c, src, "main-3f2a", dir, meta)

	src.Tag = "main-3f2a"
	r := mustResolve(t, c, src)
	g.Expect(r).To(Equal(pushed))
	g.Expect(r.Version).To(Equal("main-3f2a"))
	parsed, err := ParseRevision(r.String())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(parsed.Version).To(Equal(r.Version))
	g.Expect(parsed.Digest).To(Equal(r.Digest))

	fetched, err := c.Fetch(t.Context(), src, parsed)
	g.Expect(err).NotTo(HaveOccurred())
	for p, content := range config {
		g.Expect(os.ReadFile(filepath.Join(fetched, p))).To(Equal([]byte(content)), p)
	}
	g.Expect(os.ReadFile(filepath.Join(fetched, "alias.yaml"))).To(Equal([]byte(config["cm.yaml"])))
	g.Expect(filepath.Join(fetched, ".git")).NotTo(BeAnExistingFile())
	g.Expect(filepath.Join(fetched, "sub", ".git")).NotTo(BeAnExistingFile())
	fi, err := os.Stat(filepath.Join(fetched, "run.sh"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Mode().IsRegular()).To(BeTrue())

	// From the cache: the registry is gone.
	reg.open.Close()
	again, err := c.Fetch(t.Context(), src, parsed)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(fetched))

	// The same content, elsewhere, packs to the same digest; other content does not; a
	// creation time is written only when given.
	other := t.TempDir()
	writeTree(t, other, config)
	writeTree(t, other, map[string]string{".git/config": "[core]\n", "sub/.git": "gitdir: ../y\n"})
	g.Expect(os.WriteFile(filepath.Join(other, "run.sh"), []byte("#!/bin/sh\n"), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(other, "alias.yaml"), []byte(config["cm.yaml"]), 0o600)).To(Succeed())
	g.Expect(os.Chtimes(filepath.Join(other, "cm.yaml"), time.Unix(1e9, 0), time.Unix(1e9, 0))).To(Succeed())
	same, err := PackArtifact(other, meta)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(same.Digest).To(Equal(pushed.Digest))
	writeTree(t, other, map[string]string{"cm.yaml": "changed\n"})
	changed, err := PackArtifact(other, meta)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed.Digest).NotTo(Equal(pushed.Digest))
	g.Expect(string(changed.Manifest)).NotTo(ContainSubstring(AnnotationCreated))
	dated, err := PackArtifact(other, ArtifactMeta{Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(dated.Manifest)).To(ContainSubstring(`"` + AnnotationCreated + `":"2026-01-02T03:04:05Z"`))
}

// TestArtifactPushedTwiceHasOneDigest: pushing the same directory twice, under two tags,
// names one manifest, which ListArtifacts shows with its annotations; TagArtifact tags it
// again.
func TestArtifactPushedTwiceHasOneDigest(t *testing.T) {
	g := NewWithT(t)
	reg := newOCIRegistry(t)
	dir := t.TempDir()
	writeTree(t, dir, config)
	c := newClient(t)
	src := artifactSource(reg, "config/app")
	meta := ArtifactMeta{Source: "https://github.com/org/app", Revision: "main@sha1:abc"}
	first := pushDir(t, c, src, "v1.0.0", dir, meta)
	second := pushDir(t, c, src, "latest", dir, meta)
	g.Expect(second.Digest).To(Equal(first.Digest))

	src.Tag = "v1.0.0"
	tagged, err := c.TagArtifact(t.Context(), src, "stable")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(tagged.Digest).To(Equal(first.Digest))
	src.Tag = ""
	list, err := c.ListArtifacts(t.Context(), src)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list).To(HaveLen(3))
	for i, tag := range []string{"latest", "stable", "v1.0.0"} {
		g.Expect(list[i]).To(Equal(ArtifactTag{Tag: tag, Digest: first.Digest, MediaType: string(types.OCIManifestSchema1),
			Source: "https://github.com/org/app", Revision: "main@sha1:abc"}))
	}
	_, err = c.TagArtifact(t.Context(), src, "not a tag")
	g.Expect(err).To(MatchError(sources.ErrInvalidSource))
}

// TestArtifactTagsRangesAndDigest: an exact tag (semver or not), a semver range over the
// tags ("v" prefixes read; the newest match), a digest pin, and "latest" by default.
func TestArtifactTagsRangesAndDigest(t *testing.T) {
	g := NewWithT(t)
	reg := newOCIRegistry(t)
	c := newClient(t)
	src := artifactSource(reg, "config/app")
	digests := map[string]string{}
	for i, tag := range []string{"v1.0.0", "v1.2.0", "1.3.0-rc.1", "v2.0.0", "latest", "main-3f2a"} {
		dir := t.TempDir()
		writeTree(t, dir, map[string]string{"cm.yaml": strings.Repeat("x", i+1)})
		digests[tag] = pushDir(t, c, src, tag, dir, ArtifactMeta{}).Digest
	}
	for _, tc := range []struct {
		src     Source
		version string
	}{
		{Source{Tag: "main-3f2a"}, "main-3f2a"},
		{Source{Tag: "v1.0.0"}, "v1.0.0"},
		{Source{Version: "~1"}, "v1.2.0"},
		{Source{Version: ">=1.0.0"}, "v2.0.0"},
		{Source{Version: ">=1.3.0-0 <2"}, "1.3.0-rc.1"},
		{Source{}, "latest"},
	} {
		s := src
		s.Tag, s.Version = tc.src.Tag, tc.src.Version
		r, err := c.Resolve(t.Context(), s)
		g.Expect(err).NotTo(HaveOccurred(), tc.version)
		g.Expect(r.Version).To(Equal(tc.version))
		g.Expect(r.Digest).To(Equal(digests[tc.version]), tc.version)
	}
	pinned := src
	pinned.Digest = digests["v1.2.0"]
	r, err := c.Resolve(t.Context(), pinned)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Version).To(Equal("digest"))
	g.Expect(r.Digest).To(Equal(digests["v1.2.0"]))
	back, err := ParseRevision(r.String())
	g.Expect(err).NotTo(HaveOccurred())
	dir, err := c.Fetch(t.Context(), pinned, back)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.ReadFile(filepath.Join(dir, "cm.yaml"))).To(Equal([]byte("xx")))

	ranged := src
	ranged.Version = "^1"
	g.Expect(c.Versions(t.Context(), ranged)).To(Equal([]string{"v1.2.0", "v1.0.0"}))
	ranged.Version = ">=3"
	_, err = c.Resolve(t.Context(), ranged)
	g.Expect(err).To(MatchError(sources.ErrRefNotFound))
	ranged.Version, ranged.Tag = "", "absent"
	_, err = c.Resolve(t.Context(), ranged)
	g.Expect(err).To(MatchError(sources.ErrRefNotFound))
}

// tarGz is a gzipped tar of files (path → content), as other tools write it.
func tarGz(t testing.TB, files map[string]string) []byte {
	t.Helper()
	var entries []tarEntry
	for _, p := range []string{"kustomization.yaml", "cm.yaml", "base/deploy.yaml"} {
		if content, ok := files[p]; ok {
			entries = append(entries, file(p, content))
		}
	}
	return tgz(t, entries...)
}

// TestFluxAndOrasArtifacts: artifacts as `flux push artifact` and `oras push` write them
// are fetched; a layer media type chooses among several layers.
func TestFluxAndOrasArtifacts(t *testing.T) {
	g := NewWithT(t)
	reg := newOCIRegistry(t)
	content := tarGz(t, config)
	title := map[string]string{"org.opencontainers.image.title": "config.tar.gz"}
	flux := putImage(t, reg.repo(t, "flux/app"), "latest", blob{[]byte("{}"), FluxConfigMediaType, nil},
		[]blob{{content, FluxLayerMediaType, nil}}, map[string]string{AnnotationSource: "https://github.com/org/app", AnnotationRevision: "main@sha1:abc"})
	oras := putImage(t, reg.repo(t, "oras/app"), "latest", blob{[]byte("{}"), OCIEmptyConfigMediaType, nil},
		[]blob{{content, OCILayerMediaType, title}}, nil)
	orasOld := putImage(t, reg.repo(t, "oras/old"), "latest", blob{[]byte("{}"), OrasConfigMediaType, nil},
		[]blob{{content, OCILayerMediaType, title}}, nil)
	two := putImage(t, reg.repo(t, "two/app"), "latest", blob{[]byte("{}"), ArtifactConfigMediaType, nil},
		[]blob{{tarGz(t, map[string]string{"cm.yaml": "one"}), ArtifactLayerMediaType, nil}, {content, "application/vnd.example.config.tar+gzip", nil}}, nil)
	c := newClient(t)
	for path, digest := range map[string]string{"flux/app": flux, "oras/app": oras, "oras/old": orasOld} {
		src := artifactSource(reg, path)
		r := mustResolve(t, c, src)
		g.Expect(r.Digest).To(Equal(digest), path)
		dir, err := c.Fetch(t.Context(), src, r)
		g.Expect(err).NotTo(HaveOccurred(), path)
		g.Expect(os.ReadFile(filepath.Join(dir, "base/deploy.yaml"))).To(Equal([]byte(config["base/deploy.yaml"])), path)
	}

	src := artifactSource(reg, "two/app")
	r := mustResolve(t, c, src)
	g.Expect(r.Digest).To(Equal(two))
	dir, err := c.Fetch(t.Context(), src, r)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.ReadFile(filepath.Join(dir, "cm.yaml"))).To(Equal([]byte("one")))
	src.LayerMediaType = "application/vnd.example.config.tar+gzip"
	dir, err = c.Fetch(t.Context(), src, r)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.ReadFile(filepath.Join(dir, "cm.yaml"))).To(Equal([]byte(config["cm.yaml"])), "another layer, another cache entry")
}

// hostileArtifact is an artifact pushed to be refused.
type hostileArtifact struct {
	name    string
	push    func(t *testing.T, reg *ociRegistry, path string)
	kind    error
	message string
}

// pushLayer pushes an artifact of converge's media types whose layer is layer.
func pushLayer(layer []byte) func(t *testing.T, reg *ociRegistry, path string) {
	return func(t *testing.T, reg *ociRegistry, path string) {
		putImage(t, reg.repo(t, path), "latest", blob{[]byte("{}"), ArtifactConfigMediaType, nil}, []blob{{layer, ArtifactLayerMediaType, nil}}, nil)
	}
}

// pushImage pushes an image of config and layer media types.
func pushImage(config types.MediaType, layers ...types.MediaType) func(t *testing.T, reg *ociRegistry, path string) {
	return func(t *testing.T, reg *ociRegistry, path string) {
		var ls []blob
		for _, mt := range layers {
			ls = append(ls, blob{tarGz(t, config2), mt, nil})
		}
		putImage(t, reg.repo(t, path), "latest", blob{[]byte("{}"), config, nil}, ls, nil)
	}
}

var config2 = map[string]string{"cm.yaml": "x"}

func hostileArtifacts(t *testing.T) []hostileArtifact {
	link := func(name, target string, typ byte) tarEntry {
		return tarEntry{hdr: tar.Header{Name: name, Linkname: target, Typeflag: typ, Mode: 0o777}}
	}
	cm := file("cm.yaml", "x")
	return []hostileArtifact{
		{"gzip bomb", pushLayer(bomb(t, "big.yaml")), sources.ErrLimitExceeded, "larger than the cap"},
		{"symlink", pushLayer(tgz(t, cm, link("base", "/etc", tar.TypeSymlink))), ErrBadArchive, "base is a link"},
		{"hard link", pushLayer(tgz(t, cm, link("passwd", "/etc/passwd", tar.TypeLink))), ErrBadArchive, "passwd is a link"},
		{"dot-dot", pushLayer(tgz(t, cm, file("../../etc/cron.d/x", "x"))), ErrBadArchive, "leaves the archive's directory"},
		{"absolute", pushLayer(tgz(t, cm, file("/etc/passwd", "x"))), ErrBadArchive, "absolute"},
		{"device", pushLayer(tgz(t, cm, tarEntry{hdr: tar.Header{Name: "null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}})), ErrBadArchive, "not a regular file"},
		{"not gzip", pushLayer([]byte(strings.Repeat("plain ", 100))), ErrBadArchive, "not a gzip archive"},
		{"huge manifest", func(t *testing.T, reg *ociRegistry, path string) {
			putImage(t, reg.repo(t, path), "latest", blob{[]byte("{}"), ArtifactConfigMediaType, nil},
				[]blob{{tarGz(t, config2), ArtifactLayerMediaType, nil}}, map[string]string{"padding": strings.Repeat("x", manifestBytes)})
		}, sources.ErrLimitExceeded, "is larger than the cap of 4194304 bytes"},
		{"image config", pushImage(types.OCIConfigJSON, types.OCILayer), sources.ErrInvalidSource,
			`its config is of media type "application/vnd.oci.image.config.v1+json"; accepted: ` + ArtifactConfigMediaType},
		{"helm chart", pushImage(ConfigMediaType, ChartLayerMediaType), sources.ErrInvalidSource, "is a Helm chart"},
		{"no layer", pushImage(FluxConfigMediaType, "application/vnd.example.other"), sources.ErrInvalidSource,
			"has no layer of " + ArtifactLayerMediaType + ", " + FluxLayerMediaType + ", " + OCILayerMediaType + " (its layers: application/vnd.example.other)"},
		{"several layers", pushImage(ArtifactConfigMediaType, ArtifactLayerMediaType, FluxLayerMediaType), sources.ErrInvalidSource,
			"has 2 layers that could hold its tree"},
		{"image index", func(t *testing.T, reg *ociRegistry, path string) {
			repo := reg.repo(t, path)
			m := putImage(t, repo, "", blob{[]byte("{}"), ArtifactConfigMediaType, nil}, []blob{{tarGz(t, config2), ArtifactLayerMediaType, nil}}, nil)
			h, _ := v1.NewHash(m)
			idx, _ := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex,
				Manifests: []v1.Descriptor{{MediaType: types.OCIManifestSchema1, Digest: h, Size: 100}}})
			putRaw(t, repo, "latest", idx, types.OCIImageIndex)
		}, sources.ErrInvalidSource, "is an image index (application/vnd.oci.image.index.v1+json)"},
	}
}

// TestHostileArtifacts: each artifact is refused with an error that says why, and nothing
// is left in the cache.
func TestHostileArtifacts(t *testing.T) {
	reg := newOCIRegistry(t)
	for _, tc := range hostileArtifacts(t) {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			path := "hostile/" + strings.ReplaceAll(tc.name, " ", "-")
			tc.push(t, reg, path)
			c := newClient(t)
			src := artifactSource(reg, path)
			r, err := c.Resolve(t.Context(), src)
			if err == nil {
				_, err = c.Fetch(t.Context(), src, r)
			}
			g.Expect(err).To(MatchError(tc.kind))
			g.Expect(err).To(MatchError(ContainSubstring(tc.message)))
			g.Expect(cacheEntries(t, c.CacheDir)).To(BeEmpty())
		})
	}
}

// TestArtifactLayerDigestMismatch: a layer that is not what the manifest's digest names
// is refused, and nothing is left in the cache.
func TestArtifactLayerDigestMismatch(t *testing.T) {
	g := NewWithT(t)
	reg := newOCIRegistry(t)
	layer := tarGz(t, config)
	putImage(t, reg.repo(t, "config/app"), "latest", blob{[]byte("{}"), ArtifactConfigMediaType, nil}, []blob{{layer, ArtifactLayerMediaType, nil}}, nil)
	tampered := tarGz(t, map[string]string{"cm.yaml": strings.Repeat("y", len(config["cm.yaml"]))})
	inner := reg.open.Config.Handler
	reg.open.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/blobs/sha256:"+sha(layer)) && r.Method == http.MethodGet {
			_, _ = w.Write(tampered[:min(len(tampered), len(layer))])
			_, _ = w.Write(make([]byte, max(0, len(layer)-len(tampered))))
			return
		}
		inner.ServeHTTP(w, r)
	})
	c := newClient(t)
	src := artifactSource(reg, "config/app")
	_, err := c.Fetch(t.Context(), src, mustResolve(t, c, src))
	g.Expect(err).To(HaveOccurred())
	g.Expect(err).To(MatchError(ContainSubstring(`error verifying sha256 checksum`)))
	g.Expect(err).To(MatchError(ContainSubstring(`want "sha256:` + sha(layer) + `"`)))
	g.Expect(cacheEntries(t, c.CacheDir)).To(BeEmpty())
}

// TestArtifactCredentials: credentials authenticate to the registry — basic, or the
// .dockerconfigjson entry of its host — and never reach another host: a blob redirected
// elsewhere is fetched without them; wrong ones are an error that does not quote them.
func TestArtifactCredentials(t *testing.T) {
	g := NewWithT(t)
	reg := newOCIRegistry(t)
	layer := tarGz(t, config)
	putImage(t, reg.repo(t, "config/app"), "latest", blob{[]byte("{}"), ArtifactConfigMediaType, nil}, []blob{{layer, ArtifactLayerMediaType, nil}}, nil)
	elsewhere := newRecordingServer(t, layer)
	inner := reg.authed.Config.Handler
	reg.authed.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/blobs/sha256:"+sha(layer)) {
			http.Redirect(w, r, elsewhere.URL+"/blob", http.StatusTemporaryRedirect)
			return
		}
		inner.ServeHTTP(w, r)
	})
	dockerConfig, _ := json.Marshal(map[string]any{"auths": map[string]any{hostOf(reg.authed): map[string]string{
		"auth": base64.StdEncoding.EncodeToString([]byte(regUser + ":" + regPass))}}})
	src := Source{Kind: KindArtifact, Repository: "oci://" + hostOf(reg.authed) + "/config/app"}
	for name, creds := range map[string]Credentials{
		"basic":            {Username: regUser, Password: regPass},
		"dockerconfigjson": {DockerConfigJSON: dockerConfig},
	} {
		src.Credentials = creds
		c := newClient(t)
		dir, err := c.Fetch(t.Context(), src, mustResolve(t, c, src))
		g.Expect(err).NotTo(HaveOccurred(), name)
		g.Expect(filepath.Join(dir, "cm.yaml")).To(BeARegularFile(), name)
	}
	g.Expect(elsewhere.auth).To(ConsistOf("", ""), "no credentials to another host")

	src.Credentials = Credentials{Username: regUser, Password: "wr0ng-pass"}
	_, err := newClient(t).Resolve(t.Context(), src)
	g.Expect(err).To(MatchError(sources.ErrAuthFailed))
	g.Expect(err.Error()).NotTo(ContainSubstring("wr0ng-pass"))
}

// TestArtifactSourceChecks: what cannot work as written is refused before any request.
func TestArtifactSourceChecks(t *testing.T) {
	g := NewWithT(t)
	c := newClient(t)
	for message, src := range map[string]Source{
		"in an oci:// repository":             {Kind: KindArtifact, Repository: "https://registry.example/app"},
		"names no repository of the registry": {Kind: KindArtifact, Repository: "oci://registry.example"},
		"has no chart name":                   {Kind: KindArtifact, Repository: "oci://registry.example/app", Name: "app"},
		"one of a tag, a version range":       {Kind: KindArtifact, Repository: "oci://registry.example/app", Tag: "latest", Version: "1.x"},
		"is not an OCI tag":                   {Kind: KindArtifact, Repository: "oci://registry.example/app", Tag: "a/b"},
		"trust it with cosign keys":           {Kind: KindArtifact, Repository: "oci://registry.example/app", Keyring: []byte("x")},
		"is for an artifact, not a chart":     {Repository: "oci://registry.example/charts", Name: "app", Tag: "latest"},
		"from an oci:// repository only":      {Repository: "https://charts.example", Name: "app", CosignKeys: []byte("x")},
		"unknown source kind":                 {Kind: "Other", Repository: "oci://registry.example/app"},
	} {
		_, err := c.Resolve(t.Context(), src)
		g.Expect(err).To(MatchError(sources.ErrInvalidSource), message)
		g.Expect(err).To(MatchError(ContainSubstring(message)))
	}
	a := Source{Kind: KindArtifact, Repository: "oci://registry.example/app"}
	b := a
	b.Tag = "latest"
	c2 := a
	c2.LayerMediaType = FluxLayerMediaType
	g.Expect(a.Key()).NotTo(Equal(b.Key()))
	g.Expect(a.Key()).NotTo(Equal(c2.Key()))
	g.Expect(a.Key()).NotTo(Equal(Source{Repository: a.Repository}.Key()))
	g.Expect(c.entryDir(a, a0Digest())).NotTo(Equal(c.entryDir(Source{Repository: a.Repository, Name: "x"}, a0Digest())),
		"charts and artifacts apart in the cache")
	g.Expect(c.entryDir(a, a0Digest())).NotTo(Equal(c.entryDir(c2, a0Digest())), "one tree per layer media type")

	for ref, want := range map[string]Source{
		"oci://localhost:5000/org/app:v1":     {Kind: KindArtifact, Repository: "oci://localhost:5000/org/app", Tag: "v1"},
		"oci://ghcr.io/org/app":               {Kind: KindArtifact, Repository: "oci://ghcr.io/org/app"},
		"oci://ghcr.io/org/app@" + a0Digest(): {Kind: KindArtifact, Repository: "oci://ghcr.io/org/app", Digest: a0Digest()},
	} {
		got, err := ParseArtifactReference(ref)
		g.Expect(err).NotTo(HaveOccurred(), ref)
		g.Expect(got).To(Equal(want), ref)
	}
	for _, ref := range []string{"ghcr.io/org/app", "oci://ghcr.io", "oci://ghcr.io/app@sha256:short", "oci://ghcr.io/app:bad/tag"} {
		_, err := ParseArtifactReference(ref)
		g.Expect(err).To(MatchError(sources.ErrInvalidSource), ref)
	}
}

func a0Digest() string { return "sha256:" + strings.Repeat("a0", 32) }

// TestPackRefusals: links that leave the directory and trees over the caps are refused.
func TestPackRefusals(t *testing.T) {
	g := NewWithT(t)
	outside := t.TempDir()
	writeTree(t, outside, map[string]string{"secret": "s"})
	dir := t.TempDir()
	writeTree(t, dir, config)
	g.Expect(os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "leak.yaml"))).To(Succeed())
	_, err := PackArtifact(dir, ArtifactMeta{})
	g.Expect(err).To(MatchError(ContainSubstring("leak.yaml is a link that leaves the directory")))

	dir = t.TempDir()
	g.Expect(os.Symlink(".", filepath.Join(dir, "loop"))).To(Succeed())
	_, err = PackArtifact(dir, ArtifactMeta{})
	g.Expect(err).To(MatchError(ContainSubstring("loop is a link to a directory")))

	dir = t.TempDir()
	big, err := os.Create(filepath.Join(dir, "big.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(big.Truncate(DefaultFileBytes + 1)).To(Succeed())
	g.Expect(big.Close()).To(Succeed())
	_, err = PackArtifact(dir, ArtifactMeta{})
	g.Expect(err).To(MatchError(sources.ErrLimitExceeded))
	g.Expect(err).To(MatchError(ContainSubstring("big.yaml is 16777217 bytes")))

	_, err = PackArtifact(filepath.Join(dir, "big.yaml"), ArtifactMeta{})
	g.Expect(err).To(MatchError(ContainSubstring("not a directory")))
}

// read the layer of a packed artifact: sorted entries, zero times and owners, normalized
// modes.
func TestPackIsNormalized(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	writeTree(t, dir, config)
	g.Expect(os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\n"), 0o700)).To(Succeed())
	a, err := PackArtifact(dir, ArtifactMeta{})
	g.Expect(err).NotTo(HaveOccurred())
	gz, err := gzip.NewReader(bytes.NewReader(a.Layer))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(gz.Name).To(BeEmpty())
	g.Expect(gz.ModTime.IsZero()).To(BeTrue())
	tr := tar.NewReader(gz)
	var names []string
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		g.Expect(err).NotTo(HaveOccurred())
		names = append(names, hdr.Name)
		g.Expect(hdr.ModTime.Unix()).To(BeZero(), hdr.Name)
		g.Expect([]any{hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname}).To(Equal([]any{0, 0, "", ""}), hdr.Name)
		want := int64(0o644)
		if hdr.Typeflag == tar.TypeDir || hdr.Name == "run.sh" {
			want = 0o755
		}
		g.Expect(hdr.Mode).To(Equal(want), hdr.Name)
	}
	g.Expect(names).To(Equal([]string{"base/", "base/deploy.yaml", "cm.yaml", "kustomization.yaml", "run.sh"}))
	g.Expect(a.Files).To(Equal(5))
	var m v1.Manifest
	g.Expect(json.Unmarshal(a.Manifest, &m)).To(Succeed())
	g.Expect(m.Config.MediaType).To(Equal(types.MediaType(ArtifactConfigMediaType)))
	g.Expect(m.Layers).To(HaveLen(1))
	g.Expect(m.Layers[0].MediaType).To(Equal(types.MediaType(ArtifactLayerMediaType)))
	g.Expect(m.Annotations).To(BeEmpty())
}
