package sources

import (
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// A pack is tiny on the wire and can be enormous unpacked: a delta of a few bytes can declare
// a gigabyte result (copy the same 64 KiB of its base 16 384 times), and an object header can
// declare any size at all. go-git believes these sizes: it reserves buffers of the declared size
// and materialises every object in memory while it indexes a pack. packGuard stands between the
// server and go-git and checks them first.

// packLimits is what a pack may unpack to.
type packLimits struct {
	// bytes bounds each object and the sum of all objects at their unpacked size (a delta at
	// the size of its result), and, separately, the sum of the unpacked deltas themselves.
	bytes int64
	// objects bounds the number of objects.
	objects int64
	// maxBytes, maxFiles and commit are the caps and the commit named in a *LimitError.
	maxBytes, maxFiles int64
	commit             string
}

// packLimitsFor returns the limits of the pack of a checkout within maxBytes and maxFiles. A
// depth-1 pack holds the commit, its trees and its blobs, each once: the blobs add up to at most
// maxBytes; the trees hold an entry per file and per directory (512 bytes per file covers a
// file's entry and one directory's, with names of 255 bytes); a commit is small. Each file needs
// one blob, and rarely more than one tree.
func packLimitsFor(maxBytes, maxFiles int64, commit string) packLimits {
	return packLimits{
		bytes:    satAdd(maxBytes, satMul(512, maxFiles), 1<<20),
		objects:  satAdd(satMul(2, maxFiles), 4096),
		maxBytes: maxBytes,
		maxFiles: maxFiles,
		commit:   commit,
	}
}

func (l packLimits) tooLarge(format string, args ...any) error {
	return &LimitError{Limit: "MaxBytes", Max: l.maxBytes, Commit: l.commit,
		Reason: fmt.Sprintf(format, args...) + fmt.Sprintf(" (a checkout within the caps unpacks to at most %d)", l.bytes)}
}

// add adds n to *total, which is at most l.bytes, unless that makes it larger.
func (l packLimits) add(total *int64, n uint64) bool {
	if n > uint64(l.bytes-*total) {
		return false
	}
	*total += int64(n)
	return true
}

// satAdd and satMul are + and × on non-negative numbers, saturating at MaxInt64.
func satAdd(xs ...int64) int64 {
	var sum int64
	for _, x := range xs {
		if x > 0 && sum > maxInt64-x {
			return maxInt64
		}
		sum += x
	}
	return sum
}

func satMul(a, b int64) int64 {
	if a > 0 && b > maxInt64/a {
		return maxInt64
	}
	return a * b
}

const maxInt64 = 1<<63 - 1

const (
	packHeaderSize  = 12
	packTrailerSize = 20 // SHA-1
	// packBufferSize is the initial size of the guard's buffer.
	packBufferSize = 64 << 10
	// maxHeld bounds the compressed bytes one step may read before any of them are handed on.
	// Inflating 32 KiB takes at most a little over 32 KiB of zlib stream; a stream that reads
	// far more without producing anything (empty blocks) is not what git writes.
	maxHeld = 1 << 20
	// inflateChunk is what one step inflates at most.
	inflateChunk = 32 << 10
)

// Object types of the pack format.
const (
	packCommit   = 1
	packTree     = 2
	packBlob     = 3
	packTag      = 4
	packOFSDelta = 6
	packREFDelta = 7
)

type guardState int

const (
	stHeader guardState = iota
	stObject
	stData
	stTrailer
	stDone
)

// packGuard hands on a pack unchanged, after checking it: the object count against
// limits.objects; each object's declared size, and for a delta the size of its result (the
// first bytes of the inflated delta), against limits.bytes, alone and added up; and that each
// object inflates to exactly its declared size, which stops a zlib bomb after its declared size.
// It inflates every object to do so, a chunk at a time, and hands on the bytes of a chunk only
// once the chunk is checked, so go-git never sees a size that was not checked, nor inflates
// more than the guard did. The first error is final: nothing after it is handed on.
type packGuard struct {
	in  packInput
	lim packLimits

	state   guardState
	count   uint32 // objects the pack declares
	index   uint32 // the object being read
	start   int64  // its offset in the pack
	size    int64  // its declared size
	delta   bool
	written int64 // its bytes inflated so far
	sizes   int64 // the objects' unpacked sizes, deltas at the size of their result
	deltas  int64 // the deltas' own sizes

	// budget, when not 0, is what the pack may unpack to in memory (sizes and deltas), and
	// budget/16 the largest object it may hold there. An object that goes beyond pauses the
	// guard before any of it is handed on: Read returns errOverBudget until toDisk.
	budget int64
	spill  bool
	paused bool

	zr      io.ReadCloser
	scratch []byte
	err     error
}

func newPackGuard(r io.Reader, lim packLimits, memoryBudget int64) *packGuard {
	return &packGuard{in: packInput{src: r, buf: make([]byte, packBufferSize)}, lim: lim, budget: memoryBudget}
}

// Read hands on the checked bytes of the pack. It returns io.EOF after the pack's trailing
// checksum, whatever follows it, and errOverBudget, with the guard paused, at the first object
// that does not fit the memory budget.
func (g *packGuard) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	in := &g.in
	// Step until something can be handed on, then on while what the next step needs is
	// probably buffered already, so that small objects go on in batches.
	batch := min(len(p), packBufferSize/2)
	for !g.paused && g.err == nil && (in.safe == in.out || (in.safe-in.out < batch && in.end-in.pos >= 64)) {
		if err := g.step(); err != nil {
			g.err = err
			break
		}
		if g.spill && g.budget > 0 {
			g.paused = true
			break
		}
		in.safe = in.pos
	}
	if in.safe > in.out {
		n := copy(p, in.buf[in.out:in.safe])
		in.out += n
		return n, nil
	}
	if g.paused {
		return 0, errOverBudget
	}
	return 0, g.err
}

// toDisk lifts the memory budget: the pack goes on from the object that did not fit.
func (g *packGuard) toDisk() {
	g.budget = 0
	if g.paused {
		g.paused = false
		g.in.safe = g.in.pos
	}
}

// Err returns why the guard stopped the pack: a *LimitError, a malformed pack, or the error of
// the underlying reader. It is nil while the pack is fine, and after all of it was handed on.
func (g *packGuard) Err() error {
	if errors.Is(g.err, io.EOF) {
		return nil
	}
	return g.err
}

func (g *packGuard) step() error {
	switch g.state {
	case stHeader:
		return g.header()
	case stObject:
		return g.objectHeader()
	case stData:
		return g.inflate()
	case stTrailer:
		var sum [packTrailerSize]byte
		if err := g.readFull(sum[:]); err != nil {
			return err
		}
		g.state = stDone
		return nil
	}
	return io.EOF
}

func (g *packGuard) header() error {
	var h [packHeaderSize]byte
	n, err := io.ReadFull(&g.in, h[:])
	if n == 0 && errors.Is(err, io.EOF) {
		return io.EOF // no pack at all: go-git says so in its words
	}
	if err != nil {
		return g.srcErr(err)
	}
	if string(h[:4]) != "PACK" {
		return malformedPack("it does not start with PACK")
	}
	if v := binary.BigEndian.Uint32(h[4:8]); v != 2 {
		return malformedPack("version %d is not supported", v)
	}
	g.count = binary.BigEndian.Uint32(h[8:])
	if int64(g.count) > g.lim.objects {
		return &LimitError{Limit: "MaxFiles", Max: g.lim.maxFiles, Commit: g.lim.commit,
			Reason: fmt.Sprintf("the server's pack holds %d objects, more than the %d a checkout within the caps needs", g.count, g.lim.objects)}
	}
	g.next()
	return nil
}

// next moves on to the next object, or to the trailer after the last.
func (g *packGuard) next() {
	if g.index < g.count {
		g.state = stObject
	} else {
		g.state = stTrailer
	}
}

// objectHeader reads an object's type and size, and for a delta its base and the size of its
// result, and checks them before any of it is handed on.
func (g *packGuard) objectHeader() error {
	g.start = g.in.offset()
	typ, size, err := g.typeAndSize()
	if err != nil {
		return err
	}
	if err := g.deltaBase(typ); err != nil {
		return err
	}
	if err := g.checkSize(size); err != nil {
		return err
	}
	g.size, g.written = int64(size), 0
	g.checkBudget(size)

	if g.zr == nil {
		g.zr, err = zlib.NewReader(&g.in)
		g.scratch = make([]byte, inflateChunk)
	} else {
		err = g.zr.(zlib.Resetter).Reset(&g.in, nil)
	}
	if err != nil {
		return g.inflateErr(err)
	}
	g.state = stData
	if g.delta {
		return g.deltaTarget()
	}
	return nil
}

// typeAndSize reads the type and the declared size that start an object.
func (g *packGuard) typeAndSize() (typ byte, size uint64, err error) {
	c, err := g.readByte()
	if err != nil {
		return 0, 0, err
	}
	typ = (c >> 4) & 7
	size = uint64(c & 0x0f)
	for shift := uint(4); c&0x80 != 0; shift += 7 {
		if shift > 57 {
			return 0, 0, g.malformed("its size does not fit in 64 bits")
		}
		if c, err = g.readByte(); err != nil {
			return 0, 0, err
		}
		size |= uint64(c&0x7f) << shift
	}
	return typ, size, nil
}

// deltaBase notes whether an object of type typ is a delta, and reads the base of a delta: an
// offset, which must point back into the pack, or a hash.
func (g *packGuard) deltaBase(typ byte) error {
	switch typ {
	case packCommit, packTree, packBlob, packTag:
		g.delta = false
	case packOFSDelta:
		g.delta = true
		c, err := g.readByte()
		if err != nil {
			return err
		}
		off := uint64(c & 0x7f)
		for c&0x80 != 0 {
			if off >= 1<<56 {
				return g.malformed("its base offset does not fit in 64 bits")
			}
			if c, err = g.readByte(); err != nil {
				return err
			}
			off = (off+1)<<7 | uint64(c&0x7f)
		}
		if off == 0 || off > uint64(g.start-packHeaderSize) {
			return g.malformed("its base is outside the pack")
		}
	case packREFDelta:
		g.delta = true
		var base [20]byte
		return g.readFull(base[:])
	default:
		return g.malformed("it has the unknown type %d", typ)
	}
	return nil
}

// checkSize checks an object's declared size against the caps, alone and added to the others
// of its kind (whole objects, deltas).
func (g *packGuard) checkSize(size uint64) error {
	if g.delta {
		if size > uint64(g.lim.bytes) {
			return g.lim.tooLarge("the server's pack holds a delta of %d bytes", size)
		}
		if !g.lim.add(&g.deltas, size) {
			return g.lim.tooLarge("the deltas of the server's pack add up to more than %d bytes", g.lim.bytes)
		}
		return nil
	}
	if size > uint64(g.lim.bytes) {
		return g.lim.tooLarge("the server's pack holds an object of %d bytes", size)
	}
	if !g.lim.add(&g.sizes, size) {
		return g.lim.tooLarge("the objects of the server's pack add up to more than %d bytes", g.lim.bytes)
	}
	return nil
}

// checkBudget notes when an object of size bytes takes the pack past the memory budget.
func (g *packGuard) checkBudget(size uint64) {
	if g.budget > 0 && (size > uint64(g.budget/16) || g.sizes > g.budget-g.deltas) {
		g.spill = true
	}
}

// deltaTarget inflates the start of a delta, the sizes of its base and of its result, and checks
// the latter.
func (g *packGuard) deltaTarget() error {
	// Each size takes at most 10 bytes; a delta declared shorter than that is read to its end.
	want := int(min(g.size, 20))
	var h [20]byte
	n := 0
	var err error
	for n < want && err == nil {
		var m int
		m, err = g.zr.Read(h[n:want])
		n += m
	}
	g.written = int64(n)
	if err != nil && !errors.Is(err, io.EOF) {
		return g.inflateErr(err)
	}
	_, used, ok := uleb128(h[:n])
	if !ok {
		return g.malformed("its delta header is cut short or too long")
	}
	target, _, ok := uleb128(h[used:n])
	if !ok {
		return g.malformed("its delta header is cut short or too long")
	}
	if target > uint64(g.lim.bytes) {
		return g.lim.tooLarge("the server's pack holds a delta that makes an object of %d bytes", target)
	}
	if !g.lim.add(&g.sizes, target) {
		return g.lim.tooLarge("the objects of the server's pack add up to more than %d bytes", g.lim.bytes)
	}
	g.checkBudget(target)
	if errors.Is(err, io.EOF) {
		return g.endObject()
	}
	return nil
}

// inflate inflates the next chunk of the current object.
func (g *packGuard) inflate() error {
	n, err := g.zr.Read(g.scratch)
	g.written += int64(n)
	if g.written > g.size {
		return g.malformed("it inflates to more than the %d bytes its header declares", g.size)
	}
	if errors.Is(err, io.EOF) {
		return g.endObject()
	}
	if err != nil {
		return g.inflateErr(err)
	}
	return nil
}

func (g *packGuard) endObject() error {
	if g.written != g.size {
		return g.malformed("it inflates to %d bytes, not the %d bytes its header declares", g.written, g.size)
	}
	g.index++
	g.next()
	return nil
}

func (g *packGuard) readByte() (byte, error) {
	c, err := g.in.ReadByte()
	if err != nil {
		return 0, g.srcErr(err)
	}
	return c, nil
}

func (g *packGuard) readFull(p []byte) error {
	if _, err := io.ReadFull(&g.in, p); err != nil {
		return g.srcErr(err)
	}
	return nil
}

// srcErr is an error of reading the pack itself: the underlying reader's, or a pack cut short.
func (g *packGuard) srcErr(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// inflateErr is an error of the zlib stream: the underlying reader's when it failed, else a
// malformed object.
func (g *packGuard) inflateErr(err error) error {
	if g.in.err != nil && !errors.Is(g.in.err, io.EOF) {
		return g.in.err
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return io.ErrUnexpectedEOF
	}
	return g.malformed("%v", err)
}

func (g *packGuard) malformed(format string, args ...any) error {
	return malformedPack("object %d of %d at offset %d: "+format, append([]any{g.index + 1, g.count, g.start}, args...)...)
}

func malformedPack(format string, args ...any) error {
	return fmt.Errorf("%w: malformed pack from the server: %s", ErrFetchFailed, fmt.Sprintf(format, args...))
}

// uleb128 decodes the variable-length sizes of a delta header, as git and go-git do: at most
// nine bytes, seven bits each, least significant first.
func uleb128(b []byte) (v uint64, n int, ok bool) {
	for i, c := range b {
		if i > 8 {
			return 0, 0, false
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return v, i + 1, true
		}
	}
	return 0, 0, false
}

// packInput is the guard's buffer over the stream: buf[out:safe] is checked and waits to be
// handed on, buf[safe:pos] was read by the step under way, buf[pos:end] is read ahead. It is the
// io.ByteReader the inflater reads from, so that the inflater reads exactly the bytes of each
// zlib stream and none of the next object's.
type packInput struct {
	src                 io.Reader
	buf                 []byte
	base                int64 // offset in the pack of buf[0]
	out, safe, pos, end int
	err                 error // the last error of src
}

func (in *packInput) offset() int64 { return in.base + int64(in.pos) }

func (in *packInput) ReadByte() (byte, error) {
	if in.pos == in.end {
		if err := in.fill(); err != nil {
			return 0, err
		}
	}
	c := in.buf[in.pos]
	in.pos++
	return c, nil
}

func (in *packInput) Read(p []byte) (int, error) {
	if in.pos == in.end {
		if err := in.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, in.buf[in.pos:in.end])
	in.pos += n
	return n, nil
}

// fill reads more of src: at least one byte, or an error.
func (in *packInput) fill() error {
	if in.end == len(in.buf) {
		if in.out > 0 { // drop what was handed on
			n := copy(in.buf, in.buf[in.out:in.end])
			in.base += int64(in.out)
			in.safe -= in.out
			in.pos -= in.out
			in.end = n
			in.out = 0
		}
		if in.end == len(in.buf) {
			if in.pos-in.safe >= maxHeld {
				return malformedPack("a zlib stream at offset %d goes on for %d bytes without producing anything", in.base+int64(in.safe), in.pos-in.safe)
			}
			buf := make([]byte, 2*len(in.buf))
			copy(buf, in.buf[:in.end])
			in.buf = buf
		}
	}
	for range 100 {
		if in.err != nil {
			return in.err
		}
		n, err := in.src.Read(in.buf[in.end:])
		in.end += n
		in.err = err
		if n > 0 {
			return nil
		}
	}
	return io.ErrNoProgress
}
