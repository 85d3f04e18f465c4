// Package tarpath checks the name of an entry of a tar archive that converge unpacks (a
// chart archive from a repository, or one kept in Git under charts/) under one set of
// rules, the strictest of those it had: a name must be relative, slash-separated and
// portable, with no NUL and no ".." element.
package tarpath

import (
	"fmt"
	"path"
	"strings"
)

// Clean returns raw cleaned, or why it is refused: empty, absolute (also after a first
// directory: "top//etc"), with a backslash or a drive letter (not portable), a NUL, or a ".." element (it could leave the directory
// it is unpacked in).
func Clean(raw string) (string, error) {
	switch {
	case raw == "" || strings.HasPrefix(raw, "/") || strings.Contains(raw, "//") || strings.Contains(raw, `\`) || hasDrive(raw):
		return "", fmt.Errorf("entry %q has an absolute or non-portable path", raw)
	case strings.ContainsRune(raw, 0):
		return "", fmt.Errorf("entry %q has a NUL in its name", raw)
	}
	for _, elem := range strings.Split(raw, "/") {
		if elem == ".." {
			return "", fmt.Errorf("entry %q leaves the archive's directory", raw)
		}
	}
	return path.Clean(raw), nil
}

// hasDrive reports a Windows drive letter ("C:").
func hasDrive(p string) bool {
	if len(p) < 2 || p[1] != ':' {
		return false
	}
	c := p[0] | 0x20
	return c >= 'a' && c <= 'z'
}
