package tap

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// oracle reads b the slow, obvious way with encoding/json into generic
// values, applying the same rules as parseChunk.
func oracle(b []byte) (c chunk, id string, ok bool) {
	c.choices = -1
	if !json.Valid(b) {
		return c, "", false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return c, "", false
	}
	m, isObj := v.(map[string]any)
	if !isObj {
		return c, "", false
	}
	nonEmpty := func(v any) bool { s, ok := v.(string); return ok && s != "" }
	obj := func(v any) (map[string]any, bool) { o, ok := v.(map[string]any); return o, ok }
	integer := func(v any) (int, bool) {
		n, ok := v.(json.Number)
		if !ok {
			return 0, false
		}
		s := strings.TrimPrefix(string(n), "-")
		if strings.ContainsAny(s, ".eE") || len(s) > 18 {
			return 0, true
		}
		i, _ := strconv.Atoi(string(n))
		return i, true
	}
	readCounts := func(v any) (u counts) {
		o, ok := obj(v)
		if !ok {
			return u
		}
		u.set = true
		u.prompt, _ = integer(o["prompt_tokens"])
		u.completion, _ = integer(o["completion_tokens"])
		if d, ok := obj(o["prompt_tokens_details"]); ok {
			if n, ok := integer(d["cached_tokens"]); ok {
				u.cached, u.cachedSet = n, true
			}
		}
		if !u.cachedSet {
			if n, ok := integer(o["cached_tokens"]); ok {
				u.cached, u.cachedSet = n, true
			}
		}
		return u
	}
	if e, ok := m["error"]; ok && e != nil {
		c.errorKey = true
	}
	c.objectErr = m["object"] == "error"
	id, _ = m["id"].(string)
	if arr, ok := m["choices"].([]any); ok {
		c.choices = len(arr)
		for _, ch := range arr {
			o, ok := obj(ch)
			if !ok {
				continue
			}
			if nonEmpty(o["text"]) {
				c.tok = true
			}
			d, ok := obj(o["delta"])
			if !ok {
				continue
			}
			if nonEmpty(d["content"]) || nonEmpty(d["reasoning_content"]) || nonEmpty(d["reasoning"]) {
				c.tok = true
			}
			tcs, _ := d["tool_calls"].([]any)
			for _, tc := range tcs {
				if t, ok := obj(tc); ok {
					if f, ok := obj(t["function"]); ok && (nonEmpty(f["arguments"]) || nonEmpty(f["name"])) {
						c.tok = true
					}
				}
			}
		}
	}
	_, c.text = m["text"]
	c.usage = readCounts(m["usage"])
	c.meta = readCounts(m["meta_info"])
	if t, ok := obj(m["timings"]); ok {
		c.cacheN, c.cacheNSet = integer(t["cache_n"])
		if n, ok := t["prompt_ms"].(json.Number); ok {
			whole, frac, _ := strings.Cut(string(n), ".")
			frac = (frac + "000")[:3]
			w, errW := strconv.ParseInt(whole, 10, 64)
			f, errF := strconv.ParseInt(frac, 10, 64)
			if errW == nil && errF == nil && !strings.HasPrefix(whole, "-") && len(whole) <= 12 {
				c.promptUS, c.promptSet = w*1000+f, true
			}
		}
	}
	return c, id, true
}

func compareChunk(t *testing.T, b []byte) {
	t.Helper()
	var r jreader
	var got chunk
	ok := parseChunk(&r, b, &got)
	want, wantID, wantOK := oracle(b)
	if ok != wantOK {
		t.Fatalf("%q: valid object %v, encoding/json says %v", b, ok, wantOK)
	}
	if !ok {
		return
	}
	gotID := ""
	if got.id != nil {
		if err := json.Unmarshal(append(append([]byte{'"'}, got.id...), '"'), &gotID); err != nil {
			t.Fatalf("%q: id %q does not decode: %v", b, got.id, err)
		}
	}
	got.id, got.idEscaped = nil, false
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) || gotID != wantID {
		t.Fatalf("%q:\n got %+v id %q\nwant %+v id %q", b, got, gotID, want, wantID)
	}
	compareResumed(t, b)
}

// compareResumed checks the reader's checkpoint is invisible: a reader that
// read b before (and kept b's head) reads b again, b cut short, and b with
// one byte changed around and after its head exactly as a fresh reader does.
func compareResumed(t *testing.T, b []byte) {
	t.Helper()
	var primed jreader
	var c chunk
	parseChunk(&primed, b, &c)
	h := primed.headLen
	variants := [][]byte{b}
	for _, k := range []int{0, h / 2, h - 1, h, h + 1, h + 7, len(b) - 1} {
		if k < 0 || k >= len(b) {
			continue
		}
		variants = append(variants, b[:k])
		for _, x := range []byte{'}', ' ', '"', '0'} {
			if b[k] != x {
				v := bytes.Clone(b)
				v[k] = x
				variants = append(variants, v)
			}
		}
	}
	for _, v := range variants {
		r := primed // the checkpoint of b, every time
		var fresh jreader
		var got, want chunk
		ok, wantOK := parseChunk(&r, v, &got), parseChunk(&fresh, v, &want)
		if ok != wantOK || fmt.Sprintf("%+v %q", got, got.id) != fmt.Sprintf("%+v %q", want, want.id) {
			t.Fatalf("after %q, %q:\n got %v %+v id %q\nwant %v %+v id %q", b, v, ok, got, got.id, wantOK, want, want.id)
		}
	}
}

var chunkCases = []string{
	`{"choices":[{"index":0,"delta":{"content":"hi"}}]}`,
	`{"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}`,
	`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":2}}}`,
	` { "choices" : [ { "delta" : { "reasoning_content" : "x" } } ] , "id" : "a\"b\u00e9" } `,
	`{"\u0063hoices":[{"text":"\n"}],"object":"\u0065rror"}`,
	`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\""}}]}}]}`,
	`{"choices":[{"delta":{"content":"a"},"delta":{}}]}`,
	`{"usage":{"completion_tokens":1.5,"prompt_tokens":-0,"cached_tokens":7},"meta_info":[]}`,
	`{"usage":{"completion_tokens":12345678901234567890}}`,
	`{"error":null}`, `{"error":{"message":"x"}}`, `{"timings":{"cache_n":14}}`,
	`{"timings":{"prompt_ms":20.684,"cache_n":1}}`, `{"timings":{"prompt_ms":7}}`, `{"timings":{"prompt_ms":-1.5}}`,
	`{"timings":{"prompt_ms":1.5e3}}`, `{"timings":{"prompt_ms":0.0004}}`, `{"timings":{"prompt_ms":"5"}}`,
	`{"text":"cumulative","meta_info":{"completion_tokens":4,"cached_tokens":2}}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"a"}}]}`,
	` {"id" : "a\"\u00e9b", "object":"text_completion","usage":{"completion_tokens":2},"choices":[{"text":"x"}],"id":"c"}`,
	`{"object":"error","id":"x","error":{"message":"m"},"choices":[]}`,
	`{}`, `[]`, `"x"`, `{"a":01}`, `{"a":1.}`, `{"a":"\x"}`, `{"a":"` + "\x01" + `"}`, `{"a" 1}`, `{"a":1,}`,
	`{"a":[1,]}`, `{"a":tru}`, `{"a":1}x`, `{`, `{"a":"\u12"}`, `{"a":-}`, `{"a":1e}`, `{"a":[{"b":[null,true,false]}]}`,
}

// deepCases check the nesting limit agrees with encoding/json's (too big
// to be good fuzz seeds).
var deepCases = []string{
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	`{"a":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`,
	`{"a":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`,
}

// TestParseChunkResumes: the second event of a stream resumes from the
// first one's head, and reads as a fresh reader would.
func TestParseChunkResumes(t *testing.T) {
	evs := vllmStream(2, true)
	var r jreader
	var c chunk
	for i, ev := range evs[:3] {
		data := bytes.TrimSuffix(bytes.TrimPrefix(ev, []byte("data: ")), []byte("\n\n"))
		if !parseChunk(&r, data, &c) {
			t.Fatalf("event %d: not valid", i)
		}
		if want := bytes.Index(data, []byte(`"choices"`)); r.headLen != want {
			t.Fatalf("event %d: head of %d bytes kept, want %d", i, r.headLen, want)
		}
		if string(c.id) != "chatcmpl-8f3a2c1e9b7d4f6a8c0e2b4d6f8a0c2e" || !c.usage.set || c.usage.completion != i {
			t.Fatalf("event %d: read %+v id %q", i, c, c.id)
		}
		compareChunk(t, data)
	}
}

func TestParseChunk(t *testing.T) {
	for _, c := range append(chunkCases, deepCases...) {
		compareChunk(t, []byte(c))
	}
}

func FuzzParseChunk(f *testing.F) {
	for _, c := range chunkCases {
		f.Add([]byte(c))
	}
	files, _ := filepath.Glob("testdata/*.txt")
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		for _, line := range bytes.Split(b, []byte("\n")) {
			if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
				f.Add(d)
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) { compareChunk(t, b) })
}
