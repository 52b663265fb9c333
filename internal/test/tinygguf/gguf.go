package tinygguf

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// The GGUF v3 container, as ggml/include/gguf.h describes it: a header, the
// metadata key-value pairs, the tensor descriptions, then the tensor data,
// every tensor starting on an alignment boundary. All little-endian.
const (
	ggufMagic     = "GGUF"
	ggufVersion   = 3
	ggufAlignment = 32 // the default; no general.alignment key is written
)

// Metadata value types (gguf_type).
const (
	ggufUint32  = 4
	ggufInt32   = 5
	ggufFloat32 = 6
	ggufBool    = 7
	ggufString  = 8
	ggufArray   = 9
)

// Tensor data types (ggml_type).
const (
	ggmlF32 = 0
	ggmlF16 = 1
)

// kv is one metadata pair; val is a uint32, int32, float32, bool, string,
// []string, []int32, []uint32 or []bool.
type kv struct {
	key string
	val any
}

// tensorInfo describes one tensor: dims in ggml order (ne[0], the row
// length, first) and a function that writes its data.
type tensorInfo struct {
	name string
	dims []int64
	typ  uint32
	data func(w io.Writer) error
}

func (t tensorInfo) elems() int64 {
	n := int64(1)
	for _, d := range t.dims {
		n *= d
	}
	return n
}

func (t tensorInfo) bytes() int64 {
	if t.typ == ggmlF16 {
		return 2 * t.elems()
	}
	return 4 * t.elems()
}

func padTo(n int64) int64 { return (n + ggufAlignment - 1) / ggufAlignment * ggufAlignment }

// ggufWriter writes little-endian values and counts the bytes written.
type ggufWriter struct {
	w   io.Writer
	n   int64
	err error
	buf [8]byte
}

func (g *ggufWriter) raw(b []byte) {
	if g.err != nil {
		return
	}
	var n int
	n, g.err = g.w.Write(b)
	g.n += int64(n)
}

func (g *ggufWriter) u32(v uint32) {
	binary.LittleEndian.PutUint32(g.buf[:4], v)
	g.raw(g.buf[:4])
}

func (g *ggufWriter) u64(v uint64) {
	binary.LittleEndian.PutUint64(g.buf[:8], v)
	g.raw(g.buf[:8])
}

func (g *ggufWriter) str(s string) {
	g.u64(uint64(len(s)))
	g.raw([]byte(s))
}

func (g *ggufWriter) pad() {
	var zero [ggufAlignment]byte
	g.raw(zero[:padTo(g.n)-g.n])
}

func (g *ggufWriter) value(v any) {
	switch v := v.(type) {
	case uint32:
		g.u32(ggufUint32)
		g.u32(v)
	case int32:
		g.u32(ggufInt32)
		g.u32(uint32(v))
	case float32:
		g.u32(ggufFloat32)
		g.u32(math.Float32bits(v))
	case bool:
		g.u32(ggufBool)
		if v {
			g.raw([]byte{1})
		} else {
			g.raw([]byte{0})
		}
	case string:
		g.u32(ggufString)
		g.str(v)
	case []string:
		g.u32(ggufArray)
		g.u32(ggufString)
		g.u64(uint64(len(v)))
		for _, s := range v {
			g.str(s)
		}
	case []int32:
		g.u32(ggufArray)
		g.u32(ggufInt32)
		g.u64(uint64(len(v)))
		for _, x := range v {
			g.u32(uint32(x))
		}
	case []uint32:
		g.u32(ggufArray)
		g.u32(ggufUint32)
		g.u64(uint64(len(v)))
		for _, x := range v {
			g.u32(x)
		}
	case []bool:
		g.u32(ggufArray)
		g.u32(ggufBool)
		g.u64(uint64(len(v)))
		for _, x := range v {
			if x {
				g.raw([]byte{1})
			} else {
				g.raw([]byte{0})
			}
		}
	default:
		panic(fmt.Sprintf("tinygguf: no GGUF type for %T", v))
	}
}

// writeGGUF writes the whole file: header, metadata, tensor descriptions,
// then each tensor's data at its aligned offset.
func writeGGUF(w io.Writer, meta []kv, tensors []tensorInfo) error {
	g := &ggufWriter{w: w}
	hm := make([]KV, len(meta))
	for i, m := range meta {
		hm[i] = KV{m.key, m.val}
	}
	ht := make([]Tensor, len(tensors))
	for i, t := range tensors {
		ht[i] = Tensor{t.name, t.dims, t.typ, t.bytes()}
	}
	g.head(hm, ht)
	for _, t := range tensors {
		if g.err != nil {
			break
		}
		start := g.n
		if err := t.data(countingWriter{g}); err != nil {
			return err
		}
		if g.err == nil && g.n-start != t.bytes() {
			return fmt.Errorf("tinygguf: tensor %s wrote %d bytes, want %d", t.name, g.n-start, t.bytes())
		}
		g.pad()
	}
	return g.err
}

// countingWriter lets a tensor's data function write through the
// ggufWriter, so its byte count and first error stay the file's.
type countingWriter struct{ g *ggufWriter }

func (c countingWriter) Write(b []byte) (int, error) {
	c.g.raw(b)
	if c.g.err != nil {
		return 0, c.g.err
	}
	return len(b), nil
}
