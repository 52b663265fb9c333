package tinygguf

import (
	"io"
)

// KV is one metadata pair of a header written by WriteHeader. Val is a
// uint32, int32, float32, bool, string, []string, []int32, []uint32 or
// []bool (a per-layer figure, as llama.cpp writes head_count_kv of models
// whose layers differ).
type KV struct {
	Key string
	Val any
}

// Tensor describes one tensor of a header written by WriteHeader: its
// name, dims in ggml order (ne[0] first), its ggml_type number and its
// data's bytes (for the offsets that follow it).
type Tensor struct {
	Name  string
	Dims  []int64
	Type  uint32
	Bytes int64
}

// WriteHeader writes a GGUF v3 header: the metadata and the tensor
// descriptions, without the tensors' data. It is the part of a model file
// that says the model's shape, for tests that read real models' shapes
// (every key and tensor as llama.cpp's convert_hf_to_gguf.py writes them)
// without their gigabytes.
func WriteHeader(w io.Writer, meta []KV, tensors []Tensor) error {
	g := &ggufWriter{w: w}
	g.head(meta, tensors)
	return g.err
}

// head writes the header: magic, version, counts, the metadata and the
// tensor descriptions with their data's aligned offsets, then the padding
// before the data.
func (g *ggufWriter) head(meta []KV, tensors []Tensor) {
	g.raw([]byte(ggufMagic))
	g.u32(ggufVersion)
	g.u64(uint64(len(tensors)))
	g.u64(uint64(len(meta)))
	for _, m := range meta {
		g.str(m.Key)
		g.value(m.Val)
	}
	var off int64
	for _, t := range tensors {
		g.str(t.Name)
		g.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			g.u64(uint64(d))
		}
		g.u32(t.Type)
		g.u64(uint64(off))
		off += padTo(t.Bytes)
	}
	g.pad()
}
