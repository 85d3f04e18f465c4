package sources

import (
	"errors"
	"io"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"
)

// errOverBudget stops an in-memory fetch whose objects outgrow the budget; the fetch is then
// done again into on-disk storage.
var errOverBudget = errors.New("fetched objects exceed the in-memory budget")

// memStorage keeps the objects of a fetch in memory, up to a budget of uncompressed bytes.
// Unpacking in memory avoids writing the pack, indexing it and inflating every object a second
// time to read it back — most of the cost of a cold fetch besides creating the files.
type memStorage struct {
	*memory.Storage
	budget, used int64
}

func newMemStorage(budget int64) *memStorage {
	return &memStorage{Storage: memory.NewStorage(), budget: budget}
}

func (m *memStorage) charge(n int64) error {
	m.used += n
	if n < 0 || m.used > m.budget {
		return errOverBudget
	}
	return nil
}

// SetEncodedObject stores an object the pack parser built in memory (a resolved delta).
func (m *memStorage) SetEncodedObject(o plumbing.EncodedObject) (plumbing.Hash, error) {
	if err := m.charge(o.Size()); err != nil {
		return plumbing.ZeroHash, err
	}
	return m.Storage.SetEncodedObject(o)
}

// LazyWriter is what go-git's pack parser uses, when the storage offers it, for objects that
// are not deltas: it announces the object's size before inflating it, so that an object larger
// than the budget is refused before it takes any memory.
func (m *memStorage) LazyWriter() (io.WriteCloser, func(plumbing.ObjectType, int64) error, error) {
	w := &lazyObject{m: m, obj: &plumbing.MemoryObject{}}
	return w, w.header, nil
}

type lazyObject struct {
	m        *memStorage
	obj      *plumbing.MemoryObject
	declared int64
	written  int64
}

func (l *lazyObject) header(t plumbing.ObjectType, size int64) error {
	if err := l.m.charge(size); err != nil {
		return err
	}
	l.obj.SetType(t)
	l.obj.SetSize(size)
	l.declared = size
	return nil
}

func (l *lazyObject) Write(p []byte) (int, error) {
	if l.written+int64(len(p)) > l.declared {
		return 0, errors.New("object larger than its header says")
	}
	l.written += int64(len(p))
	return l.obj.Write(p)
}

func (l *lazyObject) Close() error {
	_, err := l.m.Storage.SetEncodedObject(l.obj)
	return err
}
