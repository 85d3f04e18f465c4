//go:build unix && !linux

package sources

import "syscall"

const oNoFollow = syscall.O_NOFOLLOW

// syncFS is a no-op where syncfs(2) does not exist: the rename into place still guarantees that
// a crash of the process leaves no partial checkout.
func syncFS(string) error { return nil }
