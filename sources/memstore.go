package sources

import (
	"errors"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"
)

// errOverBudget stops unpacking a fetch in memory when its objects outgrow the budget; the
// pack then goes on to disk.
var errOverBudget = errors.New("fetched objects exceed the in-memory budget")

// memStorage keeps the objects of a fetch in memory, up to a budget of uncompressed bytes.
// Unpacking in memory avoids writing the pack, indexing it and inflating every object a second
// time to read it back — most of the cost of a cold fetch besides creating the files.
//
// go-git's parser builds each object whole before storing it, so the budget is checked only
// then: the packGuard in front of the parser is what keeps objects that do not fit from being
// built in memory at all. This is the backstop.
type memStorage struct {
	*memory.Storage
	budget, used int64
}

func newMemStorage(budget int64) *memStorage {
	return &memStorage{Storage: memory.NewStorage(), budget: budget}
}

// SetEncodedObject stores an object the pack parser built. The parser builds a delta's result
// more than once; it is held, and counted, once.
func (m *memStorage) SetEncodedObject(o plumbing.EncodedObject) (plumbing.Hash, error) {
	h := o.Hash()
	if m.HasEncodedObject(h) == nil {
		return h, nil
	}
	if n := o.Size(); n < 0 || n > m.budget-m.used {
		return plumbing.ZeroHash, errOverBudget
	}
	m.used += o.Size()
	return m.Storage.SetEncodedObject(o)
}
