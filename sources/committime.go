package sources

import (
	"os"
	"time"
)

// CommitTime returns the committer time of a revision whose tree is in the cache: a
// checkout's directory carries it as its modification time. False when the revision is
// not cached.
func (c *Cache) CommitTime(src Source, rev Revision) (time.Time, bool) {
	dir, ok := c.Path(src, rev)
	if !ok {
		return time.Time{}, false
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return time.Time{}, false
	}
	return fi.ModTime(), true
}
