// Package tinygguf writes a tiny llama-architecture model in GGUF, the file
// format llama.cpp and Ollama load, for tests against real inference
// engines. Nothing is downloaded or trained: the weights are random, drawn
// from a seeded generator of our own, so the same Config gives the same
// bytes every time, on every platform.
//
// The model is useless as a language model and made to be harmless as one:
// whatever the prompt and sampler, it emits only plain lowercase words, each
// with a leading space (" the", " water"), drawn from Config.Words. It
// never emits an end-of-generation token, a special token, punctuation or a
// lone byte, so every answer is printable ASCII that no tool-call,
// reasoning or JSON parser takes for markup, and every generation runs to
// its token limit (finish reason "length"). That holds for any sampler
// settings, but a request can override it: a grammar or JSON schema
// constrains the sampler to the tokens it allows, and a logit bias moves
// logits. How: every token's embedding holds markerValue on the
// last hidden dimension (the marker), which no layer writes to (those rows
// of attn_output and ffn_down are zero), so after the final RMS norm the
// marker is positive for any input; each token the model must not emit
// has output weight -forbidWeight there, the others 0, which puts the
// forbidden logits about 3500 below the allowed ones, and provably more
// than 300 below for any input (the tests derive that bound from Default's
// written weights; other shapes keep the construction, and the weight
// scales, but their margin is not proved).
//
// The tokenizer is byte-level BPE (tokenizer.ggml.model "gpt2", the
// llama-bpe pre-tokenizer, which llama.cpp and Ollama split text by alike):
// the 256 bytes, so any text tokenizes, and merges that make " word" one
// token for each listed word. Any other " word" costs one token for the
// longest prefix it shares with a listed word (at least the space) plus one
// per remaining letter, and a word with no space before it, such as a
// message's first, one token per letter. The chat template is ChatML.
package tinygguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"strings"
)

// Config is the model's shape. Default gives the one tokentap's live tests
// use; any field may be changed, and Write checks the result.
type Config struct {
	// Embedding is the hidden size (llama.embedding_length).
	Embedding int
	// Layers is the number of transformer blocks (llama.block_count).
	Layers int
	// Heads is the number of attention (query) heads.
	Heads int
	// KVHeads is the number of key/value heads; fewer than Heads is
	// grouped-query attention. It must divide Heads.
	KVHeads int
	// FFN is the feed-forward inner size (llama.feed_forward_length).
	FFN int
	// Context is the trained context length the file declares
	// (llama.context_length), which engines take as the model's limit and
	// their default context size.
	Context int
	// Words are the vocabulary's words: lowercase a-z, each at most 32
	// letters, none twice. " "+word is one token for each, and these
	// tokens are all the model emits. Nil means the built-in list of 935
	// common English words.
	Words []string
	// Seed picks the random weights.
	Seed uint64
}

// Default returns the live tests' model: 256 wide, 4 layers, 4 query heads
// sharing 2 key/value heads of 64, feed-forward 768, a 65536-token trained
// context and the built-in words: 2707 tokens, 4.5M weights, a 9.2 MB
// file.
func Default() Config {
	return Config{
		Embedding: 256,
		Layers:    4,
		Heads:     4,
		KVHeads:   2,
		FFN:       768,
		Context:   65536,
		Seed:      1,
	}
}

// Name is the model's general.name.
const Name = "tokentap-tiny"

// ChatTemplate is the ChatML template written as tokenizer.chat_template,
// in the Jinja dialect llama.cpp's server renders: each message as
// "<|im_start|>role\ncontent<|im_end|>\n", then "<|im_start|>assistant\n"
// when a generation prompt is asked for.
const ChatTemplate = "{%- for message in messages -%}" +
	"{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}" +
	"{%- endfor -%}" +
	"{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"

// OllamaTemplate is ChatTemplate in Ollama's Go-template dialect, for the
// TEMPLATE line of a Modelfile (Ollama does not run the Jinja template).
const OllamaTemplate = "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n"

// The marker construction, and the hyperparameters written to the file.
const (
	markerValue  = 16   // the marker dimension of every embedding
	forbidWeight = 256  // -output weight on the marker for forbidden tokens
	rmsEps       = 1e-5 // llama.attention.layer_norm_rms_epsilon
	ropeBase     = 10000
)

// scaled is a weight distribution: k·2^-shift for k uniform in
// [-span, span], values float16 holds exactly.
type scaled struct {
	span  uint64
	shift int
}

// The weights' distributions, small enough that the layers' outputs stay
// far below what the marker construction tolerates.
var (
	embedScale  = scaled{1024, 10} // ±1
	qkvScale    = scaled{1024, 14} // ±1/16
	outScale    = scaled{1024, 17} // ±1/128
	gateUpScale = scaled{1024, 14} // ±1/16
	downScale   = scaled{1024, 18} // ±1/256
	logitScale  = scaled{1024, 11} // ±1/2
)

// HeadDim is the size of one attention head, Embedding/Heads (0 without
// heads).
func (c Config) HeadDim() int {
	if c.Heads < 1 {
		return 0
	}
	return c.Embedding / c.Heads
}

// WordList returns the vocabulary's words: c.Words, or the built-in list.
func (c Config) WordList() []string {
	if c.Words != nil {
		return append([]string(nil), c.Words...)
	}
	return append([]string(nil), defaultWords...)
}

// VocabSize is the number of tokens: the 256 bytes, the prefixes of the
// words, and the three special tokens.
func (c Config) VocabSize() int { return len(buildVocab(c.WordList()).tokens) }

// SpecialIDs are the ids of the special tokens. EndOfText is also the BOS
// and padding token (never added to prompts); IMEnd is EOS and EOT.
type SpecialIDs struct {
	EndOfText, IMStart, IMEnd int
}

// Specials returns the ids of the special tokens, the vocabulary's last
// three.
func (c Config) Specials() SpecialIDs {
	v := buildVocab(c.WordList())
	return SpecialIDs{EndOfText: v.endOfText, IMStart: v.imStart, IMEnd: v.imEnd}
}

// Params is the number of weights in the file.
func (c Config) Params() int64 {
	var n int64
	for _, t := range c.tensors(buildVocab(c.WordList())) {
		n += t.elems()
	}
	return n
}

// WeightBytes is the size of all the tensors' data (float16 matrices,
// float32 norm gains), without the file's metadata and padding.
func (c Config) WeightBytes() int64 {
	var n int64
	for _, t := range c.tensors(buildVocab(c.WordList())) {
		n += t.bytes()
	}
	return n
}

// KVBytesPerToken is what one token of context costs in an engine's KV
// cache at float16 (llama.cpp's and Ollama's default): a key and a value
// of KVHeads·HeadDim halves in every layer.
func (c Config) KVBytesPerToken() int { return 2 * c.Layers * c.KVHeads * c.HeadDim() * 2 }

// Text returns n words from the word list, picked at random by seed, each
// after a space: " word word …". It tokenizes to exactly n tokens, also
// after a newline as in a chat template, so a prompt of a known length is
// Text of that length. As the one user message of a chat it makes n+19
// prompt tokens: ChatML adds 19, as role names cost a token per letter.
func (c Config) Text(n int, seed uint64) string {
	words := c.WordList()
	if len(words) == 0 {
		return ""
	}
	r := newRNG(seed, "text")
	var b strings.Builder
	for range n {
		b.WriteByte(' ')
		b.WriteString(words[r.next()%uint64(len(words))])
	}
	return b.String()
}

// check reports what makes c no model Write can make.
func (c Config) check() error {
	switch {
	case c.Embedding < 2 || c.Layers < 1 || c.Heads < 1 || c.KVHeads < 1 || c.FFN < 1:
		return fmt.Errorf("tinygguf: sizes must be positive, embedding at least 2: %+v", c)
	case c.Embedding%c.Heads != 0:
		return fmt.Errorf("tinygguf: %d heads do not divide embedding %d", c.Heads, c.Embedding)
	case c.Heads%c.KVHeads != 0:
		return fmt.Errorf("tinygguf: %d KV heads do not divide %d heads", c.KVHeads, c.Heads)
	case c.HeadDim()%2 != 0:
		return fmt.Errorf("tinygguf: head size %d is odd; RoPE rotates pairs", c.HeadDim())
	case c.Context < 1 || c.Context > math.MaxInt32:
		return fmt.Errorf("tinygguf: context %d out of range", c.Context)
	case max(c.Embedding, c.FFN, c.Layers) > 1<<16:
		return fmt.Errorf("tinygguf: sizes too large for a tiny model: %+v", c)
	}
	return checkWords(c.WordList())
}

// Write writes the model c describes to w as a GGUF file.
func Write(w io.Writer, c Config) error {
	if err := c.check(); err != nil {
		return err
	}
	v := buildVocab(c.WordList())
	bw := bufio.NewWriterSize(w, 1<<20)
	if err := writeGGUF(bw, c.metadata(v), c.tensors(v)); err != nil {
		return err
	}
	return bw.Flush()
}

func (c Config) metadata(v vocab) []kv {
	u := func(n int) uint32 { return uint32(n) }
	return []kv{
		{"general.architecture", "llama"},
		{"general.name", Name},
		{"general.file_type", uint32(1)}, // mostly F16
		{"llama.vocab_size", u(len(v.tokens))},
		{"llama.context_length", u(c.Context)},
		{"llama.embedding_length", u(c.Embedding)},
		{"llama.block_count", u(c.Layers)},
		{"llama.feed_forward_length", u(c.FFN)},
		{"llama.attention.head_count", u(c.Heads)},
		{"llama.attention.head_count_kv", u(c.KVHeads)},
		{"llama.attention.layer_norm_rms_epsilon", float32(rmsEps)},
		{"llama.rope.dimension_count", u(c.HeadDim())},
		{"llama.rope.freq_base", float32(ropeBase)},
		{"tokenizer.ggml.model", "gpt2"},
		{"tokenizer.ggml.pre", "llama-bpe"},
		{"tokenizer.ggml.tokens", v.tokens},
		{"tokenizer.ggml.token_type", v.types},
		{"tokenizer.ggml.merges", v.merges},
		{"tokenizer.ggml.bos_token_id", u(v.endOfText)},
		{"tokenizer.ggml.eos_token_id", u(v.imEnd)},
		{"tokenizer.ggml.eot_token_id", u(v.imEnd)},
		{"tokenizer.ggml.padding_token_id", u(v.endOfText)},
		{"tokenizer.ggml.add_bos_token", false},
		{"tokenizer.ggml.add_eos_token", false},
		{"tokenizer.chat_template", ChatTemplate},
	}
}

// tensors lists the model's tensors in file order with the functions that
// write them.
func (c Config) tensors(v vocab) []tensorInfo {
	n, hd, ff, nv := int64(c.Embedding), int64(c.HeadDim()), int64(c.FFN), int64(len(v.tokens))
	q, kvw := int64(c.Heads)*hd, int64(c.KVHeads)*hd
	marker := n - 1
	seed := c.Seed

	// matrix is an F16 tensor of rows×cols (ggml dims {cols, rows}) whose
	// element (r, k) is value(rng, r, k).
	matrix := func(name string, cols, rows int64, value func(g *rng, r, k int64) float32) tensorInfo {
		return tensorInfo{name: name, dims: []int64{cols, rows}, typ: ggmlF16, data: func(w io.Writer) error {
			g := newRNG(seed, name)
			buf := make([]byte, 2*cols)
			for r := range rows {
				for k := range cols {
					binary.LittleEndian.PutUint16(buf[2*k:], f16(value(g, r, k)))
				}
				if _, err := w.Write(buf); err != nil {
					return err
				}
			}
			return nil
		}}
	}
	random := func(s scaled) func(g *rng, r, k int64) float32 {
		return func(g *rng, _, _ int64) float32 { return g.scaled(s) }
	}
	// markerless is random but writes nothing to the marker: the row
	// producing that output dimension is zero.
	markerless := func(s scaled) func(g *rng, r, k int64) float32 {
		return func(g *rng, r, _ int64) float32 {
			x := g.scaled(s) // drawn either way: one stream for all rows
			if r == marker {
				return 0
			}
			return x
		}
	}
	ones := func(name string) tensorInfo {
		return tensorInfo{name: name, dims: []int64{n}, typ: ggmlF32, data: func(w io.Writer) error {
			buf := make([]byte, 4*n)
			for k := range n {
				binary.LittleEndian.PutUint32(buf[4*k:], math.Float32bits(1))
			}
			_, err := w.Write(buf)
			return err
		}}
	}

	ts := []tensorInfo{matrix("token_embd.weight", n, nv, func(g *rng, _, k int64) float32 {
		x := g.scaled(embedScale)
		if k == marker {
			return markerValue
		}
		return x
	})}
	for l := range c.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		ts = append(ts,
			ones(p+"attn_norm.weight"),
			matrix(p+"attn_q.weight", n, q, random(qkvScale)),
			matrix(p+"attn_k.weight", n, kvw, random(qkvScale)),
			matrix(p+"attn_v.weight", n, kvw, random(qkvScale)),
			matrix(p+"attn_output.weight", q, n, markerless(outScale)),
			ones(p+"ffn_norm.weight"),
			matrix(p+"ffn_gate.weight", n, ff, random(gateUpScale)),
			matrix(p+"ffn_up.weight", n, ff, random(gateUpScale)),
			matrix(p+"ffn_down.weight", ff, n, markerless(downScale)),
		)
	}
	ts = append(ts,
		ones("output_norm.weight"),
		matrix("output.weight", n, nv, func(g *rng, r, k int64) float32 {
			x := g.scaled(logitScale)
			switch {
			case !v.emit[r] && k == marker:
				return -forbidWeight
			case !v.emit[r] || k == marker:
				return 0
			}
			return x
		}),
	)
	return ts
}

// rng is SplitMix64: tiny, and fixed here so the weights never change
// with the Go release.
type rng struct{ s uint64 }

// newRNG starts the stream for one tensor (or other use) of one seed, so
// changing one tensor's size leaves the others' weights alone.
func newRNG(seed uint64, name string) *rng {
	h := fnv.New64a()
	h.Write([]byte(name))
	return &rng{s: seed ^ h.Sum64()}
}

func (g *rng) next() uint64 {
	g.s += 0x9e3779b97f4a7c15
	z := g.s
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// scaled draws k·2^-shift, k uniform in [-span, span].
func (g *rng) scaled(s scaled) float32 {
	k := int64(g.next()%(2*s.span+1)) - int64(s.span)
	return float32(k) / float32(uint64(1)<<s.shift)
}
