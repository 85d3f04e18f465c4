package render

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// TestConfinedFS exercises the filesys.FileSystem kustomize sees, path by path.
func TestConfinedFS(t *testing.T) {
	setup := func(t *testing.T) (*confinedFS, func()) {
		root, outside := newRepo(t)
		write(t, root, "dir/file.yaml", "inside")
		write(t, root, "dir/sub/deep.yaml", "deep")
		symlink(t, root, "link-dir", "dir")
		symlink(t, root, "dir/up.yaml", "../dir/file.yaml")
		symlink(t, root, "abs", "/etc/passwd")
		symlink(t, root, "abs-outside-dir", outside)
		symlink(t, root, "rel-out", "../outside/passwd")
		symlink(t, root, "dir/sub/rel-out2", "../../../outside")
		symlink(t, root, "loop1", "loop2")
		symlink(t, root, "loop2", "loop1")
		symlink(t, root, "self", "self")
		return openConfined(t, root)
	}
	m := func(rel string) string { return filepath.Join(mountPoint, rel) }
	tests := []struct {
		name    string
		path    string
		content string // ReadFile succeeds with this
		class   error  // ReadFile fails with this
	}{
		{name: "plain file", path: m("dir/file.yaml"), content: "inside"},
		{name: "relative to the mount point", path: "dir/file.yaml", content: "inside"},
		{name: "through a symlinked directory", path: m("link-dir/sub/deep.yaml"), content: "deep"},
		{name: "symlink inside going up and down", path: m("dir/up.yaml"), content: "inside"},
		{name: "dot-dot that stays inside", path: m("dir/sub/../file.yaml"), content: "inside"},
		{name: "dot-dot out of the mount point", path: m("../outside/passwd"), class: ErrOutsideRoot},
		{name: "absolute host path", path: "/etc/passwd", class: ErrOutsideRoot},
		{name: "mount point prefix trick", path: mountPoint + "-other/x", class: ErrOutsideRoot},
		{name: "absolute symlink", path: m("abs"), class: ErrOutsideRoot},
		{name: "absolute symlink to a directory", path: m("abs-outside-dir/cm.yaml"), class: ErrOutsideRoot},
		{name: "relative symlink out", path: m("rel-out"), class: ErrOutsideRoot},
		{name: "relative symlink out, deeper", path: m("dir/sub/rel-out2/cm.yaml"), class: ErrOutsideRoot},
		{name: "symlink loop", path: m("loop1"), class: ErrSymlinkLoop},
		{name: "self-referencing symlink", path: m("self"), class: ErrSymlinkLoop},
		{name: "missing", path: m("nope.yaml"), class: ErrNotFound},
		{name: "file used as a directory", path: m("dir/file.yaml/x"), class: ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			cfs, done := setup(t)
			defer done()
			b, err := cfs.ReadFile(tt.path)
			if tt.class != nil {
				g.Expect(err).To(MatchError(tt.class))
				g.Expect(b).To(BeNil())
				g.Expect(cfs.Exists(tt.path)).To(BeFalse())
				_, _, err := cfs.CleanedAbs(tt.path)
				g.Expect(err).To(HaveOccurred())
				_, err = cfs.Open(tt.path)
				g.Expect(err).To(HaveOccurred())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(b)).To(Equal(tt.content))
			g.Expect(cfs.Exists(tt.path)).To(BeTrue())
			f, err := cfs.Open(tt.path)
			g.Expect(err).NotTo(HaveOccurred())
			ob, _ := io.ReadAll(f)
			g.Expect(string(ob)).To(Equal(tt.content))
			_, err = f.Write([]byte("x"))
			g.Expect(err).To(HaveOccurred())
		})
	}

	t.Run("CleanedAbs resolves symlinks, so kustomize sees a base once", func(t *testing.T) {
		g := NewWithT(t)
		cfs, done := setup(t)
		defer done()
		d, f, err := cfs.CleanedAbs(m("link-dir/sub"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(d).To(Equal(filesys.ConfirmedDir(m("dir/sub"))))
		g.Expect(f).To(BeEmpty())
		d, f, err = cfs.CleanedAbs(m("dir/up.yaml"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(d).To(Equal(filesys.ConfirmedDir(m("dir"))))
		g.Expect(f).To(Equal("file.yaml"))
		d, _, err = cfs.CleanedAbs(mountPoint)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(d).To(Equal(filesys.ConfirmedDir(mountPoint)))
	})

	t.Run("directories, listing and globbing", func(t *testing.T) {
		g := NewWithT(t)
		cfs, done := setup(t)
		defer done()
		g.Expect(cfs.IsDir(m("link-dir"))).To(BeTrue())
		g.Expect(cfs.IsDir(m("abs-outside-dir"))).To(BeFalse())
		names, err := cfs.ReadDir(m("dir"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(names).To(Equal([]string{"file.yaml", "sub", "up.yaml"}))
		_, err = cfs.ReadDir(m("abs-outside-dir"))
		g.Expect(err).To(MatchError(ErrOutsideRoot))
		matches, err := cfs.Glob(m("dir/*.yaml"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(matches).To(Equal([]string{m("dir/file.yaml"), m("dir/up.yaml")}))
	})

	t.Run("walk does not follow symlinks out", func(t *testing.T) {
		g := NewWithT(t)
		cfs, done := setup(t)
		defer done()
		var seen []string
		err := cfs.Walk(mountPoint, func(p string, info os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			seen = append(seen, p)
			return nil
		})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(seen).To(ContainElement(m("abs-outside-dir")))
		g.Expect(seen).NotTo(ContainElement(m("abs-outside-dir/cm.yaml")))
		g.Expect(seen).To(ContainElement(m("dir/sub/deep.yaml")))
	})

	t.Run("writes are refused", func(t *testing.T) {
		g := NewWithT(t)
		cfs, done := setup(t)
		defer done()
		_, err := cfs.Create(m("new"))
		g.Expect(err).To(HaveOccurred())
		g.Expect(cfs.WriteFile(m("dir/file.yaml"), []byte("x"))).To(HaveOccurred())
		g.Expect(cfs.Mkdir(m("d"))).To(HaveOccurred())
		g.Expect(cfs.MkdirAll(m("d/e"))).To(HaveOccurred())
		g.Expect(cfs.RemoveAll(m("dir"))).To(HaveOccurred())
		b, err := cfs.ReadFile(m("dir/file.yaml"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(b)).To(Equal("inside"))
	})
}

// TestLooksRemote pins which references count as remote.
func TestLooksRemote(t *testing.T) {
	tests := []struct {
		ref    string
		remote bool
	}{
		{"../base", false},
		{"base", false},
		{"deploy.yaml", false},
		{"my.github.com.yaml", false},
		{"https://example.com/x.yaml", true},
		{"HTTP://example.com/x.yaml", true},
		{"git::https://example.com/org/repo", true},
		{"ssh://git@example.com/org/repo", true},
		{"file:///tmp/repo", true},
		{"git@example.com:org/repo.git", true},
		{"github.com/org/repo", true},
		{"GitHub.com:org/repo", true},
		{" https://example.com/padded", true},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(looksRemote(tt.ref)).To(Equal(tt.remote))
		})
	}
}
