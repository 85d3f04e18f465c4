package sources

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

const oNoFollow = syscall.O_NOFOLLOW

// syncFS flushes the file system holding dir to disk with one syncfs(2), so that a checkout
// renamed into place survives a power loss whole — not only a crash of the process.
func syncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	return unix.Syncfs(int(f.Fd()))
}
