package bandwidth

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

// GGUF value types (the GGUF specification, ggml's gguf.h).
const (
	ggufU8 = iota
	ggufI8
	ggufU16
	ggufI16
	ggufU32
	ggufI32
	ggufF32
	ggufBool
	ggufString
	ggufArray
	ggufU64
	ggufI64
	ggufF64
)

// Bounds a GGUF header may not pass: a file claiming more is not one
// tokentap reads (its metadata of interest is a few dozen values; a
// tokenizer's arrays are skipped, not kept).
const (
	maxGGUFKeys   = 1 << 16
	maxGGUFString = 1 << 26 // one string value: 64 MiB
	maxGGUFKey    = 1 << 16
	maxGGUFArray  = 1 << 28
	maxGGUFDepth  = 4
	maxGGUFKept   = 4096 // longest string value kept
	// maxGGUFKeptArray is the longest array of numbers or bools kept:
	// per-layer figures, not a tokenizer's.
	maxGGUFKeptArray = 4096
	maxGGUFTensors   = 1 << 20
	maxGGUFDims      = 8
)

// ErrNotGGUF is wrapped by ReadGGUF's errors about a file that is not GGUF.
var ErrNotGGUF = errors.New("not a GGUF file")

// GGUFMeta is a GGUF file's metadata: numbers (as float64), bools and
// short strings by key, and arrays of numbers ([]float64) or bools
// ([]bool) up to maxGGUFKeptArray values (per-layer figures). Longer
// arrays and arrays of strings (the tokenizer's) are skipped.
type GGUFMeta map[string]any

// Tensor is one tensor a model file declares: its name, its ggml type as
// ggml names it ("F16", "Q4_K", "MXFP4", …) and its dimensions.
type Tensor struct {
	Name string
	Type string
	Dims []uint64
}

// GGUF is what a GGUF file's header says: its metadata and its tensors.
type GGUF struct {
	Meta    GGUFMeta
	Tensors []Tensor
}

// ReadGGUF reads the header of a GGUF file (versions 2 and 3) from r: the
// metadata and the tensor descriptions, stopping before the tensors' data.
// Values it does not keep are skipped. A short or malformed header is an
// error, never a panic or a huge allocation.
func ReadGGUF(r io.Reader) (GGUF, error) {
	br := &ggufReader{r: bufio.NewReaderSize(r, 16<<10)}
	var magic [4]byte
	br.read(magic[:])
	if br.err != nil || string(magic[:]) != "GGUF" {
		return GGUF{}, fmt.Errorf("%w: it does not start with GGUF", ErrNotGGUF)
	}
	version := br.u32()
	if br.err == nil && (version < 2 || version > 3) {
		return GGUF{}, fmt.Errorf("%w: GGUF version %d (tokentap reads 2 and 3)", ErrNotGGUF, version)
	}
	ntensors := br.u64()
	nkv := br.u64()
	if br.err != nil {
		return GGUF{}, fmt.Errorf("%w: %v", ErrNotGGUF, br.err)
	}
	if nkv > maxGGUFKeys {
		return GGUF{}, fmt.Errorf("%w: %d metadata keys", ErrNotGGUF, nkv)
	}
	if ntensors > maxGGUFTensors {
		return GGUF{}, fmt.Errorf("%w: %d tensors", ErrNotGGUF, ntensors)
	}
	meta := GGUFMeta{}
	for i := uint64(0); i < nkv && br.err == nil; i++ {
		key, ok := br.str(maxGGUFKey, true)
		if !ok {
			break
		}
		t := br.u32()
		if v, keep := br.value(t, 0); keep && br.err == nil {
			meta[key] = v
		}
	}
	if br.err != nil {
		return GGUF{}, fmt.Errorf("%w: reading its metadata: %v", ErrNotGGUF, br.err)
	}
	var tensors []Tensor
	for i := uint64(0); i < ntensors && br.err == nil; i++ {
		name, _ := br.str(maxGGUFKey, true)
		nd := br.u32()
		if br.err == nil && nd > maxGGUFDims {
			br.err = fmt.Errorf("tensor %q has %d dimensions", name, nd)
			break
		}
		dims := make([]uint64, 0, nd)
		for range nd {
			dims = append(dims, br.u64())
		}
		typ := br.u32()
		br.u64() // offset
		if br.err == nil {
			tensors = append(tensors, Tensor{Name: name, Type: ggmlTypeName(typ), Dims: dims})
		}
	}
	if br.err != nil {
		return GGUF{}, fmt.Errorf("%w: reading its tensor descriptions: %v", ErrNotGGUF, br.err)
	}
	return GGUF{Meta: meta, Tensors: tensors}, nil
}

// ReadGGUFFile reads the header of the GGUF file at path.
func ReadGGUFFile(path string) (GGUF, error) {
	f, err := os.Open(path)
	if err != nil {
		return GGUF{}, err
	}
	defer f.Close()
	m, err := ReadGGUF(f)
	if err != nil {
		return GGUF{}, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

type ggufReader struct {
	r   *bufio.Reader
	err error
	buf [8]byte
}

func (g *ggufReader) read(b []byte) {
	if g.err != nil {
		return
	}
	if _, err := io.ReadFull(g.r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		g.err = err
	}
}

func (g *ggufReader) u32() uint32 {
	g.read(g.buf[:4])
	if g.err != nil {
		return 0
	}
	return binary.LittleEndian.Uint32(g.buf[:4])
}

func (g *ggufReader) u64() uint64 {
	g.read(g.buf[:8])
	if g.err != nil {
		return 0
	}
	return binary.LittleEndian.Uint64(g.buf[:8])
}

func (g *ggufReader) skip(n uint64) {
	if g.err != nil {
		return
	}
	if _, err := g.r.Discard(int(n)); err != nil {
		g.err = io.ErrUnexpectedEOF
	}
}

// str reads a GGUF string (u64 length, bytes); it keeps strings up to
// keepMax bytes when keep, and skips longer ones (ok false).
func (g *ggufReader) str(keepMax int, keep bool) (string, bool) {
	n := g.u64()
	if g.err != nil {
		return "", false
	}
	if n > maxGGUFString {
		g.err = fmt.Errorf("a string of %d bytes", n)
		return "", false
	}
	if !keep || n > uint64(keepMax) {
		g.skip(n)
		return "", false
	}
	b := make([]byte, n)
	g.read(b)
	return string(b), g.err == nil
}

// scalarSize is the bytes of a fixed-size value type, 0 for others.
func scalarSize(t uint32) uint64 {
	switch t {
	case ggufU8, ggufI8, ggufBool:
		return 1
	case ggufU16, ggufI16:
		return 2
	case ggufU32, ggufI32, ggufF32:
		return 4
	case ggufU64, ggufI64, ggufF64:
		return 8
	}
	return 0
}

// value reads one value of type t; keep is false for arrays and long
// strings, which are skipped.
func (g *ggufReader) value(t uint32, depth int) (v any, keep bool) {
	switch t {
	case ggufString:
		s, ok := g.str(maxGGUFKept, true)
		return s, ok
	case ggufArray:
		if depth >= maxGGUFDepth {
			g.err = errors.New("arrays nested too deep")
			return nil, false
		}
		et := g.u32()
		n := g.u64()
		if g.err != nil {
			return nil, false
		}
		if n > maxGGUFArray {
			g.err = fmt.Errorf("an array of %d values", n)
			return nil, false
		}
		if sz := scalarSize(et); sz > 0 {
			if depth > 0 || n > maxGGUFKeptArray {
				g.skip(n * sz)
				return nil, false
			}
			if et == ggufBool {
				out := make([]bool, 0, n)
				for range n {
					v, _ := g.value(et, depth+1)
					b, _ := v.(bool)
					out = append(out, b)
				}
				return out, g.err == nil
			}
			out := make([]float64, 0, n)
			for range n {
				v, _ := g.value(et, depth+1)
				f, _ := v.(float64)
				out = append(out, f)
			}
			return out, g.err == nil
		}
		if et != ggufString && et != ggufArray {
			g.err = fmt.Errorf("unknown array value type %d", et)
			return nil, false
		}
		for i := uint64(0); i < n && g.err == nil; i++ {
			g.value(et, depth+1)
		}
		return nil, false
	}
	sz := scalarSize(t)
	if sz == 0 {
		g.err = fmt.Errorf("unknown value type %d", t)
		return nil, false
	}
	g.read(g.buf[:sz])
	if g.err != nil {
		return nil, false
	}
	b := g.buf[:sz]
	switch t {
	case ggufU8:
		return float64(b[0]), true
	case ggufI8:
		return float64(int8(b[0])), true
	case ggufBool:
		return b[0] != 0, true
	case ggufU16:
		return float64(binary.LittleEndian.Uint16(b)), true
	case ggufI16:
		return float64(int16(binary.LittleEndian.Uint16(b))), true
	case ggufU32:
		return float64(binary.LittleEndian.Uint32(b)), true
	case ggufI32:
		return float64(int32(binary.LittleEndian.Uint32(b))), true
	case ggufF32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b))), true
	case ggufU64:
		return float64(binary.LittleEndian.Uint64(b)), true
	case ggufI64:
		return float64(int64(binary.LittleEndian.Uint64(b))), true
	default: // ggufF64
		return math.Float64frombits(binary.LittleEndian.Uint64(b)), true
	}
}
