package sources

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	. "github.com/onsi/gomega"
)

// TestPackGuardPassesPacksThrough: what the guard hands on is the pack, byte for byte, however
// it is read, for packs git writes (with deltas) and for packs without objects.
func TestPackGuardPassesPacksThrough(t *testing.T) {
	t.Parallel()
	p := &testPack{}
	base, _ := p.object(objBlob, bytes.Repeat([]byte("converge "), 20_000))
	p.ofsDelta(base, append(deltaHeader(180_000, 2*64<<10+3), copyAll, copyAll, 3, 'a', 'b', 'c'))
	for i := range 300 {
		p.object(objBlob, []byte(strings.Repeat("x", i)))
	}
	full := p.Bytes()
	for _, tc := range []struct {
		name string
		pack []byte
	}{
		{"objects and deltas", full},
		{"no objects", (&testPack{}).Bytes()},
	} {
		for _, chunk := range []int{1, 7, 4096, 1 << 20} {
			g := NewWithT(t)
			guard := newPackGuard(&chunkReader{r: bytes.NewReader(append(tc.pack, "trailing garbage"...)), n: chunk},
				packLimitsFor(1<<20, 1000, "c"), 0)
			var out bytes.Buffer
			buf := make([]byte, chunk)
			_, err := io.CopyBuffer(&out, struct{ io.Reader }{guard}, buf)
			g.Expect(err).NotTo(HaveOccurred(), "%s in reads of %d", tc.name, chunk)
			g.Expect(guard.Err()).NotTo(HaveOccurred())
			g.Expect(out.Bytes()).To(Equal(tc.pack), "%s in reads of %d: the pack, up to its checksum", tc.name, chunk)
		}
	}
}

// chunkReader returns at most n bytes a read.
type chunkReader struct {
	r io.Reader
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

// FuzzPackGuard: whatever the bytes, the guard does not panic, hands on a prefix of them, and
// what it hands on go-git reads as objects and delta results within the limits, so that no
// size the guard did not check reaches go-git.
func FuzzPackGuard(f *testing.F) {
	small := func(build func(p *testPack)) []byte {
		p := &testPack{}
		build(p)
		return p.Bytes()
	}
	for _, tc := range hostilePacks() {
		if tc.name == "many medium objects adding up past the cap" || strings.HasPrefix(tc.name, "zlib bomb") {
			continue // megabytes: too big a seed
		}
		p := &testPack{}
		tc.build(p)
		f.Add(p.Bytes())
	}
	f.Add(small(func(p *testPack) { p.raw(objBlob, 100, nil, deflateZeros(64<<10)) }))
	f.Add(small(func(p *testPack) {
		base, id := p.object(objBlob, []byte("base object"))
		p.ofsDelta(base, append(deltaHeader(11, 4), 4, 'a', 'b', 'c', 'd'))
		p.refDelta(id, append(deltaHeader(11, 11), 0x90, 11))
		commitOf(p, map[string][20]byte{"f": id})
	}))
	f.Add((&testPack{}).Bytes())
	f.Add([]byte("PACK\x00\x00\x00\x02\x00\x00\x00\x01"))

	lim := packLimitsFor(64<<10, 16, "c")
	f.Fuzz(func(t *testing.T, data []byte) {
		guard := newPackGuard(bytes.NewReader(data), lim, 0)
		out, err := io.ReadAll(io.LimitReader(guard, int64(len(data))+1))
		if !bytes.HasPrefix(data, out) {
			t.Fatalf("handed on %d bytes that are not a prefix of the input", len(out))
		}
		if err == nil && guard.Err() != nil {
			t.Fatalf("read ended without error while the guard says %v", guard.Err())
		}
		var le *LimitError
		if errors.As(guard.Err(), &le) && le.Reason == "" {
			t.Fatalf("a limit error without a reason: %v", le)
		}

		// go-git reads what was handed on: every size it sees is within the limits.
		sc := packfile.NewScanner(bytes.NewReader(out))
		_, count, err := sc.Header()
		if err != nil {
			return
		}
		if int64(count) > lim.objects {
			t.Fatalf("go-git sees %d objects, more than %d", count, lim.objects)
		}
		var sizes, deltas int64
		for range count {
			h, err := sc.NextObjectHeader()
			if err != nil {
				return
			}
			if h.Type.IsDelta() {
				deltas += h.Length
				r, err := sc.ReadObject()
				if err != nil {
					return
				}
				head, _ := io.ReadAll(io.LimitReader(r, 20))
				_, n, ok1 := uleb128(head)
				if !ok1 {
					return
				}
				target, _, ok2 := uleb128(head[n:])
				if !ok2 {
					return
				}
				// go-git's parser inflates the whole delta before the next header: read the
				// rest, or the next header would be read from inside this object's stream.
				if _, err := io.Copy(io.Discard, r); err != nil {
					return
				}
				sizes += int64(target)
			} else {
				sizes += h.Length
			}
			if sizes > lim.bytes || deltas > lim.bytes || sizes < 0 || deltas < 0 {
				t.Fatalf("go-git sees objects of %d bytes and deltas of %d bytes, more than %d", sizes, deltas, lim.bytes)
			}
		}
	})
}

func TestLimitErrorNamesTheCap(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	commit := hex.EncodeToString(make([]byte, 20))
	guard := newPackGuard(bytes.NewReader(func() []byte {
		p := &testPack{}
		zeroBase(p)
		p.raw(objBlob, bombSize, nil, deflate([]byte("x")))
		return p.Bytes()
	}()), packLimitsFor(8<<20, 1000, commit), 0)
	_, err := io.Copy(io.Discard, guard)
	g.Expect(err).To(MatchError(ErrLimitExceeded))
	g.Expect(err.Error()).To(Equal("checkout of " + commit + " exceeds the size cap MaxBytes (8388608 bytes): " +
		"the server's pack holds an object of 1073741824 bytes (a checkout within the caps unpacks to at most 9949184)"))
}
