package proxy

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestInspect(t *testing.T) {
	tests := []struct {
		name string
		body string
		want reqInfo // the span fields are not compared
	}{
		{"chat", `{"model":"llama","stream":true,"max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`,
			reqInfo{valid: true, model: "llama", stream: true, maxTokens: 64}},
		{"white space everywhere", " \n{ \"model\" : \"m\" ,\t\"stream\" :true } \r\n",
			reqInfo{valid: true, model: "m", stream: true}},
		{"empty object", `{}`, reqInfo{valid: true}},
		{"max_completion_tokens", `{"max_completion_tokens":7}`, reqInfo{valid: true, maxTokens: 7}},
		{"max_tokens wins", `{"max_completion_tokens":7,"max_tokens":9}`, reqInfo{valid: true, maxTokens: 9}},
		{"max_tokens not a count", `{"max_tokens":1.5}`, reqInfo{valid: true}},
		{"max_tokens negative", `{"max_tokens":-3}`, reqInfo{valid: true}},
		// Duplicate keys: the last counts, as in the engines' parsers.
		{"model twice", `{"model":"first","model":"second"}`, reqInfo{valid: true, model: "second"}},
		{"model then not a string", `{"model":"first","model":3}`, reqInfo{valid: true}},
		{"stream twice", `{"stream":true,"stream":false}`, reqInfo{valid: true, duplicate: true}},
		{"escaped key", `{"\u006dodel":"m","str\u0065am":true}`, reqInfo{valid: true, model: "m", stream: true}},
		{"escaped model", `{"model":"a\"b\u00e9"}`, reqInfo{valid: true, model: "a\"bé"}},
		{"nested model is not the model", `{"x":{"model":"inner"},"messages":[{"model":"m2"}]}`, reqInfo{valid: true}},
		{"options", `{"stream":true,"stream_options":{"include_usage":true}}`,
			reqInfo{valid: true, stream: true, hasOptions: true, includeUsage: true}},
		{"options off", `{"stream":true,"stream_options":{"include_usage":false,"x":[1,{}]}}`,
			reqInfo{valid: true, stream: true, hasOptions: true, usageOff: true}},
		{"options null", `{"stream_options":null}`, reqInfo{valid: true, hasOptions: true, optionsNull: true}},
		{"options empty", `{"stream_options":{}}`, reqInfo{valid: true, hasOptions: true}},
		{"include_usage twice", `{"stream_options":{"include_usage":false,"include_usage":true}}`,
			reqInfo{valid: true, hasOptions: true, includeUsage: true, duplicate: true}},
		{"all kinds of values", `{"a":[1,-2.5e+3,0,true,false,null,"s\n\\",[],{},[[{"b":[]}]]],"model":"m"}`,
			reqInfo{valid: true, model: "m"}},
		// Not one JSON object: valid false, nothing read.
		{"array", `[{"stream":true}]`, reqInfo{}},
		{"cut", `{"model":"m","stream":true`, reqInfo{}},
		{"after the object", `{"model":"m"} {}`, reqInfo{}},
		{"trailing comma", `{"model":"m",}`, reqInfo{}},
		{"trailing comma in an array", `{"a":[1,]}`, reqInfo{}},
		{"bad literal", `{"stream":tru}`, reqInfo{}},
		{"leading zero", `{"a":01}`, reqInfo{}},
		{"bare dot", `{"a":1.}`, reqInfo{}},
		{"control byte in a string", "{\"a\":\"x\x01\"}", reqInfo{}},
		{"bad escape", `{"a":"\x"}`, reqInfo{}},
		{"mismatched brackets", `{"a":[1}`, reqInfo{}},
		{"single quotes", `{'model':'m'}`, reqInfo{}},
		{"empty", ``, reqInfo{}},
		{"too deep", `{"a":` + strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1) + `}`, reqInfo{}},
		{"deep but within bounds", `{"a":` + strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth) + `,"model":"m"}`,
			reqInfo{valid: true, model: "m"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := inspect([]byte(tt.body))
			got.options, got.usage = span{}, span{}
			if got != tt.want {
				t.Fatalf("inspect(%.80s)\n got %+v\nwant %+v", tt.body, got, tt.want)
			}
		})
	}
}

func TestInspectLongModelName(t *testing.T) {
	ri := inspect([]byte(`{"model":"` + strings.Repeat("m", 1<<20) + `"}`))
	if !ri.valid || len(ri.model) != maxModelName {
		t.Fatalf("valid %v, model of %d bytes; want valid, %d", ri.valid, len(ri.model), maxModelName)
	}
}

// expensiveBodies are bodies of ordinary size that a JSON tree makes
// expensive: many elements, many keys, deep nesting, long strings.
func expensiveBodies(n int) map[string][]byte {
	var b bytes.Buffer
	body := func(fill func()) []byte {
		b.Reset()
		b.WriteString(`{"model":"m","stream":true,"x":`)
		fill()
		b.WriteString(`}`)
		return bytes.Clone(b.Bytes())
	}
	return map[string][]byte{
		"numbers": body(func() {
			b.WriteByte('[')
			for i := range n {
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteString("1")
			}
			b.WriteByte(']')
		}),
		"keys": body(func() {
			b.WriteByte('{')
			for i := range n {
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteString(`"k":0`)
			}
			b.WriteByte('}')
		}),
		"nesting": body(func() {
			for range maxDepth/2 - 1 {
				b.WriteString(`[{"a":`)
			}
			b.WriteString(`0`)
			for range maxDepth/2 - 1 {
				b.WriteString(`}]`)
			}
		}),
		"string": body(func() {
			b.WriteByte('"')
			for range n {
				b.WriteString(`ab\"`)
			}
			b.WriteByte('"')
		}),
	}
}

// TestInspectAllocatesNothing: reading a body keeps nothing of it, so a
// body's shape cannot make the proxy's memory grow.
func TestInspectAllocatesNothing(t *testing.T) {
	for name, body := range expensiveBodies(100_000) {
		t.Run(name, func(t *testing.T) {
			// AllocsPerRun counts every goroutine's allocations, and on a
			// busy machine the earlier tests' goroutines winding down get
			// more of the time a run takes: those only add, while an
			// allocation of inspect's own is in every measurement, so
			// the fewest of up to ten is inspect's.
			var ri reqInfo
			allocs := testing.AllocsPerRun(5, func() { ri = inspect(body) })
			for i := 0; i < 9 && allocs > 1; i++ {
				allocs = min(allocs, testing.AllocsPerRun(5, func() { ri = inspect(body) }))
			}
			if !ri.valid || ri.model != "m" || !ri.stream {
				t.Fatalf("inspect = %+v", ri)
			}
			// The model name is the one allocation.
			if allocs > 1 {
				t.Fatalf("inspect allocated %v times for a %d-byte body", allocs, len(body))
			}
		})
	}
}

func BenchmarkInspect(b *testing.B) {
	for name, body := range expensiveBodies(1_000_000) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				inspect(body)
			}
		})
	}
}

// FuzzInspect holds inspect to encoding/json, a parser we did not write:
// the same bodies are JSON objects, and the same model, stream and
// include_usage are read, the last of a repeated key counting.
func FuzzInspect(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"a","model":"b","stream":false,"stream":true}`,
		`{"stream_options":{"include_usage":false},"x":[1,2.5e-3,-0,"\u00e9\n",null,{}]}`,
		`{"\u006dodel":"m"}`, `[1]`, `{"a":1,}`, `{"a":01}`, ` {} `, `{"a":"\ud800"}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		ri := inspect([]byte(body))
		var m map[string]json.RawMessage
		err := json.Unmarshal([]byte(body), &m)
		isObject := err == nil && m != nil
		if depth(body) > maxDepth {
			return // deeper than inspect follows: it says not JSON
		}
		if ri.valid != isObject {
			t.Fatalf("valid %v, encoding/json object %v (%v): %q", ri.valid, isObject, err, body)
		}
		if !isObject {
			return
		}
		var model string
		if raw, ok := m["model"]; ok && json.Unmarshal(raw, &model) != nil {
			model = ""
		}
		if len(model) > maxModelName || strings.ContainsRune(model, '\uFFFD') {
			return // cut, or invalid UTF-8 that encoding/json replaces
		}
		if ri.model != model {
			t.Fatalf("model %q, encoding/json %q: %q", ri.model, model, body)
		}
		if stream := string(bytes.TrimSpace(m["stream"])) == "true"; ri.stream != stream {
			t.Fatalf("stream %v, encoding/json %v: %q", ri.stream, stream, body)
		}
		var so map[string]json.RawMessage
		if json.Unmarshal(m["stream_options"], &so) == nil && so != nil {
			if iu := string(bytes.TrimSpace(so["include_usage"])) == "true"; ri.includeUsage != iu {
				t.Fatalf("include_usage %v, encoding/json %v: %q", ri.includeUsage, iu, body)
			}
		}
	})
}

// depth is how deep brackets nest in s, strings ignored (roughly: enough
// to tell a body beyond maxDepth).
func depth(s string) int {
	d, most, in := 0, 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case in && c == '\\':
			i++
		case c == '"':
			in = !in
		case !in && (c == '[' || c == '{'):
			d++
			most = max(most, d)
		case !in && (c == ']' || c == '}'):
			d--
		}
	}
	return most
}

// injectUsage is the body usageSplice's pieces make, joined.
func injectUsage(body []byte, ri reqInfo, dst []byte) ([]byte, bool) {
	head, insert, tail, ok := usageSplice(body, ri)
	if !ok {
		return body, false
	}
	return append(append(append(dst[:0], head...), insert...), tail...), true
}

// TestSplice: the pieces read, and write, as the joined body, again after
// a rewind, whatever the reader's buffer.
func TestSplice(t *testing.T) {
	var s splice
	s.set([]byte(`{`), usageOption, []byte(`"model":"m"}`))
	want := `{` + string(usageOption) + `"model":"m"}`
	if s.size() != len(want) {
		t.Fatalf("size %d, want %d", s.size(), len(want))
	}
	for _, bufSize := range []int{1, 3, 7, 64} {
		s.rewind()
		var got []byte
		buf := make([]byte, bufSize)
		for {
			n, err := s.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				break
			}
		}
		if string(got) != want {
			t.Errorf("read with %d-byte buffer: %s", bufSize, got)
		}
	}
	s.rewind()
	var w bytes.Buffer
	if n, err := s.WriteTo(&w); err != nil || int(n) != len(want) || w.String() != want {
		t.Errorf("WriteTo: %d %v %s", n, err, w.String())
	}
}
