package tinygguf

import (
	"fmt"
	"strings"
)

// Token types (llama_token_type) as tokenizer.ggml.token_type stores them.
// Byte-level BPE vocabularies mark their byte tokens normal, not byte.
const (
	tokenNormal  = 1
	tokenControl = 3
)

// The special tokens, ChatML's plus the end-of-text, which llama.cpp and
// Ollama recognise by these texts.
const (
	endOfText = "<|endoftext|>"
	imStart   = "<|im_start|>"
	imEnd     = "<|im_end|>"
)

// byteRunes is GPT-2's byte-level mapping: each byte as the printable rune
// that stands for it in token and merge strings. Printable Latin-1 bytes
// stand for themselves; the others (controls, space, DEL, NBSP, soft
// hyphen) take the runes from U+0100 on, in byte order, so space is 'Ġ'.
var byteRunes = func() [256]rune {
	var m [256]rune
	next := rune(256)
	for b := 0; b < 256; b++ {
		if ('!' <= b && b <= '~') || (0xa1 <= b && b <= 0xac) || (0xae <= b && b <= 0xff) {
			m[b] = rune(b)
		} else {
			m[b] = next
			next++
		}
	}
	return m
}()

// encodeBytes spells s in byte runes, as BPE token texts are stored.
func encodeBytes(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteRune(byteRunes[s[i]])
	}
	return b.String()
}

// vocab is the tokenizer: texts and types by id, the merges in rank
// order, and which ids the model may emit.
type vocab struct {
	tokens []string // byte-rune texts
	types  []int32
	merges []string
	// emit[id] is true for the tokens the output layer lets through:
	// one per word, " word".
	emit []bool
	// Ids of the special tokens.
	endOfText, imStart, imEnd int
}

// checkWords reports whether words is a list buildVocab takes: non-empty,
// each word 1 to 32 lowercase ASCII letters, none twice.
func checkWords(words []string) error {
	if len(words) == 0 {
		return fmt.Errorf("tinygguf: no words")
	}
	seen := make(map[string]bool, len(words))
	for _, w := range words {
		if len(w) == 0 || len(w) > 32 {
			return fmt.Errorf("tinygguf: word %q: want 1 to 32 letters", w)
		}
		for i := 0; i < len(w); i++ {
			if w[i] < 'a' || w[i] > 'z' {
				return fmt.Errorf("tinygguf: word %q: want lowercase a-z only", w)
			}
		}
		if seen[w] {
			return fmt.Errorf("tinygguf: word %q twice", w)
		}
		seen[w] = true
	}
	return nil
}

// buildVocab makes the byte-level BPE vocabulary: ids 0-255 are the bytes
// (id = byte value), so any text tokenizes; then, for each word in order,
// every prefix of " word" not made yet, each with the merge that builds it
// from the prefix one shorter and its last letter; then the specials.
//
// Every merge's left side starts with 'Ġ' (space), so in a pre-tokenized
// piece " word" the only mergeable pair is always the one holding the
// space, and BPE grows the word from the left: a listed word becomes one
// token, and any other word its longest listed prefix plus one token per
// remaining letter. Words without a leading space stay single bytes.
func buildVocab(words []string) vocab {
	var v vocab
	for b := 0; b < 256; b++ {
		v.tokens = append(v.tokens, string(byteRunes[b]))
		v.types = append(v.types, tokenNormal)
	}
	ids := make(map[string]int)
	space := string(byteRunes[' '])
	ids[space] = ' '
	var wordIDs []int
	for _, w := range words {
		prefix := space
		for i := 0; i < len(w); i++ {
			next := prefix + w[i:i+1]
			if _, ok := ids[next]; !ok {
				ids[next] = len(v.tokens)
				v.tokens = append(v.tokens, next)
				v.types = append(v.types, tokenNormal)
				v.merges = append(v.merges, prefix+" "+w[i:i+1])
			}
			prefix = next
		}
		wordIDs = append(wordIDs, ids[prefix])
	}
	v.endOfText = len(v.tokens)
	v.imStart = v.endOfText + 1
	v.imEnd = v.endOfText + 2
	v.tokens = append(v.tokens, endOfText, imStart, imEnd)
	v.types = append(v.types, tokenControl, tokenControl, tokenControl)
	v.emit = make([]bool, len(v.tokens))
	for _, id := range wordIDs {
		v.emit[id] = true
	}
	return v
}
