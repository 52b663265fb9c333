package tinyhf

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/tokentap/tokentap/internal/test/tinygguf"
)

// readHeader reads a safetensors file's header back.
func readHeader(t *testing.T, b []byte) (map[string]Entry, int64) {
	t.Helper()
	if len(b) < 8 {
		t.Fatalf("%d bytes", len(b))
	}
	n := int64(binary.LittleEndian.Uint64(b))
	if n%8 != 0 || 8+n > int64(len(b)) {
		t.Fatalf("header length %d of a %d-byte file", n, len(b))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &raw); err != nil {
		t.Fatal(err)
	}
	es := map[string]Entry{}
	for k, v := range raw {
		if k == "__metadata__" {
			continue
		}
		var e Entry
		if err := json.Unmarshal(v, &e); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		es[k] = e
	}
	return es, 8 + n
}

func TestSafetensorsHeader(t *testing.T) {
	c := tinygguf.Default()
	dir := t.TempDir()
	if err := Write(dir, c); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	es, start := readHeader(t, b)
	if want := 3 + 9*c.Layers; len(es) != want {
		t.Fatalf("%d tensors, want %d", len(es), want)
	}
	nv, n, hd := int64(c.VocabSize()), int64(c.Embedding), int64(c.HeadDim())
	for name, shape := range map[string][]int64{
		"model.embed_tokens.weight":                      {nv, n},
		"lm_head.weight":                                 {nv, n},
		"model.norm.weight":                              {n},
		"model.layers.0.self_attn.q_proj.weight":         {int64(c.Heads) * hd, n},
		"model.layers.3.self_attn.k_proj.weight":         {int64(c.KVHeads) * hd, n},
		"model.layers.1.self_attn.o_proj.weight":         {n, int64(c.Heads) * hd},
		"model.layers.2.mlp.down_proj.weight":            {n, int64(c.FFN)},
		"model.layers.2.mlp.up_proj.weight":              {int64(c.FFN), n},
		"model.layers.0.post_attention_layernorm.weight": {n},
	} {
		e, ok := es[name]
		if !ok || len(e.Shape) != len(shape) {
			t.Errorf("%s: %+v, want shape %v", name, e, shape)
			continue
		}
		for i := range shape {
			if e.Shape[i] != shape[i] {
				t.Errorf("%s: shape %v, want %v", name, e.Shape, shape)
			}
		}
	}
	// The ranges tile the data exactly, each the size its dtype and
	// shape make, and the data is all there.
	var total int64
	for name, e := range es {
		elems := int64(1)
		for _, d := range e.Shape {
			elems *= d
		}
		size := map[string]int64{"F16": 2, "F32": 4}[e.DType]
		if size == 0 || e.DataOffsets[1]-e.DataOffsets[0] != size*elems {
			t.Errorf("%s: %+v", name, e)
		}
		total += e.DataOffsets[1] - e.DataOffsets[0]
	}
	if total != c.WeightBytes() || start+total != int64(len(b)) {
		t.Errorf("data %d bytes, tinygguf says %d; file %d = header %d + %d", total, c.WeightBytes(), len(b), start, total)
	}
	// The embedding's marker (last dimension) is 16 in every row:
	// float16 0x4c00, little-endian.
	e := es["model.embed_tokens.weight"]
	for row := int64(0); row < nv; row += 97 {
		at := start + e.DataOffsets[0] + 2*(row*n+n-1)
		if got := binary.LittleEndian.Uint16(b[at:]); got != 0x4c00 {
			t.Fatalf("embedding row %d marker %#x, want 16 (0x4c00)", row, got)
		}
	}
}

// The same Config writes the same bytes, and the files vLLM reads say
// the shape and the tokenizer tinygguf has.
func TestDeterministicAndConfig(t *testing.T) {
	c := tinygguf.Default()
	a, b := t.TempDir(), t.TempDir()
	if err := Write(a, c); err != nil {
		t.Fatal(err)
	}
	if err := Write(b, c); err != nil {
		t.Fatal(err)
	}
	for _, f := range Files {
		x, _ := os.ReadFile(filepath.Join(a, f))
		y, _ := os.ReadFile(filepath.Join(b, f))
		if len(x) == 0 || !bytes.Equal(x, y) {
			t.Errorf("%s differs between two writes (%d, %d bytes)", f, len(x), len(y))
		}
	}
	var cfg struct {
		HeadDim   int    `json:"head_dim"`
		Vocab     int    `json:"vocab_size"`
		EOS       int    `json:"eos_token_id"`
		Model     string `json:"model_type"`
		MaxLength int    `json:"max_position_embeddings"`
	}
	raw, _ := os.ReadFile(filepath.Join(a, "config.json"))
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.HeadDim != 64 || cfg.Vocab != c.VocabSize() || cfg.EOS != c.Specials().IMEnd || cfg.Model != "llama" || cfg.MaxLength != c.Context {
		t.Errorf("config.json %+v", cfg)
	}
	var tok struct {
		Model struct {
			Vocab  map[string]int `json:"vocab"`
			Merges []string       `json:"merges"`
		} `json:"model"`
		Added []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
		} `json:"added_tokens"`
	}
	raw, _ = os.ReadFile(filepath.Join(a, "tokenizer.json"))
	if err := json.Unmarshal(raw, &tok); err != nil {
		t.Fatal(err)
	}
	if len(tok.Model.Vocab) != c.VocabSize() || tok.Model.Vocab["Ġthe"] == 0 || len(tok.Added) != 3 ||
		tok.Added[2].Content != tinygguf.IMEnd || tok.Added[2].ID != c.Specials().IMEnd {
		t.Errorf("tokenizer.json: %d tokens, Ġthe=%d, added %+v", len(tok.Model.Vocab), tok.Model.Vocab["Ġthe"], tok.Added)
	}
}

// A config whose heads vLLM's CPU attention cannot run is still written
// (the engine, not the writer, has the list), but a shape tinygguf
// refuses is refused here too.
func TestRefusesBadShape(t *testing.T) {
	c := tinygguf.Default()
	c.Heads = 3
	if err := Write(t.TempDir(), c); err == nil {
		t.Error("3 heads of a 256 embedding: no error")
	}
}
