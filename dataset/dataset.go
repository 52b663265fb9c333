// Package dataset reads the prompts a user brings (matrix --dataset): JSONL
// of OpenAI chat requests ({"messages": [...]}) or completions ({"prompt":
// ...}), each with an optional max_tokens or output_tokens, or
// ShareGPT-style JSON (an array of {"conversations": [{"from": "human",
// ...}, {"from": "gpt", ...}]}), whose first human turn is the prompt and
// whose reply's length the output length, as vLLM's sharegpt dataset reads
// it (vllm/benchmarks/datasets.py, ShareGPTDataset). It samples the
// entries without replacement and deterministically by seed, and says what
// it read: the file's name, size and SHA-256, and every line it skipped
// with the reason. Nothing is downloaded. Pure but for reading the named
// file.
package dataset

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode"
)

// Formats a dataset file has.
const (
	Chat        = "chat"        // JSONL of chat requests
	Completions = "completions" // JSONL of completion requests
	ShareGPT    = "sharegpt"    // ShareGPT-style JSON
)

// Entry is one request of a dataset.
type Entry struct {
	// Line is where it is: the line of a JSONL file, the entry (from 1) of
	// a ShareGPT array.
	Line int
	// Fields are the request's fields as given (messages or prompt and any
	// other), without output_tokens, which is no OpenAI field.
	Fields map[string]any
	// MaxTokens is the line's max_tokens (max_completion_tokens,
	// output_tokens), or for ShareGPT the reply's length estimated from its
	// words; 0: none given.
	MaxTokens int
	// Text is the prompt's text (every message's text joined), for
	// counting its tokens.
	Text string
}

// Skip is an entry the dataset left out, and why.
type Skip struct {
	Line   int    `json:"line"`
	Reason string `json:"reason"`
}

// Dataset is a file's usable entries and what was skipped.
type Dataset struct {
	Name   string // the file's base name
	Size   int64  // bytes
	SHA256 string // hex
	Format string // Chat, Completions or ShareGPT
	// Entries are the usable requests in file order.
	Entries []Entry
	// Skipped are the entries left out, in file order.
	Skipped []Skip
}

// MaxShow is how many skipped lines an error or report names at most.
const MaxShow = 5

// Load reads the dataset at path.
func Load(path string) (*Dataset, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	data, err := io.ReadAll(io.TeeReader(f, h))
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", path, err)
	}
	d, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", path, err)
	}
	d.Name = filepath.Base(path)
	d.Size = int64(len(data))
	d.SHA256 = hex.EncodeToString(h.Sum(nil))
	return d, nil
}

// Parse reads a dataset from its bytes. A file that is no dataset, holds
// no usable entry or mixes chat and completion requests is an error naming
// the line; entries that are well-formed but unusable (an empty prompt, a
// ShareGPT conversation without a reply) are skipped and counted.
func Parse(data []byte) (*Dataset, error) {
	t := bytes.TrimLeft(data, " \t\r\n\ufeff")
	var d *Dataset
	var err error
	switch {
	case len(t) == 0:
		return nil, errors.New("the file is empty: write one JSON request per line ({\"messages\": [...]} or {\"prompt\": ...}), or a ShareGPT JSON array")
	case t[0] == '[':
		d, err = parseShareGPT(t)
	case t[0] == '{':
		d, err = parseJSONL(data)
	default:
		return nil, fmt.Errorf("not a dataset: it starts with %q, where a JSONL file starts with { and a ShareGPT file with [", firstRunes(t, 12))
	}
	if err != nil {
		return nil, err
	}
	if len(d.Entries) == 0 {
		return nil, fmt.Errorf("no usable request: %s", d.SkipSummary())
	}
	return d, nil
}

// parseJSONL reads one request per line.
func parseJSONL(data []byte) (*Dataset, error) {
	d := &Dataset{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), len(data)+1) // a line may be as long as the file
	line := 0
	for sc.Scan() {
		line++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue // blank lines separate nothing and are no request
		}
		var m map[string]any
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil || dec.More() || m == nil {
			return nil, fmt.Errorf("line %d is not a JSON object (one request per line: {\"messages\": [...]} or {\"prompt\": \"...\"}): %s", line, firstRunes(raw, 60))
		}
		format, text, why := requestText(m)
		if why != "" {
			d.Skipped = append(d.Skipped, Skip{line, why})
			continue
		}
		if d.Format == "" {
			d.Format = format
		} else if d.Format != format {
			return nil, fmt.Errorf("line %d is a %s request, but the lines before are %s requests: a dataset holds one kind (they go to different endpoints)", line, format, d.Format)
		}
		maxTokens, err := lineMaxTokens(m)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		delete(m, "output_tokens")
		d.Entries = append(d.Entries, Entry{Line: line, Fields: m, MaxTokens: maxTokens, Text: text})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return d, nil
}

// requestText is a request's format and prompt text, or why it is unusable.
func requestText(m map[string]any) (format, text, why string) {
	msgs, hasMsgs := m["messages"]
	prompt, hasPrompt := m["prompt"]
	switch {
	case hasMsgs && hasPrompt:
		return "", "", "both messages and prompt: a chat request or a completion, not both"
	case hasMsgs:
		l, ok := msgs.([]any)
		if !ok || len(l) == 0 {
			return "", "", "messages is not a non-empty list"
		}
		var parts []string
		for i, x := range l {
			msg, ok := x.(map[string]any)
			if !ok {
				return "", "", fmt.Sprintf("message %d is not an object", i+1)
			}
			parts = append(parts, contentText(msg["content"]))
		}
		text = strings.Join(parts, "\n")
		if strings.TrimSpace(text) == "" {
			return "", "", "every message is empty"
		}
		return Chat, text, ""
	case hasPrompt:
		s, ok := prompt.(string)
		if !ok {
			return "", "", "prompt is not a string (token-id prompts are not sent as given)"
		}
		if strings.TrimSpace(s) == "" {
			return "", "", "the prompt is empty"
		}
		return Completions, s, ""
	}
	return "", "", "neither messages nor prompt"
}

// contentText is a message content's text: a string, or the text parts of
// a list of parts.
func contentText(c any) string {
	switch v := c.(type) {
	case string:
		return v
	case []any:
		var parts []string
		for _, p := range v {
			if pm, ok := p.(map[string]any); ok {
				if s, ok := pm["text"].(string); ok {
					parts = append(parts, s)
				}
			}
		}
		return strings.Join(parts, "\n")
	}
	return ""
}

// lineMaxTokens is a line's output length: max_tokens,
// max_completion_tokens or output_tokens (the first given), a whole
// number of at least 1; 0 when none is given.
func lineMaxTokens(m map[string]any) (int, error) {
	for _, k := range []string{"max_tokens", "max_completion_tokens", "output_tokens"} {
		v, ok := m[k]
		if !ok {
			continue
		}
		n, isNum := v.(json.Number)
		i, err := n.Int64()
		if !isNum || err != nil || i < 1 || i > 1<<30 {
			return 0, fmt.Errorf("%s %v: want a whole number of tokens, at least 1", k, v)
		}
		return int(i), nil
	}
	return 0, nil
}

// parseShareGPT reads a ShareGPT-style array: the first turn (from a human)
// is the prompt, sent as one user message, after the system turns that open
// the conversation, if any, as a system message; the turn after it (the
// reply) gives the output length, estimated from its words (its tokens are
// the engine's to count; METHOD says the estimate). As vLLM, entries with
// fewer than two turns (besides the system's) are skipped; so are those
// whose first turn after the system's is not a human's.
func parseShareGPT(data []byte) (*Dataset, error) {
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("not a ShareGPT JSON array: %w", err)
	}
	d := &Dataset{Format: ShareGPT}
	for i, r := range raw {
		line := i + 1
		var e struct {
			Conversations []struct {
				From  string `json:"from"`
				Value string `json:"value"`
			} `json:"conversations"`
		}
		if err := json.Unmarshal(r, &e); err != nil {
			d.Skipped = append(d.Skipped, Skip{line, "not a conversation object"})
			continue
		}
		c := e.Conversations
		var system []string // the system turns before the first human's
		for len(c) > 0 && strings.EqualFold(c[0].From, "system") {
			if v := strings.TrimSpace(c[0].Value); v != "" {
				system = append(system, c[0].Value)
			}
			c = c[1:]
		}
		switch {
		case len(c) < 2:
			d.Skipped = append(d.Skipped, Skip{line, "fewer than two turns (no reply)"})
			continue
		case c[0].From != "human" && c[0].From != "user":
			d.Skipped = append(d.Skipped, Skip{line, fmt.Sprintf("the first turn is from %q, not a human", c[0].From)})
			continue
		case strings.TrimSpace(c[0].Value) == "":
			d.Skipped = append(d.Skipped, Skip{line, "the first turn is empty"})
			continue
		}
		out := ReplyTokens(c[1].Value)
		if out < 1 {
			d.Skipped = append(d.Skipped, Skip{line, "the reply is empty"})
			continue
		}
		msgs := []any{map[string]any{"role": "user", "content": c[0].Value}}
		text := c[0].Value
		if len(system) > 0 {
			sys := strings.Join(system, "\n\n")
			msgs = append([]any{map[string]any{"role": "system", "content": sys}}, msgs...)
			text = sys + "\n\n" + text
		}
		d.Entries = append(d.Entries, Entry{Line: line, MaxTokens: out, Text: text, Fields: map[string]any{"messages": msgs}})
	}
	return d, nil
}

// ReplyTokens estimates a reply's length in tokens from its text: 4/3
// tokens a word, the usual ratio of English text in BPE tokenizers, and a
// token for each character of the scripts written without spaces (Han,
// Hiragana, Katakana, Hangul, Thai), about what the BPE tokenizers of
// Llama 3 and Qwen give them, where counting words would give a whole
// paragraph one. (vLLM counts it with the model's tokenizer; tokentap
// sends no text to count for a length the engine will make anyway.)
//
// A "word" over 12 characters counts a token for every 3 of them: code,
// JSON, URLs and long numbers have no spaces (a 200-digit number is one
// field but some 67 tokens where digits go three a token).
func ReplyTokens(s string) int {
	var thirds, chars, run int // thirds of a token from words; unspaced characters; the current word's length
	end := func() {
		switch {
		case run > 12:
			thirds += run // a token per 3 characters
		case run > 0:
			thirds += 4 // 4/3 a word
		}
		run = 0
	}
	for _, r := range s {
		switch {
		case unspaced(r):
			end()
			chars++
		case unicode.IsSpace(r):
			end()
		default:
			run++
		}
	}
	end()
	return (thirds+2)/3 + chars
}

// unspaced reports whether r is a letter of a script written without
// spaces between words, or the punctuation and full-width forms written
// among them.
func unspaced(r rune) bool {
	return r >= 0x0E00 && ((r >= 0x3000 && r <= 0x303F) || (r >= 0xFF00 && r <= 0xFFEF) || unicode.Is(unicode.Han, r) || unicode.Is(unicode.Hiragana, r) || unicode.Is(unicode.Katakana, r) ||
		unicode.Is(unicode.Hangul, r) || unicode.Is(unicode.Thai, r))
}

// SkipSummary says what was skipped: "3 lines skipped: 2 neither messages
// nor prompt (lines 4, 9), 1 the prompt is empty (line 12)".
func (d *Dataset) SkipSummary() string {
	if len(d.Skipped) == 0 {
		return "no line skipped"
	}
	type group struct {
		reason string
		lines  []int
	}
	var groups []*group
	by := map[string]*group{}
	for _, s := range d.Skipped {
		g := by[s.Reason]
		if g == nil {
			g = &group{reason: s.Reason}
			by[s.Reason] = g
			groups = append(groups, g)
		}
		g.lines = append(g.lines, s.Line)
	}
	sort.SliceStable(groups, func(i, j int) bool { return len(groups[i].lines) > len(groups[j].lines) })
	var parts []string
	for _, g := range groups {
		l := make([]string, 0, MaxShow)
		for k, n := range g.lines {
			if k == MaxShow {
				l = append(l, "…")
				break
			}
			l = append(l, fmt.Sprint(n))
		}
		parts = append(parts, fmt.Sprintf("%d %s (%s %s)", len(g.lines), g.reason, d.unit(len(g.lines)), strings.Join(l, ", ")))
	}
	what := d.unit(len(d.Skipped))
	return fmt.Sprintf("%d %s skipped: %s", len(d.Skipped), what, strings.Join(parts, "; "))
}

func (d *Dataset) unit(n int) string {
	switch {
	case d.Format == ShareGPT && n == 1:
		return "entry"
	case d.Format == ShareGPT:
		return "entries"
	case n == 1:
		return "line"
	}
	return "lines"
}

// Order is the run's sample: every entry's index in a shuffled order drawn
// from seed, so the first n are a sample of n without replacement, the
// same for every run with that seed and dataset.
func (d *Dataset) Order(seed int64) []int {
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(seed)^0x5851f42d4c957f2d))
	return rng.Perm(len(d.Entries))
}

// ShardOf is shard index's part of order among count shards: every
// count-th entry from the index-th, so the shards' parts are disjoint and
// together the whole sample (METHOD §10).
func ShardOf(order []int, index, count int) []int {
	if count <= 1 {
		return order
	}
	var out []int
	for k := index; k < len(order); k += count {
		out = append(out, order[k])
	}
	return out
}

func firstRunes(b []byte, n int) string {
	s := []rune(string(b))
	if len(s) > n {
		return string(s[:n]) + "…"
	}
	return string(s)
}
