package sources

import (
	"bytes"
	"errors"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// bombSize is what the bombs declare they unpack to.
const bombSize = 1 << 30

// hostilePack is a pack a hostile server sends, and what the checkout must say about it.
type hostilePack struct {
	name string
	// build writes the pack and returns the commit it holds.
	build func(p *testPack) string
	// kind is the failure kind; limit the cap named when it is a *LimitError.
	kind  error
	limit string
	// says is in the message.
	says string
}

// zeroBase appends a blob of 64 KiB of zeros, the base of the delta bombs, and a commit whose
// tree holds it.
func zeroBase(p *testPack) (off int64, id [20]byte, commit string) {
	off, id = p.object(objBlob, make([]byte, 64<<10))
	return off, id, commitOf(p, map[string][20]byte{"a": id})
}

func hostilePacks() []hostilePack {
	return []hostilePack{
		{
			name: "ofs delta bomb",
			build: func(p *testPack) string {
				base, _, commit := zeroBase(p)
				p.ofsDelta(base, bombDelta(bombSize))
				return commit
			},
			kind: ErrLimitExceeded, limit: "MaxBytes", says: "a delta that makes an object of 1073741824 bytes",
		},
		{
			name: "ref delta bomb",
			build: func(p *testPack) string {
				_, id, commit := zeroBase(p)
				p.refDelta(id, bombDelta(bombSize))
				return commit
			},
			kind: ErrLimitExceeded, limit: "MaxBytes", says: "a delta that makes an object of 1073741824 bytes",
		},
		{
			name: "delta declaring a huge size of its own",
			build: func(p *testPack) string {
				base, _, commit := zeroBase(p)
				delta := append(deltaHeader(64<<10, 64<<10), copyAll)
				p.raw(objOFSDelta, bombSize, ofsOffset(uint64(12+p.body.Len())-uint64(base)), deflate(delta))
				return commit
			},
			kind: ErrLimitExceeded, limit: "MaxBytes", says: "a delta of 1073741824 bytes",
		},
		{
			name: "zlib bomb: a blob declared small inflating to 64 MiB",
			build: func(p *testPack) string {
				_, _, commit := zeroBase(p)
				p.raw(objBlob, 100, nil, deflateZeros(64<<20))
				return commit
			},
			kind: ErrFetchFailed, says: "inflates to more than the 100 bytes its header declares",
		},
		{
			name: "zlib bomb: a blob declared within the cap inflating to 64 MiB",
			build: func(p *testPack) string {
				_, _, commit := zeroBase(p)
				p.raw(objBlob, 7<<20, nil, deflateZeros(64<<20))
				return commit
			},
			kind: ErrFetchFailed, says: "inflates to more than the 7340032 bytes its header declares",
		},
		{
			name: "a blob declaring a huge size",
			build: func(p *testPack) string {
				_, _, commit := zeroBase(p)
				p.raw(objBlob, bombSize, nil, deflate([]byte("hello")))
				return commit
			},
			kind: ErrLimitExceeded, limit: "MaxBytes", says: "an object of 1073741824 bytes",
		},
		{
			name: "many medium objects adding up past the cap",
			build: func(p *testPack) string {
				files := map[string][20]byte{}
				for i := range 40 {
					content := make([]byte, 1<<20)
					content[0] = byte(i)
					off, id := p.object(objBlob, content)
					files[string(rune('a'+i%26))+string(rune('a'+i/26))] = id
					// and a delta making another 1 MiB of it
					p.ofsDelta(off, append(deltaHeader(1<<20, 1<<20+1), append(bytes.Repeat([]byte{copyAll}, 16), 1, 'x')...))
				}
				return commitOf(p, files)
			},
			kind: ErrLimitExceeded, limit: "MaxBytes", says: "add up to more than",
		},
		{
			name: "more objects than the caps allow",
			build: func(p *testPack) string {
				_, _, commit := zeroBase(p)
				p.count = 1 << 31
				return commit
			},
			kind: ErrLimitExceeded, limit: "MaxFiles", says: "holds 2147483648 objects",
		},
	}
}

// fetchPaths are the two ways a pack is stored: unpacked in memory within the budget, and
// written to disk beyond it.
var fetchPaths = []struct {
	name   string
	budget int64
}{
	{"in memory", 0},
	{"on disk", 1},
}

// TestHostilePacks: a server sending a pack whose objects declare, or inflate to, more than a
// checkout within the caps holds — a delta of a few bytes declaring a gigabyte result, a zlib
// bomb, a header lying about a size, many objects adding up — is refused while the pack
// streams in, with an error naming the cap, after one fetch, holding no more memory than about
// twice the cap, whether the pack is unpacked in memory or written to disk. A pack within the
// caps, from the same server, checks out. Not parallel: it measures memory.
func TestHostilePacks(t *testing.T) {
	const maxBytes = 8 << 20
	opts := CacheOptions{MaxBytes: maxBytes, MaxFiles: 1000}
	// Collect garbage early, so that the heap follows what the fetch holds rather than how
	// far the collector lets garbage grow.
	defer debug.SetGCPercent(debug.SetGCPercent(20))

	for _, path := range fetchPaths {
		t.Run(path.name, func(t *testing.T) {
			t.Run("a pack within the caps", func(t *testing.T) {
				g := NewWithT(t)
				p := &testPack{}
				// a and its delta b; c, larger than what is read whole from disk, and its delta d
				a := make([]byte, 64<<10)
				aOff, aID := p.object(objBlob, a)
				b := make([]byte, 128<<10)
				p.ofsDelta(aOff, bombDelta(uint64(len(b))))
				c := randomBytes(3 << 20)
				cOff, cID := p.object(objBlob, c)
				d := append(append([]byte("head\n"), c[1<<20:]...), c[:1000]...)
				delta := append(deltaHeader(uint64(len(c)), uint64(len(d))), 5, 'h', 'e', 'a', 'd', '\n')
				for off := uint32(1 << 20); off < uint32(len(c)); off += 60_000 {
					delta = append(delta, copyRange(off, min(60_000, uint32(len(c))-off))...)
				}
				delta = append(delta, copyRange(0, 1000)...)
				p.ofsDelta(cOff, delta)
				files := map[string][]byte{"a": a, "b": b, "c": c, "d": d}
				commit := commitOf(p, map[string][20]byte{"a": aID, "b": objectID(objBlob, b), "c": cID, "d": objectID(objBlob, d)})
				srv := newPackServer(t, commit, p.Bytes())
				opts := opts
				opts.MemoryBudget = path.budget
				cache := newTestCache(t, opts)
				dir, err := cache.Checkout(ctxTimeout(t, 30*time.Second), Source{URL: srv.url}, Revision{Ref: "main", Commit: commit})
				g.Expect(err).NotTo(HaveOccurred())
				tree := readTree(t, dir)
				g.Expect(tree).To(HaveLen(len(files)))
				for name, content := range files {
					g.Expect(tree[name] == string(content)).To(BeTrue(), "content of %s", name)
				}
				g.Expect(srv.fetches.Load()).To(BeEquivalentTo(1))
			})

			for _, tc := range hostilePacks() {
				t.Run(tc.name, func(t *testing.T) {
					g := NewWithT(t)
					p := &testPack{}
					commit := tc.build(p)
					pack := p.Bytes()
					srv := newPackServer(t, commit, pack)
					o := opts
					o.MemoryBudget = path.budget
					cache := newTestCache(t, o)
					src := Source{URL: srv.url}
					rev := Revision{Ref: "main", Commit: commit}

					var err error
					start := time.Now()
					peak, total := measureHeap(func() {
						_, err = cache.Checkout(ctxTimeout(t, 2*time.Minute), src, rev)
					})
					t.Logf("a pack of %d bytes: %v in %v; heap grew by %d KiB at most, %d KiB allocated",
						len(pack), err, time.Since(start).Round(time.Millisecond), peak>>10, total>>10)

					g.Expect(err).To(HaveOccurred())
					g.Expect(kindOf(t, err)).To(Equal(tc.kind))
					g.Expect(err.Error()).To(ContainSubstring(tc.says))
					if tc.limit != "" {
						var le *LimitError
						g.Expect(errors.As(err, &le)).To(BeTrue())
						g.Expect(le.Limit).To(Equal(tc.limit))
						g.Expect(err.Error()).To(ContainSubstring(tc.limit), "the message names the cap")
					}
					g.Expect(len(err.Error())).To(BeNumerically("<", 512))
					g.Expect(srv.fetches.Load()).To(BeEquivalentTo(1), "a refused pack is not fetched again")
					_, cached := cache.Path(src, rev)
					g.Expect(cached).To(BeFalse())
					g.Expect(listDir(cache.tmp)).To(BeEmpty())
					g.Expect(peak).To(BeNumerically("<", 2*maxBytes), "the heap grew past twice the cap")
					g.Expect(total).To(BeNumerically("<", 8*maxBytes), "allocated past eight times the cap")
				})
			}
		})
	}
}

// measureHeap runs f and returns by how much the heap grew at most while it ran (sampled
// every 200µs) and how much f allocated in all, from the whole process.
func measureHeap(f func()) (peak, total uint64) {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	base := sample[0].Value.Uint64()
	stop, done := make(chan struct{}), make(chan uint64)
	go func() {
		tick := time.NewTicker(200 * time.Microsecond)
		defer tick.Stop()
		var high uint64
		for {
			metrics.Read(sample)
			high = max(high, sample[0].Value.Uint64())
			select {
			case <-stop:
				done <- high
				return
			case <-tick.C:
			}
		}
	}()
	f()
	close(stop)
	high := <-done
	runtime.ReadMemStats(&after)
	if high > base {
		peak = high - base
	}
	return peak, after.TotalAlloc - before.TotalAlloc
}
