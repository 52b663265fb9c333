// Package tinyhf writes tinygguf's tiny random-weight llama model as a
// Hugging Face model directory, the form vLLM loads: config.json,
// model.safetensors, tokenizer.json, tokenizer_config.json (with the
// ChatML chat template) and generation_config.json. Nothing is downloaded
// and no Python runs: the weights are tinygguf's, drawn from its seeded
// generator, so the same Config gives the same files every time.
//
// It is tinygguf's model in another container, and keeps its promise:
// whatever the prompt and sampler, the model emits only plain lowercase
// words, each one token after a space, never an end-of-generation token,
// so every generation runs to its token limit (finish reason "length").
// The construction (a marker dimension no layer writes, read by the output
// layer to forbid every other token) holds in Hugging Face's llama as in
// llama.cpp's: the same RMS norms, residual stream and projections.
//
// vLLM's CPU attention takes head sizes 32, 64, 80, 96, 112, 128, 160,
// 192, 224, 256 and 512 only (vLLM 0.32.0); tinygguf.Default's is 64.
package tinyhf

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/tokentap/tokentap/internal/test/tinygguf"
)

// Files are the files Write makes, in the order it makes them.
var Files = []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"}

// Write writes the model c describes into dir (made if missing), one file
// of Files each, and returns the first error.
func Write(dir string, c tinygguf.Config) error {
	ws, err := c.Weights()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tk := c.Tokenizer()
	for _, f := range []struct {
		name string
		v    any
	}{
		{"config.json", config(c, tk)},
		{"generation_config.json", map[string]any{
			"bos_token_id": tk.Specials.EndOfText, "eos_token_id": tk.Specials.IMEnd, "pad_token_id": tk.Specials.EndOfText,
		}},
		{"tokenizer.json", tokenizerJSON(tk)},
		{"tokenizer_config.json", map[string]any{
			"tokenizer_class":              "PreTrainedTokenizerFast",
			"bos_token":                    tinygguf.EndOfText,
			"eos_token":                    tinygguf.IMEnd,
			"pad_token":                    tinygguf.EndOfText,
			"add_bos_token":                false,
			"add_eos_token":                false,
			"clean_up_tokenization_spaces": false,
			"model_max_length":             c.Context,
			"chat_template":                tinygguf.ChatTemplate,
		}},
	} {
		b, err := json.MarshalIndent(f.v, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, f.name), append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return writeFile(filepath.Join(dir, "model.safetensors"), func(w io.Writer) error { return WriteSafetensors(w, ws) })
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// config is config.json: a LlamaForCausalLM of c's shape, float16, with
// untied embeddings (the output layer carries the marker construction).
func config(c tinygguf.Config, tk tinygguf.Tokenizer) map[string]any {
	return map[string]any{
		"architectures":           []string{"LlamaForCausalLM"},
		"model_type":              "llama",
		"hidden_size":             c.Embedding,
		"intermediate_size":       c.FFN,
		"num_hidden_layers":       c.Layers,
		"num_attention_heads":     c.Heads,
		"num_key_value_heads":     c.KVHeads,
		"head_dim":                c.HeadDim(),
		"hidden_act":              "silu",
		"max_position_embeddings": c.Context,
		"rms_norm_eps":            1e-5,
		"rope_theta":              10000.0,
		"rope_parameters":         map[string]any{"rope_theta": 10000.0, "rope_type": "default"},
		"vocab_size":              len(tk.Tokens),
		"tie_word_embeddings":     false,
		"attention_bias":          false,
		"mlp_bias":                false,
		"bos_token_id":            tk.Specials.EndOfText,
		"eos_token_id":            tk.Specials.IMEnd,
		"pad_token_id":            tk.Specials.EndOfText,
		"torch_dtype":             "float16",
		"dtype":                   "float16",
	}
}

// tokenizerJSON is tokenizer.json for Hugging Face's tokenizers: GPT-2's
// byte-level BPE (the same pre-tokenizer split as llama.cpp's llama-bpe
// for words), tinygguf's vocabulary and merges, the specials as added
// tokens, and no BOS added to a prompt.
func tokenizerJSON(tk tinygguf.Tokenizer) map[string]any {
	vocab := make(map[string]int, len(tk.Tokens))
	var added []map[string]any
	for id, t := range tk.Tokens {
		vocab[t] = id
		if tk.Control[id] {
			added = append(added, map[string]any{"id": id, "content": t, "single_word": false, "lstrip": false,
				"rstrip": false, "normalized": false, "special": true})
		}
	}
	byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}
	return map[string]any{
		"version":        "1.0",
		"truncation":     nil,
		"padding":        nil,
		"added_tokens":   added,
		"normalizer":     nil,
		"pre_tokenizer":  byteLevel,
		"post_processor": nil,
		"decoder":        byteLevel,
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil, "end_of_word_suffix": nil,
			"fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": vocab, "merges": tk.Merges,
		},
	}
}

// hfName is the Hugging Face llama name of a tinygguf tensor.
func hfName(gguf string) (string, error) {
	switch gguf {
	case "token_embd.weight":
		return "model.embed_tokens.weight", nil
	case "output_norm.weight":
		return "model.norm.weight", nil
	case "output.weight":
		return "lm_head.weight", nil
	}
	var layer int
	var part string
	if _, err := fmt.Sscanf(gguf, "blk.%d.%s", &layer, &part); err != nil {
		return "", fmt.Errorf("tinyhf: no Hugging Face name for tensor %q", gguf)
	}
	hf, ok := map[string]string{
		"attn_norm.weight":   "input_layernorm.weight",
		"attn_q.weight":      "self_attn.q_proj.weight",
		"attn_k.weight":      "self_attn.k_proj.weight",
		"attn_v.weight":      "self_attn.v_proj.weight",
		"attn_output.weight": "self_attn.o_proj.weight",
		"ffn_norm.weight":    "post_attention_layernorm.weight",
		"ffn_gate.weight":    "mlp.gate_proj.weight",
		"ffn_up.weight":      "mlp.up_proj.weight",
		"ffn_down.weight":    "mlp.down_proj.weight",
	}[part]
	if !ok {
		return "", fmt.Errorf("tinyhf: no Hugging Face name for tensor %q", gguf)
	}
	return "model.layers." + strconv.Itoa(layer) + "." + hf, nil
}

// Entry is one tensor in a safetensors header.
type Entry struct {
	DType       string   `json:"dtype"`
	Shape       []int64  `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// WriteSafetensors writes ws as a safetensors file under their Hugging
// Face names: an 8-byte little-endian header length, the JSON header
// (each tensor's dtype, shape slowest dimension first, and byte range in
// the data), padded with spaces to a multiple of 8, then the data. A
// tinygguf matrix of {columns, rows} is the [rows, columns] weight
// Hugging Face's linear layers hold, in the same row-major bytes.
func WriteSafetensors(w io.Writer, ws []tinygguf.Weights) error {
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var off int64
	names := make([]string, len(ws))
	for i, t := range ws {
		name, err := hfName(t.Name)
		if err != nil {
			return err
		}
		names[i] = name
		shape := make([]int64, len(t.Dims))
		for j, d := range t.Dims {
			shape[len(t.Dims)-1-j] = d
		}
		dt := "F32"
		if t.Float16 {
			dt = "F16"
		}
		header[name] = Entry{DType: dt, Shape: shape, DataOffsets: [2]int64{off, off + t.Bytes}}
		off += t.Bytes
	}
	if len(names) != len(header)-1 {
		sort.Strings(names)
		return fmt.Errorf("tinyhf: two tensors share a name among %v", names)
	}
	h, err := json.Marshal(header)
	if err != nil {
		return err
	}
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	if err := binary.Write(w, binary.LittleEndian, uint64(len(h))); err != nil {
		return err
	}
	if _, err := w.Write(h); err != nil {
		return err
	}
	for _, t := range ws {
		cw := &countWriter{w: w}
		if err := t.Write(cw); err != nil {
			return err
		}
		if cw.n != t.Bytes {
			return fmt.Errorf("tinyhf: tensor %s wrote %d bytes, want %d", t.Name, cw.n, t.Bytes)
		}
	}
	return nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
