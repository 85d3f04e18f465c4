package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	gitconfig "github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/google/go-containerregistry/pkg/registry"
	. "github.com/onsi/gomega"

	"github.com/converge-gitops/converge/sources/charts"
)

const artifactUser, artifactPassword = "pusher", "s3cret-registry-pass"

// artifactRegistry is an in-process OCI registry on loopback behind basic auth; it
// returns its host.
func artifactRegistry(t *testing.T) string {
	t.Helper()
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != artifactUser || p != artifactPassword {
			w.Header().Set("WWW-Authenticate", `Basic realm="registry"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// artifactCLI runs converge with stdin, in an environment with no docker credentials but
// those of dockerConfig (a config.json; none when empty).
func artifactCLI(t *testing.T, stdin, dockerConfig string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	home := t.TempDir()
	for _, v := range []string{"HOME", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR", "REGISTRY_AUTH_FILE", "DOCKER_CONFIG"} {
		t.Setenv(v, home)
	}
	if dockerConfig != "" {
		if err := os.WriteFile(filepath.Join(home, "config.json"), []byte(dockerConfig), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetArgs(args)
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&out)
	root.SetErr(&errOut)
	if err := root.ExecuteContext(context.Background()); err != nil {
		if msg := err.Error(); msg != "" {
			errOut.WriteString("converge: " + msg + "\n")
		}
		return out.String(), errOut.String(), exitCode(err)
	}
	return out.String(), errOut.String(), 0
}

// gitWorkTree makes dir a Git work tree on branch main, origin url, with one commit of
// its files, and returns the commit.
func gitWorkTree(t *testing.T, dir, url string) string {
	t.Helper()
	repo, err := git.PlainInitWithOptions(dir, &git.PlainInitOptions{InitOptions: git.InitOptions{DefaultBranch: plumbing.NewBranchReferenceName("main")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.CreateRemote(&gitconfig.RemoteConfig{Name: "origin", URLs: []string{url}}); err != nil {
		t.Fatal(err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	if err := wt.AddGlob("."); err != nil {
		t.Fatal(err)
	}
	sig := &object.Signature{Name: "t", Email: "t@example.com", When: time.Unix(1e9, 0)}
	h, err := wt.Commit("config", &git.CommitOptions{Author: sig, Committer: sig})
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

// TestArtifactPushTagList: a directory pushed is listed with its source and revision (by
// default its Git work tree's, credentials removed), pushed again to the same digest,
// tagged again; the password never shows.
func TestArtifactPushTagList(t *testing.T) {
	g := NewWithT(t)
	host := artifactRegistry(t)
	dir := t.TempDir()
	diffWriteFiles(t, dir, map[string]string{"deploy/kustomization.yaml": "resources: [cm.yaml]\n",
		"deploy/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n"})
	commit := gitWorkTree(t, dir, "https://x-access-token:gh0-token-value@github.com/org/app.git")
	creds := []string{"--creds", artifactUser + ":" + artifactPassword}
	ref := "oci://" + host + "/org/app-config"

	out, errOut, code := artifactCLI(t, "", "", append([]string{"push", "artifact", ref + ":v1.0.0", "--path", filepath.Join(dir, "deploy")}, creds...)...)
	g.Expect(code).To(Equal(0), errOut)
	digest := strings.TrimSpace(out)
	g.Expect(digest).To(MatchRegexp(`^sha256:[0-9a-f]{64}$`))
	g.Expect(errOut).To(ContainSubstring("pushed " + ref + ":v1.0.0 (2 files,"))

	out, errOut, code = artifactCLI(t, "", "", append([]string{"push", "artifact", ref + ":latest", "--path", filepath.Join(dir, "deploy"), "-o", "json"}, creds...)...)
	g.Expect(code).To(Equal(0), errOut)
	var pushed map[string]string
	g.Expect(json.Unmarshal([]byte(out), &pushed)).To(Succeed())
	g.Expect(pushed).To(Equal(map[string]string{"repository": ref, "tag": "latest", "digest": digest,
		"source": "https://github.com/org/app.git", "revision": "main@sha1:" + commit}))

	out, errOut, code = artifactCLI(t, "", "", append([]string{"tag", "artifact", ref + ":v1.0.0", "--tag", "production"}, creds...)...)
	g.Expect(code).To(Equal(0), errOut)
	g.Expect(strings.TrimSpace(out)).To(Equal(digest))

	out, errOut, code = artifactCLI(t, "", "", append([]string{"push", "artifact", ref + ":other", "--path", dir,
		"--source", "https://example.com/src", "--revision", "v2", "--annotation", "team=shop"}, creds...)...)
	g.Expect(code).To(Equal(0), errOut)
	other := strings.TrimSpace(out)
	g.Expect(other).NotTo(Equal(digest))

	out, errOut, code = artifactCLI(t, "", "", append([]string{"list", "artifacts", ref}, creds...)...)
	g.Expect(code).To(Equal(0), errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	g.Expect(lines).To(HaveLen(5))
	g.Expect(strings.Fields(lines[0])).To(Equal([]string{"TAG", "DIGEST", "SOURCE", "REVISION"}))
	g.Expect(strings.Fields(lines[1])).To(Equal([]string{"latest", digest, "https://github.com/org/app.git", "main@sha1:" + commit[:7]}))
	g.Expect(strings.Fields(lines[2])).To(Equal([]string{"other", other, "https://example.com/src", "v2"}))
	g.Expect(strings.Fields(lines[3])[0:2]).To(Equal([]string{"production", digest}))
	g.Expect(strings.Fields(lines[4])[0:2]).To(Equal([]string{"v1.0.0", digest}))

	out, errOut, code = artifactCLI(t, "", "", append([]string{"list", "artifacts", ref, "-o", "json"}, creds...)...)
	g.Expect(code).To(Equal(0), errOut)
	var list []charts.ArtifactTag
	g.Expect(json.Unmarshal([]byte(out), &list)).To(Succeed())
	g.Expect(list).To(HaveLen(4))
	g.Expect(list[1].Revision).To(Equal("v2"))
	g.Expect(out + errOut).NotTo(ContainSubstring("gh0-token-value"))
}

// TestArtifactCredentialsFlags: the password comes from --password-stdin, from
// $CONVERGE_REGISTRY_PASSWORD or from docker login's config.json; a wrong one is refused
// and shown nowhere, nor is a malformed --creds.
func TestArtifactCredentialsFlags(t *testing.T) {
	host := artifactRegistry(t)
	dir := t.TempDir()
	diffWriteFiles(t, dir, map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n"})
	ref := "oci://" + host + "/app:latest"
	push := []string{"push", "artifact", ref, "--path", dir}
	dockerConfig := func(password string) string {
		b, _ := json.Marshal(map[string]any{"auths": map[string]any{host: map[string]string{
			"auth": base64.StdEncoding.EncodeToString([]byte(artifactUser + ":" + password))}}})
		return string(b)
	}
	for _, tc := range []struct {
		name, stdin, env, docker string
		args                     []string
		code                     int
		message                  string
	}{
		{name: "password on stdin", stdin: artifactPassword + "\n", args: []string{"--username", artifactUser, "--password-stdin"}},
		{name: "password in the environment", env: artifactPassword, args: []string{"--username", artifactUser}},
		{name: "docker login", docker: dockerConfig(artifactPassword)},
		{name: "wrong password", args: []string{"--creds", artifactUser + ":wr0ng-registry-pass"}, code: 1, message: "the server refused the credentials"},
		{name: "wrong password on stdin", stdin: "wr0ng-registry-pass", args: []string{"--username", artifactUser, "--password-stdin"}, code: 1, message: "the server refused the credentials"},
		{name: "wrong docker login", docker: dockerConfig("wr0ng-registry-pass"), code: 1, message: "the server refused the credentials"},
		{name: "no credentials", code: 1, message: "the server refused the credentials"},
		{name: "malformed creds", args: []string{"--creds", "wr0ng-registry-pass"}, code: 2, message: "--creds is USER:PASSWORD"},
		{name: "environment without user", env: "wr0ng-registry-pass", code: 2, message: "$CONVERGE_REGISTRY_PASSWORD needs --username"},
		{name: "stdin without user", stdin: "wr0ng-registry-pass", args: []string{"--password-stdin"}, code: 2, message: "--password-stdin needs --username"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			t.Setenv(registryPasswordEnv, tc.env)
			out, errOut, code := artifactCLI(t, tc.stdin, tc.docker, append(push, tc.args...)...)
			g.Expect(code).To(Equal(tc.code), errOut)
			g.Expect(errOut).To(ContainSubstring(tc.message))
			for _, secret := range []string{artifactPassword, "wr0ng-registry-pass", base64.StdEncoding.EncodeToString([]byte(artifactUser + ":wr0ng-registry-pass"))} {
				g.Expect(out + errOut).NotTo(ContainSubstring(secret))
			}
		})
	}
}

// TestArtifactCommandErrors: what cannot work as written exits 2.
func TestArtifactCommandErrors(t *testing.T) {
	g := NewWithT(t)
	for _, tc := range []struct {
		args    []string
		message string
	}{
		{[]string{"push", "artifact", "oci://localhost:1/app:v1"}, "--path is needed"},
		{[]string{"push", "artifact", "ghcr.io/org/app:v1", "--path", "."}, "is not an oci://host/path/repo[:tag] reference"},
		{[]string{"push", "artifact", "oci://localhost:1/app:v1", "--path", ".", "--annotation", "novalue"}, `--annotation "novalue" is not KEY=VALUE`},
		{[]string{"tag", "artifact", "oci://localhost:1/app:v1"}, "--tag is needed"},
		{[]string{"list", "artifacts", "oci://localhost:1/app:v1"}, "without a tag or digest"},
		{[]string{"list", "artifacts", "oci://localhost:1/app", "-o", "xml"}, "--output must be table, yaml or json"},
	} {
		_, errOut, code := artifactCLI(t, "", "", tc.args...)
		g.Expect(code).To(Equal(2), strings.Join(tc.args, " ")+": "+errOut)
		g.Expect(errOut).To(ContainSubstring(tc.message), strings.Join(tc.args, " "))
	}
}
