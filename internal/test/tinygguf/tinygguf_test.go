package tinygguf

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
)

var defaultOnce struct {
	sync.Once
	b   []byte
	f   *ggufFile
	err error
}

// defaultFile writes Default() once per test binary and reads it back.
func defaultFile(t *testing.T) *ggufFile {
	t.Helper()
	defaultOnce.Do(func() {
		var buf bytes.Buffer
		if defaultOnce.err = Write(&buf, Default()); defaultOnce.err != nil {
			return
		}
		defaultOnce.b = buf.Bytes()
		defaultOnce.f, defaultOnce.err = readGGUF(defaultOnce.b)
	})
	if defaultOnce.err != nil {
		t.Fatal(defaultOnce.err)
	}
	return defaultOnce.f
}

func sha(t *testing.T, c Config) string {
	t.Helper()
	h := sha256.New()
	if err := Write(h, c); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// defaultSHA256 pins Default()'s file: a change to it changes what the live
// tests measure, so it must be on purpose (update this and say why).
const defaultSHA256 = "da6c0893f02cdb2db7c05a3a103b98778dfdf7aac0e986f12f63580e72034ddd"

func TestDeterministic(t *testing.T) {
	a, b := sha(t, Default()), sha(t, Default())
	if a != b {
		t.Fatalf("two writes differ: %s, %s", a, b)
	}
	if a != defaultSHA256 {
		t.Errorf("Default() writes SHA-256 %s; pinned %s", a, defaultSHA256)
	}
	c := Default()
	c.Seed++
	if sha(t, c) == a {
		t.Error("another seed writes the same file")
	}
}

func TestReadBack(t *testing.T) {
	c := Default()
	f := defaultFile(t)
	if f.version != 3 {
		t.Errorf("version %d", f.version)
	}
	nv := c.VocabSize()
	want := map[string]any{
		"general.architecture":                   "llama",
		"general.name":                           Name,
		"llama.context_length":                   uint32(65536),
		"llama.embedding_length":                 uint32(256),
		"llama.block_count":                      uint32(4),
		"llama.feed_forward_length":              uint32(768),
		"llama.attention.head_count":             uint32(4),
		"llama.attention.head_count_kv":          uint32(2),
		"llama.rope.dimension_count":             uint32(64),
		"llama.vocab_size":                       uint32(nv),
		"llama.attention.layer_norm_rms_epsilon": float32(rmsEps),
		"tokenizer.ggml.model":                   "gpt2",
		"tokenizer.ggml.pre":                     "llama-bpe",
		"tokenizer.ggml.add_bos_token":           false,
		"tokenizer.ggml.bos_token_id":            uint32(c.Specials().EndOfText),
		"tokenizer.ggml.eos_token_id":            uint32(c.Specials().IMEnd),
		"tokenizer.ggml.eot_token_id":            uint32(c.Specials().IMEnd),
		"tokenizer.chat_template":                ChatTemplate,
	}
	for k, v := range want {
		if got := f.kv[k]; got != v {
			t.Errorf("%s = %#v; want %#v", k, got, v)
		}
	}
	if f.keys[0] != "general.architecture" {
		t.Errorf("first key %s; llama.cpp reads the architecture first", f.keys[0])
	}
	toks := f.kv["tokenizer.ggml.tokens"].([]any)
	types := f.kv["tokenizer.ggml.token_type"].([]any)
	merges := f.kv["tokenizer.ggml.merges"].([]any)
	if len(toks) != nv || len(types) != nv {
		t.Errorf("%d tokens, %d types; want %d", len(toks), len(types), nv)
	}
	// Every token but the bytes comes from one merge, bar the specials.
	if len(merges) != nv-256-3 {
		t.Errorf("%d merges; want %d", len(merges), nv-256-3)
	}
	sp := c.Specials()
	for id, name := range map[int]string{sp.EndOfText: "<|endoftext|>", sp.IMStart: "<|im_start|>", sp.IMEnd: "<|im_end|>"} {
		if toks[id] != name || types[id] != int32(tokenControl) {
			t.Errorf("token %d = %q type %v; want %q, control", id, toks[id], types[id], name)
		}
	}

	// The tensors: names, shapes (ggml order, row length first), types.
	n, q, kv, ff := uint64(256), uint64(256), uint64(128), uint64(768)
	type shape struct {
		dims []uint64
		typ  uint32
	}
	wantT := map[string]shape{
		"token_embd.weight":  {[]uint64{n, uint64(nv)}, ggmlF16},
		"output_norm.weight": {[]uint64{n}, ggmlF32},
		"output.weight":      {[]uint64{n, uint64(nv)}, ggmlF16},
	}
	for l := range 4 {
		p := fmt.Sprintf("blk.%d.", l)
		wantT[p+"attn_norm.weight"] = shape{[]uint64{n}, ggmlF32}
		wantT[p+"attn_q.weight"] = shape{[]uint64{n, q}, ggmlF16}
		wantT[p+"attn_k.weight"] = shape{[]uint64{n, kv}, ggmlF16}
		wantT[p+"attn_v.weight"] = shape{[]uint64{n, kv}, ggmlF16}
		wantT[p+"attn_output.weight"] = shape{[]uint64{q, n}, ggmlF16}
		wantT[p+"ffn_norm.weight"] = shape{[]uint64{n}, ggmlF32}
		wantT[p+"ffn_gate.weight"] = shape{[]uint64{n, ff}, ggmlF16}
		wantT[p+"ffn_up.weight"] = shape{[]uint64{n, ff}, ggmlF16}
		wantT[p+"ffn_down.weight"] = shape{[]uint64{ff, n}, ggmlF16}
	}
	if len(f.tensors) != len(wantT) {
		t.Errorf("%d tensors; want %d", len(f.tensors), len(wantT))
	}
	var weights int64
	var last uint64
	for i, tt := range f.tensors {
		w, ok := wantT[tt.name]
		if !ok {
			t.Errorf("unexpected tensor %s", tt.name)
			continue
		}
		if !slices.Equal(tt.dims, w.dims) || tt.typ != w.typ {
			t.Errorf("%s: dims %v type %d; want %v type %d", tt.name, tt.dims, tt.typ, w.dims, w.typ)
		}
		if i > 0 && tt.offset <= last {
			t.Errorf("%s at %d, not after the tensor before (%d)", tt.name, tt.offset, last)
		}
		last = tt.offset
		size := int64(tt.elems()) * 2
		if tt.typ == ggmlF32 {
			size *= 2
		}
		weights += size
	}
	if weights != c.WeightBytes() {
		t.Errorf("tensors hold %d bytes; WeightBytes says %d", weights, c.WeightBytes())
	}
	end := f.dataStart + int64(last) + int64(f.tensors[len(f.tensors)-1].elems()*2)
	if int64(len(f.data)) != padTo(end) {
		t.Errorf("file is %d bytes; its last tensor ends at %d", len(f.data), end)
	}
	t.Logf("%d tokens, %d merges, %d params, %d weight bytes, file %d bytes", nv, len(merges), c.Params(), weights, len(f.data))
}

func TestSizes(t *testing.T) {
	c := Default()
	if got := c.HeadDim(); got != 64 {
		t.Errorf("HeadDim = %d", got)
	}
	if got := c.KVBytesPerToken(); got != 2*4*2*64*2 {
		t.Errorf("KVBytesPerToken = %d", got)
	}
	if b := c.WeightBytes(); b < 5<<20 || b > 30<<20 {
		t.Errorf("WeightBytes = %d; want a few MB", b)
	}
	if c.KVHeads >= c.Heads {
		t.Error("Default is not grouped-query")
	}
	if c.Context < 32768 {
		t.Errorf("Context %d", c.Context)
	}
}

func TestCheck(t *testing.T) {
	bad := []func(*Config){
		func(c *Config) { c.Heads = 3 },
		func(c *Config) { c.KVHeads = 3 },
		func(c *Config) { c.Embedding = 0 },
		func(c *Config) { c.Embedding, c.Heads, c.KVHeads = 12, 4, 4 }, // head size 3
		func(c *Config) { c.Context = 0 },
		func(c *Config) { c.Layers = 0 },
		func(c *Config) { c.Words = []string{} },
		func(c *Config) { c.Words = []string{"a", "b", "a"} },
		func(c *Config) { c.Words = []string{"Capital"} },
		func(c *Config) { c.Words = []string{"tab\t"} },
		func(c *Config) { c.Words = []string{""} },
	}
	for i, f := range bad {
		c := Default()
		f(&c)
		if err := Write(io.Discard, c); err == nil {
			t.Errorf("case %d: Write took %+v", i, c)
		}
	}
	if err := checkWords(defaultWords); err != nil {
		t.Errorf("built-in words: %v", err)
	}
	c := Config{Embedding: 8, Layers: 1, Heads: 2, KVHeads: 1, FFN: 8, Context: 64, Words: []string{"b", "ab"}}
	if err := Write(io.Discard, c); err != nil {
		t.Errorf("small model: %v", err)
	}
}

// bpe tokenizes one pre-tokenized piece with the file's merges the way
// byte-level BPE does: repeatedly merge the adjacent pair of lowest rank.
func bpe(piece string, ranks map[[2]string]int, ids map[string]int) []int {
	var syms []string
	for _, r := range encodeBytes(piece) {
		syms = append(syms, string(r))
	}
	for {
		best, at := -1, -1
		for i := 0; i+1 < len(syms); i++ {
			if r, ok := ranks[[2]string{syms[i], syms[i+1]}]; ok && (best < 0 || r < best) {
				best, at = r, i
			}
		}
		if at < 0 {
			break
		}
		syms = append(syms[:at], append([]string{syms[at] + syms[at+1]}, syms[at+2:]...)...)
	}
	out := make([]int, len(syms))
	for i, s := range syms {
		out[i] = ids[s]
	}
	return out
}

func TestTokenizer(t *testing.T) {
	c := Default()
	f := defaultFile(t)
	ids := map[string]int{}
	var toks []string
	for i, x := range f.kv["tokenizer.ggml.tokens"].([]any) {
		s := x.(string)
		if _, dup := ids[s]; dup {
			t.Fatalf("token %q twice", s)
		}
		ids[s] = i
		toks = append(toks, s)
	}
	// All 256 bytes are tokens, byte b being id b.
	for b := range 256 {
		if ids[encodeBytes(string([]byte{byte(b)}))] != b {
			t.Errorf("byte %#x is not token %d", b, b)
		}
	}
	ranks := map[[2]string]int{}
	for i, x := range f.kv["tokenizer.ggml.merges"].([]any) {
		l, r, ok := strings.Cut(x.(string), " ")
		if !ok || l == "" || r == "" {
			t.Fatalf("merge %q", x)
		}
		if _, ok := ids[l+r]; !ok {
			t.Errorf("merge %q makes no token", x)
		}
		ranks[[2]string{l, r}] = i
	}
	v := buildVocab(c.WordList())
	for _, w := range c.WordList() {
		got := bpe(" "+w, ranks, ids)
		if len(got) != 1 || !v.emit[got[0]] {
			t.Errorf("%q tokenizes to %v", " "+w, got)
		}
	}
	for _, tt := range []struct {
		in   string
		want []string
	}{
		{" thee", []string{"Ġthe", "e"}},                   // longest listed prefix, then letters
		{" zebra", []string{"Ġ", "z", "e", "b", "r", "a"}}, // no listed word starts with z
		{"water", []string{"w", "a", "t", "e", "r"}},       // no space, no merges
	} {
		var got []string
		for _, id := range bpe(tt.in, ranks, ids) {
			got = append(got, toks[id])
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%q tokenizes to %q; want %q", tt.in, got, tt.want)
		}
	}
	text := c.Text(500, 9)
	n := 0
	for piece := range strings.SplitSeq(text[1:], " ") {
		n += len(bpe(" "+piece, ranks, ids))
	}
	if n != 500 {
		t.Errorf("Text(500) is %d tokens", n)
	}
	// One user message in ChatML, split as the engines' pre-tokenizer and
	// special-token parsing split it: the template's pieces cost 19.
	sp := c.Specials()
	overhead := 0
	for _, piece := range []string{imStart, "user", "\n", imEnd, "\n", imStart, "assistant", "\n"} {
		if id, ok := ids[piece]; ok && (id == sp.IMStart || id == sp.IMEnd) {
			overhead++
			continue
		}
		overhead += len(bpe(piece, ranks, ids))
	}
	if overhead != 19 {
		t.Errorf("ChatML adds %d tokens to a user message; Text's comment says 19", overhead)
	}
	if a, b := c.Text(50, 1), c.Text(50, 1); a != b || a == c.Text(50, 2) {
		t.Error("Text is not a function of its seed")
	}
}
