package sources

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// Packs written by hand, byte by byte from git's pack format (Documentation/gitformat-pack),
// so that a test can send what no git would: sizes that lie, deltas that explode, zlib bombs.

// Object types of the pack format, as the tests write them.
const (
	objCommit   = 1
	objTree     = 2
	objBlob     = 3
	objOFSDelta = 6
	objREFDelta = 7
)

// testPack is a pack being written: objects are appended, Bytes adds header and checksum.
type testPack struct {
	body  bytes.Buffer
	count uint32
}

// raw appends an object whose header declares typ and size, followed by the given bytes as
// they are (a zlib stream, or whatever a test wants there), and returns its offset.
func (p *testPack) raw(typ byte, size uint64, after []byte, data []byte) int64 {
	off := int64(12 + p.body.Len())
	p.body.Write(objectHeader(typ, size))
	p.body.Write(after)
	p.body.Write(data)
	p.count++
	return off
}

// object appends a commit, tree or blob and returns its offset and object id.
func (p *testPack) object(typ byte, content []byte) (int64, [20]byte) {
	return p.raw(typ, uint64(len(content)), nil, deflate(content)), objectID(typ, content)
}

// ofsDelta appends a delta on the object at base.
func (p *testPack) ofsDelta(base int64, delta []byte) int64 {
	off := int64(12 + p.body.Len())
	return p.raw(objOFSDelta, uint64(len(delta)), ofsOffset(uint64(off-base)), deflate(delta))
}

// refDelta appends a delta on the object with the given id.
func (p *testPack) refDelta(base [20]byte, delta []byte) int64 {
	return p.raw(objREFDelta, uint64(len(delta)), base[:], deflate(delta))
}

// Bytes returns the whole pack: "PACK", version 2, the object count, the objects and the
// SHA-1 of all that.
func (p *testPack) Bytes() []byte {
	var b bytes.Buffer
	b.WriteString("PACK")
	_ = binary.Write(&b, binary.BigEndian, uint32(2))
	_ = binary.Write(&b, binary.BigEndian, p.count)
	b.Write(p.body.Bytes())
	sum := sha1.Sum(b.Bytes())
	b.Write(sum[:])
	return b.Bytes()
}

// objectHeader is the type and size of an object: 3 bits of type and 4 bits of size in the
// first byte, then 7 bits of size a byte, least significant first, the top bit saying more
// follow.
func objectHeader(typ byte, size uint64) []byte {
	b := []byte{typ<<4 | byte(size&0x0f)}
	for size >>= 4; size > 0; size >>= 7 {
		b[len(b)-1] |= 0x80
		b = append(b, byte(size&0x7f))
	}
	return b
}

// ofsOffset is how far back the base of an OFS_DELTA is: 7 bits a byte, most significant
// first, each continuation adding one to what precedes it.
func ofsOffset(n uint64) []byte {
	var b [10]byte
	i := len(b) - 1
	b[i] = byte(n & 0x7f)
	for n >>= 7; n > 0; n >>= 7 {
		n--
		i--
		b[i] = 0x80 | byte(n&0x7f)
	}
	return b[i:]
}

// leb128 is a size in a delta header: 7 bits a byte, least significant first.
func leb128(n uint64) []byte {
	var b []byte
	for {
		c := byte(n & 0x7f)
		n >>= 7
		if n == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// deltaHeader starts a delta: the size of its base, then the size of its result.
func deltaHeader(base, result uint64) []byte {
	return append(leb128(base), leb128(result)...)
}

// copyAll is the delta instruction "copy 64 KiB of the base from offset 0": a copy command
// with neither offset nor size bytes, whose size 0 means 0x10000.
const copyAll = 0x80

// copyRange is the delta instruction "copy size bytes of the base from off": after the command
// byte, the non-zero bytes of the offset (4) and of the size (3), least significant first, each
// flagged in the command byte.
func copyRange(off, size uint32) []byte {
	cmd := []byte{0x80}
	for i := range 4 {
		if b := byte(off >> (8 * i)); b != 0 {
			cmd[0] |= 1 << i
			cmd = append(cmd, b)
		}
	}
	for i := range 3 {
		if b := byte(size >> (8 * i)); b != 0 {
			cmd[0] |= 0x10 << i
			cmd = append(cmd, b)
		}
	}
	return cmd
}

// bombDelta is a delta on a base of 64 KiB whose result is the base repeated to size bytes:
// size/64Ki one-byte instructions, which deflate to almost nothing.
func bombDelta(size uint64) []byte {
	return append(deltaHeader(64<<10, size), bytes.Repeat([]byte{copyAll}, int(size/(64<<10)))...)
}

func deflate(b []byte) []byte {
	var out bytes.Buffer
	w, _ := zlib.NewWriterLevel(&out, zlib.BestCompression)
	_, _ = w.Write(b)
	_ = w.Close()
	return out.Bytes()
}

// deflateZeros is the zlib stream of n zero bytes, written without holding them.
func deflateZeros(n int64) []byte {
	var out bytes.Buffer
	w, _ := zlib.NewWriterLevel(&out, zlib.BestCompression)
	_, _ = io.Copy(w, io.LimitReader(zeros{}, n))
	_ = w.Close()
	return out.Bytes()
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func objectID(typ byte, content []byte) [20]byte {
	name := map[byte]string{objCommit: "commit", objTree: "tree", objBlob: "blob"}[typ]
	return sha1.Sum(append([]byte(fmt.Sprintf("%s %d\x00", name, len(content))), content...))
}

// commitOf appends to p a commit whose tree holds the given files (name → blob id), and
// returns the commit's id in hex.
func commitOf(p *testPack, files map[string][20]byte) string {
	var tree bytes.Buffer
	for _, name := range slices.Sorted(maps.Keys(files)) {
		id := files[name]
		fmt.Fprintf(&tree, "100644 %s\x00", name)
		tree.Write(id[:])
	}
	_, treeID := p.object(objTree, tree.Bytes())
	commit := fmt.Sprintf("tree %x\nauthor A <a@example.com> 1700000000 +0000\ncommitter A <a@example.com> 1700000000 +0000\n\nhostile\n", treeID)
	_, id := p.object(objCommit, []byte(commit))
	return hex.EncodeToString(id[:])
}

// packServer is a git server on loopback speaking smart HTTP, as a hostile server would: it
// advertises one branch at a commit and answers every fetch with the same pack, whatever was
// asked, in side-band-64k frames.
type packServer struct {
	url     string
	fetches atomic.Int64
}

func newPackServer(t *testing.T, commit string, pack []byte) *packServer {
	t.Helper()
	s := &packServer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/info/refs"):
			w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
			var b bytes.Buffer
			pktLine(&b, []byte("# service=git-upload-pack\n"))
			b.WriteString("0000")
			pktLine(&b, []byte(commit+" HEAD\x00side-band-64k no-progress\n"))
			pktLine(&b, []byte(commit+" refs/heads/main\n"))
			b.WriteString("0000")
			_, _ = w.Write(b.Bytes())
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-upload-pack"):
			s.fetches.Add(1)
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/x-git-upload-pack-result")
			pktLine(w, []byte("NAK\n"))
			for rest := pack; len(rest) > 0; {
				n := min(len(rest), 65515)
				_, _ = fmt.Fprintf(w, "%04x\x01", n+5)
				_, _ = w.Write(rest[:n])
				rest = rest[n:]
			}
			_, _ = io.WriteString(w, "0000")
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL + "/org/app"
	return s
}

func pktLine(w io.Writer, payload []byte) {
	_, _ = fmt.Fprintf(w, "%04x", len(payload)+4)
	_, _ = w.Write(payload)
}
