package tinygguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"testing"
)

// TestGGUFRoundTrip writes every value type and two tensors, one needing
// padding, and reads them back with the test's own reader.
func TestGGUFRoundTrip(t *testing.T) {
	meta := []kv{
		{"a.u32", uint32(7)},
		{"a.i32", int32(-7)},
		{"a.f32", float32(0.5)},
		{"a.true", true},
		{"a.false", false},
		{"a.str", "héllo"},
		{"a.strs", []string{"x", "", "yz"}},
		{"a.i32s", []int32{1, -2, 3}},
	}
	f16s := tensorInfo{name: "h", dims: []int64{3}, typ: ggmlF16, data: func(w io.Writer) error {
		for _, v := range []float32{1, -2, 0.5} {
			if err := binary.Write(w, binary.LittleEndian, f16(v)); err != nil {
				return err
			}
		}
		return nil
	}}
	f32s := tensorInfo{name: "f", dims: []int64{2, 2}, typ: ggmlF32, data: func(w io.Writer) error {
		return binary.Write(w, binary.LittleEndian, []float32{1, 2, 3, 4})
	}}
	var buf bytes.Buffer
	if err := writeGGUF(&buf, meta, []tensorInfo{f16s, f32s}); err != nil {
		t.Fatal(err)
	}
	f, err := readGGUF(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if f.version != 3 || len(f.keys) != len(meta) || len(f.tensors) != 2 {
		t.Fatalf("version %d, %d keys, %d tensors", f.version, len(f.keys), len(f.tensors))
	}
	for i, m := range meta {
		got := f.kv[m.key]
		switch want := m.val.(type) {
		case []string:
			var s []string
			for _, x := range got.([]any) {
				s = append(s, x.(string))
			}
			if !slices.Equal(s, want) {
				t.Errorf("%s = %q", m.key, s)
			}
		case []int32:
			var s []int32
			for _, x := range got.([]any) {
				s = append(s, x.(int32))
			}
			if !slices.Equal(s, want) {
				t.Errorf("%s = %v", m.key, s)
			}
		default:
			if got != want {
				t.Errorf("%s = %#v; want %#v", m.key, got, want)
			}
		}
		if f.keys[i] != m.key {
			t.Errorf("key %d is %s; want %s", i, f.keys[i], m.key)
		}
	}
	if f.tensors[1].offset != ggufAlignment || f.dataStart%ggufAlignment != 0 {
		t.Errorf("second tensor at %d, data at %d; want aligned", f.tensors[1].offset, f.dataStart)
	}
	if h, _ := f.floats("h"); !slices.Equal(h, []float32{1, -2, 0.5}) {
		t.Errorf("h = %v", h)
	}
	if x, _ := f.floats("f"); !slices.Equal(x, []float32{1, 2, 3, 4}) || !slices.Equal(f.tensors[1].dims, []uint64{2, 2}) {
		t.Errorf("f = %v dims %v", x, f.tensors[1].dims)
	}
	if int64(buf.Len()) != f.dataStart+2*ggufAlignment { // the last tensor padded too, as ggml writes
		t.Errorf("file is %d bytes; want data start %d + 2×32", buf.Len(), f.dataStart)
	}

	// A tensor writing the wrong amount, and a failing writer, are errors.
	short := tensorInfo{name: "s", dims: []int64{4}, typ: ggmlF32, data: func(w io.Writer) error {
		_, err := w.Write(make([]byte, 12))
		return err
	}}
	if err := writeGGUF(io.Discard, nil, []tensorInfo{short}); err == nil {
		t.Error("a tensor short of its size was written")
	}
	if err := writeGGUF(failWriter{}, meta, []tensorInfo{f16s, f32s}); !errors.Is(err, errFail) {
		t.Errorf("failing writer: %v", err)
	}
}

var errFail = errors.New("disk full")

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errFail }
