package dataset

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		format  string
		entries int
		maxes   []int    // each entry's MaxTokens
		skipped []string // reasons, in order
		err     string   // a part of the error; "" none
	}{
		{name: "chat lines with a blank between", in: `{"messages":[{"role":"user","content":"hi there"}],"max_tokens":5}` + "\n\n" +
			`{"messages":[{"role":"user","content":"again"}],"output_tokens":7,"temperature":0}` + "\n",
			format: Chat, entries: 2, maxes: []int{5, 7}},
		{name: "completions", in: `{"prompt":"Once upon"}` + "\n" + `{"prompt":"a time","max_completion_tokens":3}`,
			format: Completions, entries: 2, maxes: []int{0, 3}},
		{name: "content as parts", in: `{"messages":[{"role":"user","content":[{"type":"text","text":"look"}]}]}`, format: Chat, entries: 1, maxes: []int{0}},
		{name: "unusable lines are skipped", in: `{"messages":[]}` + "\n" + `{"prompt":""}` + "\n" + `{"foo":1}` + "\n" + `{"prompt":"ok"}`,
			format: Completions, entries: 1, maxes: []int{0},
			skipped: []string{"messages is not a non-empty list", "the prompt is empty", "neither messages nor prompt"}},
		{name: "empty file", in: " \n", err: "the file is empty"},
		{name: "not a dataset", in: "hello world", err: "not a dataset"},
		{name: "a line that is no JSON names it", in: `{"prompt":"a"}` + "\n" + `{"prompt": oops}`, err: "line 2 is not a JSON object"},
		{name: "mixed kinds name the line", in: `{"prompt":"a"}` + "\n" + `{"messages":[{"role":"user","content":"b"}]}`, err: "line 2 is a chat request"},
		{name: "bad max_tokens names the line", in: `{"prompt":"a","max_tokens":0}`, err: "line 1: max_tokens 0"},
		{name: "nothing usable", in: `{"foo":1}`, err: "no usable request: 1 line skipped: 1 neither messages nor prompt (line 1)"},
		{name: "sharegpt", in: `[{"conversations":[{"from":"human","value":"what is up"},{"from":"gpt","value":"not much at all here"}]},` +
			`{"conversations":[{"from":"human","value":"alone"}]},{"conversations":[{"from":"gpt","value":"x"},{"from":"human","value":"y"}]}]`,
			format: ShareGPT, entries: 1, maxes: []int{7},
			skipped: []string{"fewer than two turns (no reply)", `the first turn is from "gpt", not a human`}},
		// A system turn opens many ShareGPT conversations: it is sent as the
		// system message before the first human turn (it was skipped).
		{name: "sharegpt with system turns", in: `[{"conversations":[{"from":"system","value":"be brief"},{"from":"human","value":"what is up"},{"from":"gpt","value":"not much at all here"}]},` +
			`{"conversations":[{"from":"system","value":"be brief"},{"from":"human","value":"alone"}]},{"conversations":[{"from":"system","value":"s"},{"from":"gpt","value":"x"},{"from":"human","value":"y"}]}]`,
			format: ShareGPT, entries: 1, maxes: []int{7},
			skipped: []string{"fewer than two turns (no reply)", `the first turn is from "gpt", not a human`}},
		{name: "sharegpt not an array of objects", in: `[1, 2`, err: "not a ShareGPT JSON array"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Parse([]byte(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one saying %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Format != tt.format || len(d.Entries) != tt.entries {
				t.Fatalf("format %s with %d entries, want %s with %d", d.Format, len(d.Entries), tt.format, tt.entries)
			}
			var maxes []int
			for _, e := range d.Entries {
				maxes = append(maxes, e.MaxTokens)
				if _, ok := e.Fields["output_tokens"]; ok {
					t.Error("output_tokens kept in the request")
				}
			}
			if !slices.Equal(maxes, tt.maxes) {
				t.Errorf("max tokens %v, want %v", maxes, tt.maxes)
			}
			var why []string
			for _, s := range d.Skipped {
				why = append(why, s.Reason)
			}
			if !slices.Equal(why, tt.skipped) {
				t.Errorf("skipped %q, want %q", why, tt.skipped)
			}
		})
	}
}

// TestLoadExamples: the shipped examples load, with their size and hash.
func TestLoadExamples(t *testing.T) {
	for _, tt := range []struct {
		file            string
		format          string
		entries, skips  int
		distinctLengths int
	}{
		{"chat.jsonl", Chat, 40, 0, 5},
		{"sharegpt.json", ShareGPT, 11, 1, 3},
	} {
		d, err := Load(filepath.Join("testdata", tt.file))
		if err != nil {
			t.Fatal(err)
		}
		if d.Format != tt.format || len(d.Entries) != tt.entries || len(d.Skipped) != tt.skips || d.Name != tt.file ||
			d.Size == 0 || len(d.SHA256) != 64 {
			t.Errorf("%s: %+v", tt.file, d)
		}
		lengths := map[int]bool{}
		for _, e := range d.Entries {
			lengths[len(strings.Fields(e.Text))/10] = true
		}
		if len(lengths) < tt.distinctLengths {
			t.Errorf("%s: prompts of %d distinct lengths, want %d at least", tt.file, len(lengths), tt.distinctLengths)
		}
	}
}

// TestOrder: a seed gives one sample, another seed another; shards split
// it into disjoint parts that make the whole.
func TestOrder(t *testing.T) {
	d := &Dataset{Entries: make([]Entry, 50)}
	a, b := d.Order(1), d.Order(1)
	if !slices.Equal(a, b) || slices.Equal(a, d.Order(2)) {
		t.Fatal("the order is not the seed's alone")
	}
	sorted := slices.Sorted(slices.Values(a))
	for i, v := range sorted {
		if v != i {
			t.Fatal("the order is not a permutation: an entry repeats or is missing")
		}
	}
	var all []int
	for i := range 3 {
		part := ShardOf(a, i, 3)
		if len(part) < 16 || len(part) > 17 {
			t.Errorf("shard %d has %d entries of 50", i, len(part))
		}
		all = append(all, part...)
	}
	if !slices.Equal(slices.Sorted(slices.Values(all)), sorted) {
		t.Error("the shards' parts are not the whole sample")
	}
	if !slices.Equal(ShardOf(a, 0, 1), a) {
		t.Error("one shard is not the whole")
	}
}

// FuzzParse: any bytes parse or give an error, never a panic; a dataset
// parsed has entries, each with a prompt, and skips that name their line.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":3}`))
	f.Add([]byte(`{"prompt":"x"}` + "\n" + `{"prompt":""}`))
	f.Add([]byte(`[{"conversations":[{"from":"human","value":"a"},{"from":"gpt","value":"b c"}]}]`))
	f.Add([]byte("\ufeff[]"))
	f.Add([]byte(`{"messages":[{"content":[{"text":"t"}]}],"output_tokens":1e3}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Parse(data)
		if err != nil {
			return
		}
		if len(d.Entries) == 0 {
			t.Fatal("a dataset without entries parsed")
		}
		for _, e := range d.Entries {
			if strings.TrimSpace(e.Text) == "" || e.Line < 1 || e.MaxTokens < 0 {
				t.Fatalf("entry %+v", e)
			}
		}
		for _, s := range d.Skipped {
			if s.Line < 1 || s.Reason == "" {
				t.Fatalf("skip %+v", s)
			}
		}
		_ = d.SkipSummary()
	})
}

// TestReplyTokens: a reply's length, by words where the script spaces
// them and by characters where it does not (a Chinese reply is one
// "word" to strings.Fields).
func TestReplyTokens(t *testing.T) {
	for _, tt := range []struct {
		text string
		want int
	}{
		{"", 0},
		{"   ", 0},
		{"The quick brown fox", 6}, // 4 words × 4/3
		{"你好世界，今天天气很好", 11},             // 10 Han characters and a full-width comma
		{"こんにちは", 5},                    // Hiragana
		{"안녕하세요 세계", 7},                 // Hangul, a space between
		{"สวัสดีครับ", 10},              // Thai letters and vowel marks (the marks are Thai too)
		{"GPU 加速 inference", 5},         // 2 words (3) and 2 characters
		{strings.Repeat("字", 300), 300}, // one "field" of 300 characters
		{strings.Repeat("9", 200), 67},  // a number: digits go three a token
		{`{"name":"tokentap","version":"1.2.3","url":"https://example.com/a/b?d=e"}`, 25}, // JSON has no spaces: 73 characters, 3 a token
		{"internationalization", 7}, // 20 characters`
	} {
		if got := ReplyTokens(tt.text); got != tt.want {
			t.Errorf("ReplyTokens(%q) = %d, want %d", tt.text, got, tt.want)
		}
	}
}

// TestShareGPTSystemTurn: the system turns that open a conversation go
// before its first human turn as one system message, and count in the
// prompt's text (its length is checked against the engine's).
func TestShareGPTSystemTurn(t *testing.T) {
	d, err := Parse([]byte(`[{"conversations":[{"from":"system","value":"be brief"},{"from":"System","value":"be kind"},{"from":"human","value":"hi"},{"from":"gpt","value":"hello there"}]}]`))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Entries) != 1 {
		t.Fatalf("%d entries, want 1", len(d.Entries))
	}
	e := d.Entries[0]
	got, _ := json.Marshal(e.Fields["messages"])
	if want := `[{"content":"be brief\n\nbe kind","role":"system"},{"content":"hi","role":"user"}]`; string(got) != want {
		t.Errorf("messages %s, want %s", got, want)
	}
	if e.Text != "be brief\n\nbe kind\n\nhi" || e.MaxTokens != ReplyTokens("hello there") {
		t.Errorf("text %q, max tokens %d", e.Text, e.MaxTokens)
	}
}
