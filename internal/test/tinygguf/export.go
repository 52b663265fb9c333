package tinygguf

import "io"

// Tokenizer is the model's byte-level BPE vocabulary, for writers of the
// same model in other formats (internal/test/tinyhf): token texts by id in
// GPT-2's byte runes (space is 'Ġ'), the merges in rank order ("Ġ w"),
// which ids the output layer lets through, and the special tokens' ids
// (their texts are EndOfText, IMStart and IMEnd).
type Tokenizer struct {
	Tokens   []string
	Control  []bool // a special token, not a BPE piece
	Merges   []string
	Emit     []bool
	Specials SpecialIDs
}

// The special tokens' texts.
const (
	EndOfText = endOfText
	IMStart   = imStart
	IMEnd     = imEnd
)

// Tokenizer returns c's vocabulary.
func (c Config) Tokenizer() Tokenizer {
	v := buildVocab(c.WordList())
	ctl := make([]bool, len(v.tokens))
	for i, t := range v.types {
		ctl[i] = t == tokenControl
	}
	return Tokenizer{Tokens: v.tokens, Control: ctl, Merges: v.merges, Emit: v.emit,
		Specials: SpecialIDs{EndOfText: v.endOfText, IMStart: v.imStart, IMEnd: v.imEnd}}
}

// Weights is one of the model's weight tensors, as Write stores it: its
// GGUF name, its dimensions fastest first (ggml's order: a matrix is
// {columns, rows}), float16 or float32, and a function that writes its
// data, row-major little-endian, the same bytes Write writes.
type Weights struct {
	Name    string
	Dims    []int64
	Float16 bool
	Bytes   int64
	Write   func(w io.Writer) error
}

// Weights lists c's tensors in file order: the weights of the model every
// format tokentap writes holds.
func (c Config) Weights() ([]Weights, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	var ts []Weights
	for _, t := range c.tensors(buildVocab(c.WordList())) {
		ts = append(ts, Weights{Name: t.name, Dims: t.dims, Float16: t.typ == ggmlF16, Bytes: t.bytes(), Write: t.data})
	}
	return ts, nil
}
