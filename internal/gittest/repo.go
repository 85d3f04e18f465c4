// Package gittest runs real git servers on loopback for tests — smart HTTP through the system
// `git http-backend`, and an in-process SSH server that runs git-upload-pack and git-receive-pack —
// and builds the repositories they serve with the system git CLI.
//
// Every server binds to 127.0.0.1 only and is stopped by t.Cleanup.
package gittest

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// Committer is the identity every commit and annotated tag made by this package carries.
const Committer = "gittest <gittest@example.com>"

// env is the environment the system git runs in: hermetic (no system or user config) and with a
// fixed identity, so that a developer's ~/.gitconfig cannot change what tests see.
func env() []string {
	out := make([]string, 0, len(os.Environ())+8)
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GIT_") {
			continue
		}
		out = append(out, kv)
	}
	return append(out,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL="+os.DevNull,
		"GIT_AUTHOR_NAME=gittest", "GIT_AUTHOR_EMAIL=gittest@example.com",
		"GIT_COMMITTER_NAME=gittest", "GIT_COMMITTER_EMAIL=gittest@example.com",
		"GIT_TERMINAL_PROMPT=0",
	)
}

// Git runs the system git with args in dir and returns its standard output without the trailing
// newline. It fails the test when git fails.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	return GitInput(t, dir, nil, args...)
}

// GitInput is Git with stdin as git's standard input.
func GitInput(t testing.TB, dir string, stdin io.Reader, args ...string) string {
	t.Helper()
	out, err := run(dir, stdin, args...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return out
}

func run(dir string, stdin io.Reader, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = env()
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimRight(stdout.String(), "\n"), nil
}

// Repo is a bare repository under a server root. Both the HTTP and the SSH server serve every
// repository under the root they were started with.
type Repo struct {
	// Name is the path of the repository relative to the root, e.g. "org/app.git".
	Name string
	// Dir is the absolute path of the bare repository.
	Dir string

	mu sync.Mutex
	n  int
}

// NewRepo creates an empty bare repository root/name (".git" is appended to name when missing)
// whose default branch is main. It allows fetching any reachable commit by its SHA, as GitHub
// and GitLab do.
func NewRepo(t testing.TB, root, name string) *Repo {
	t.Helper()
	if !strings.HasSuffix(name, ".git") {
		name += ".git"
	}
	dir := filepath.Join(root, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	Git(t, root, "init", "--bare", "-q", "--initial-branch=main", dir)
	Git(t, dir, "config", "uploadpack.allowReachableSHA1InWant", "true")
	Git(t, dir, "config", "http.receivepack", "true")
	return &Repo{Name: name, Dir: dir}
}

// Change is one change made by a commit.
type Change struct {
	// Path of the file, slash-separated, relative to the repository root.
	Path string
	// Content of the file, or the target when Symlink is set.
	Content string
	// Symlink makes the file a symbolic link to Content.
	Symlink bool
	// Executable sets the file's executable bit.
	Executable bool
	// Delete removes the file instead.
	Delete bool
}

// Files turns a map of path to content into changes, sorted by path.
func Files(files map[string]string) []Change {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	out := make([]Change, 0, len(paths))
	for _, p := range paths {
		out = append(out, Change{Path: p, Content: files[p]})
	}
	return out
}

// Commit adds a commit writing files (path → content) on top of branch, creating the branch when
// it does not exist, and returns the commit's SHA.
func (r *Repo) Commit(t testing.TB, branch string, files map[string]string) string {
	t.Helper()
	return r.CommitChanges(t, branch, Files(files)...)
}

// CommitChanges adds a commit with changes on top of branch (created when missing) and returns
// its SHA.
func (r *Repo) CommitChanges(t testing.TB, branch string, changes ...Change) string {
	t.Helper()
	parent, _ := run(r.Dir, nil, "rev-parse", "--verify", "-q", "refs/heads/"+branch)
	return r.CommitOnto(t, branch, parent, changes...)
}

// CommitOnto makes a commit whose only parent is parent (none when empty) with the tree of parent
// plus changes, and points branch at it whether or not that is a fast-forward — as a forced push
// would. It returns the commit's SHA.
func (r *Repo) CommitOnto(t testing.TB, branch, parent string, changes ...Change) string {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++

	var b bytes.Buffer
	msg := fmt.Sprintf("commit %d on %s", r.n, branch)
	fmt.Fprintf(&b, "commit refs/heads/%s\n", branch)
	fmt.Fprintf(&b, "committer %s %d +0000\n", Committer, time.Now().Unix())
	fmt.Fprintf(&b, "data %d\n%s\n", len(msg), msg)
	if parent != "" {
		fmt.Fprintf(&b, "from %s\n", parent)
	}
	for _, c := range changes {
		if strings.ContainsAny(c.Path, "\n\"") {
			t.Fatalf("gittest: unsupported path %q", c.Path)
		}
		switch {
		case c.Delete:
			fmt.Fprintf(&b, "D %s\n", c.Path)
			continue
		case c.Symlink:
			fmt.Fprintf(&b, "M 120000 inline %s\n", c.Path)
		case c.Executable:
			fmt.Fprintf(&b, "M 100755 inline %s\n", c.Path)
		default:
			fmt.Fprintf(&b, "M 100644 inline %s\n", c.Path)
		}
		fmt.Fprintf(&b, "data %d\n%s\n", len(c.Content), c.Content)
	}
	b.WriteString("\n")
	GitInput(t, r.Dir, &b, "fast-import", "--quiet", "--force")
	return Git(t, r.Dir, "rev-parse", "refs/heads/"+branch)
}

// FastImport feeds stream to `git fast-import` in the repository: the quick way to build large
// histories.
func (r *Repo) FastImport(t testing.TB, stream io.Reader) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	GitInput(t, r.Dir, stream, "fast-import", "--quiet", "--force")
}

// Head returns the commit branch points at.
func (r *Repo) Head(t testing.TB, branch string) string {
	t.Helper()
	return Git(t, r.Dir, "rev-parse", "refs/heads/"+branch)
}

// Tag creates or moves the lightweight tag name to commit.
func (r *Repo) Tag(t testing.TB, name, commit string) {
	t.Helper()
	Git(t, r.Dir, "update-ref", "refs/tags/"+name, commit)
}

// AnnotatedTag creates an annotated tag object name pointing at commit and returns the SHA of
// the tag object (not of the commit).
func (r *Repo) AnnotatedTag(t testing.TB, name, commit string) string {
	t.Helper()
	Git(t, r.Dir, "tag", "-a", "-f", "-m", "release "+name, name, commit)
	return Git(t, r.Dir, "rev-parse", "refs/tags/"+name)
}

// SetRef points any ref (e.g. refs/pull/7/head) at commit.
func (r *Repo) SetRef(t testing.TB, ref, commit string) {
	t.Helper()
	Git(t, r.Dir, "update-ref", ref, commit)
}

// ForcePush points branch at commit whatever it pointed at before, as `git push --force` would.
func (r *Repo) ForcePush(t testing.TB, branch, commit string) {
	t.Helper()
	Git(t, r.Dir, "update-ref", "refs/heads/"+branch, commit)
}

// DeleteBranch removes branch, as `git push --delete` would.
func (r *Repo) DeleteBranch(t testing.TB, branch string) {
	t.Helper()
	Git(t, r.Dir, "update-ref", "-d", "refs/heads/"+branch)
}

// DeleteTag removes tag.
func (r *Repo) DeleteTag(t testing.TB, tag string) {
	t.Helper()
	Git(t, r.Dir, "update-ref", "-d", "refs/tags/"+tag)
}
