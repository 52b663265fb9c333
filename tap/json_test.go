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
	`{"text":"cumulative","meta_info":{"completion_tokens":4,"cached_tokens":2}}`,
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
