package tinygguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// ggufFile is a GGUF file read back by readGGUF, an independent reader
// written from gguf.h's description rather than from the writer.
type ggufFile struct {
	version   uint32
	keys      []string // in file order
	kv        map[string]any
	tensors   []ggufTensor
	byName    map[string]*ggufTensor
	dataStart int64
	data      []byte // the whole file
}

type ggufTensor struct {
	name   string
	dims   []uint64
	typ    uint32
	offset uint64 // from dataStart
}

func (t *ggufTensor) elems() uint64 {
	n := uint64(1)
	for _, d := range t.dims {
		n *= d
	}
	return n
}

// floats decodes a tensor's data; F16 and F32 only.
func (f *ggufFile) floats(name string) ([]float32, error) {
	t := f.byName[name]
	if t == nil {
		return nil, fmt.Errorf("no tensor %s", name)
	}
	start := f.dataStart + int64(t.offset)
	out := make([]float32, t.elems())
	switch t.typ {
	case ggmlF16:
		b := f.data[start : start+2*int64(len(out))]
		for i := range out {
			out[i] = f16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
		}
	case ggmlF32:
		b := f.data[start : start+4*int64(len(out))]
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	default:
		return nil, fmt.Errorf("tensor %s: type %d", name, t.typ)
	}
	return out, nil
}

type ggufReader struct {
	b   []byte
	off int64
	err error
}

func (r *ggufReader) take(n int64) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || r.off+n > int64(len(r.b)) {
		r.err = fmt.Errorf("truncated at %d reading %d bytes", r.off, n)
		return nil
	}
	b := r.b[r.off : r.off+n]
	r.off += n
	return b
}

func (r *ggufReader) u8() uint8 {
	if b := r.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *ggufReader) u32() uint32 {
	if b := r.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *ggufReader) u64() uint64 {
	if b := r.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (r *ggufReader) str() string {
	n := r.u64()
	if n > 1<<30 {
		r.err = fmt.Errorf("string of %d bytes at %d", n, r.off)
		return ""
	}
	return string(r.take(int64(n)))
}

// value reads one value of GGUF type typ. Arrays come back as []any.
func (r *ggufReader) value(typ uint32) any {
	switch typ {
	case 0:
		return r.u8()
	case 1:
		return int8(r.u8())
	case 2:
		return binary.LittleEndian.Uint16(r.take(2))
	case 3:
		return int16(binary.LittleEndian.Uint16(r.take(2)))
	case ggufUint32:
		return r.u32()
	case ggufInt32:
		return int32(r.u32())
	case ggufFloat32:
		return math.Float32frombits(r.u32())
	case ggufBool:
		switch v := r.u8(); v {
		case 0, 1:
			return v == 1
		default:
			r.err = fmt.Errorf("bool %d", v)
			return nil
		}
	case ggufString:
		return r.str()
	case ggufArray:
		et := r.u32()
		n := r.u64()
		if n > 1<<24 {
			r.err = fmt.Errorf("array of %d", n)
			return nil
		}
		a := make([]any, 0, n)
		for range n {
			if r.err != nil {
				return nil
			}
			a = append(a, r.value(et))
		}
		return a
	case 10:
		return r.u64()
	case 11:
		return int64(r.u64())
	case 12:
		return math.Float64frombits(r.u64())
	}
	r.err = fmt.Errorf("unknown type %d at %d", typ, r.off)
	return nil
}

func readGGUF(b []byte) (*ggufFile, error) {
	r := &ggufReader{b: b}
	if string(r.take(4)) != ggufMagic {
		return nil, fmt.Errorf("no GGUF magic")
	}
	f := &ggufFile{version: r.u32(), kv: map[string]any{}, byName: map[string]*ggufTensor{}, data: b}
	nt, nkv := r.u64(), r.u64()
	if nt > 1<<16 || nkv > 1<<16 {
		return nil, fmt.Errorf("%d tensors, %d keys", nt, nkv)
	}
	for range nkv {
		k := r.str()
		v := r.value(r.u32())
		if r.err != nil {
			return nil, r.err
		}
		if _, dup := f.kv[k]; dup {
			return nil, fmt.Errorf("key %s twice", k)
		}
		f.keys = append(f.keys, k)
		f.kv[k] = v
	}
	for range nt {
		t := ggufTensor{name: r.str()}
		nd := r.u32()
		if nd > 4 {
			return nil, fmt.Errorf("tensor %s: %d dims", t.name, nd)
		}
		for range nd {
			t.dims = append(t.dims, r.u64())
		}
		t.typ = r.u32()
		t.offset = r.u64()
		if r.err != nil {
			return nil, r.err
		}
		f.tensors = append(f.tensors, t)
	}
	for i := range f.tensors {
		t := &f.tensors[i]
		if f.byName[t.name] != nil {
			return nil, fmt.Errorf("tensor %s twice", t.name)
		}
		f.byName[t.name] = t
	}
	f.dataStart = (r.off + ggufAlignment - 1) / ggufAlignment * ggufAlignment
	for _, t := range f.tensors {
		size := 2 * t.elems()
		if t.typ == ggmlF32 {
			size = 4 * t.elems()
		}
		if t.offset%ggufAlignment != 0 {
			return nil, fmt.Errorf("tensor %s at unaligned offset %d", t.name, t.offset)
		}
		if f.dataStart+int64(t.offset)+int64(size) > int64(len(b)) {
			return nil, fmt.Errorf("tensor %s runs past the file", t.name)
		}
	}
	return f, r.err
}
