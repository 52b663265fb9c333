package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// roundTrips are records every producer makes: their JSON form must decode
// back to the same record.
var roundTrips = []struct {
	name string
	rec  Record
}{
	{"zero", Record{}},
	{"ok stream", Record{
		ID: "run1-42", ResponseID: "chatcmpl-9c1d7e3f", Tag: "C=16384 N=4", Model: "Qwen/Qwen3-8B", API: Chat,
		Wall: time.Date(2026, 11, 30, 9, 30, 0, 123456789, time.UTC), Stream: true, MaxTokens: 8192,
		Sent: ms(1000), First: ms(1250), End: ms(1400), Status: 200, Outcome: OK,
		PromptTokens: 16384, PromptSource: SourceUsage, CompletionTokens: 4, CompletionSource: SourceUsage, CachedTokens: 16368,
		Arrivals: []time.Duration{ms(1250), ms(1300), ms(1350), ms(1399)},
	}},
	{"multi-token events", Record{
		API: Completions, Stream: true, Sent: 5, First: 5, End: 1 << 40, Outcome: OK,
		CompletionTokens: 9, CompletionSource: SourceCounted,
		Arrivals: []time.Duration{5, 5, 1 << 39, 1<<40 - 1}, Tokens: []int32{1, 3, 1, 4},
	}},
	{"http error", Record{
		ID: "r", API: Chat, Stream: true, Sent: ms(3), End: ms(9), Status: 400, Outcome: HTTPError, Blame: BlameEngine,
		Error:        `HTTP 400 from the engine: {"error":{"message":"the request exceeds the available context size — n_ctx 16384"}}`,
		PromptTokens: 70000, PromptSource: SourceCounted,
	}},
	{"cancelled with a captured prompt", Record{
		ID: "p", Stream: true, Sent: ms(1), First: ms(2), End: ms(3), Outcome: Cancelled, Blame: BlameClient,
		Arrivals: []time.Duration{ms(2)}, Request: []byte(`{"model":"m","messages":[{"role":"user","content":"héllo\n\"quoted\""}]}`),
	}},
	{"llama.cpp engine prefill", Record{
		Stream: true, Sent: ms(1), First: ms(30), End: ms(40), Outcome: OK, CachedTokens: 14, CachedSource: SourceUsage,
		EnginePrefill: 20684 * time.Microsecond, EnginePrefillSet: true, Arrivals: []time.Duration{ms(30)},
	}},
	{"engine prefill of zero", Record{EnginePrefillSet: true}},
	{"retried by the proxy", Record{
		ID: "px-7", API: Chat, Sent: ms(1), End: ms(3006), Outcome: Connect, Blame: BlameEngine, Retries: 1,
		Error: "the engine closed the connection before answering",
	}},
	{"negative offsets (sent before the clock)", Record{Sent: -ms(5), First: -ms(1), End: ms(2), Arrivals: []time.Duration{-ms(1), 0}}},
}

func equalRecords(a, b Record) bool {
	if !a.Wall.Equal(b.Wall) {
		return false
	}
	a.Wall, b.Wall = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

func TestRoundTrip(t *testing.T) {
	for _, tt := range roundTrips {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.rec)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(b, []byte(`"v":1`)) {
				t.Fatalf("no schema version in %s", b)
			}
			var got Record
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("decode %s: %v", b, err)
			}
			if !equalRecords(got, tt.rec) {
				t.Fatalf("round trip changed the record\n got %+v\nwant %+v\njson %s", got, tt.rec, b)
			}
		})
	}
}

func TestJSONLStream(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for _, tt := range roundTrips {
		if err := w.Write(&tt.rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(buf.Bytes(), []byte("\n")); n != len(roundTrips) {
		t.Fatalf("%d lines for %d records", n, len(roundTrips))
	}
	if bytes.Contains(buf.Bytes(), []byte(`\u003c`)) || !bytes.Contains(buf.Bytes(), []byte("—")) {
		t.Fatalf("records should be written unescaped: %s", buf.Bytes())
	}
	// Blank lines and CRLF line ends are tolerated on the way back.
	in := strings.ReplaceAll("\n"+buf.String()+"\n  \n", "\n", "\r\n")
	got, err := ReadAll(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(roundTrips) {
		t.Fatalf("read %d records, wrote %d", len(got), len(roundTrips))
	}
	for i := range got {
		if !equalRecords(got[i], roundTrips[i].rec) {
			t.Fatalf("record %d changed: %+v", i, got[i])
		}
	}
	// The last line needs no newline.
	one, err := ReadAll(strings.NewReader(strings.TrimSuffix(strings.SplitAfter(buf.String(), "\n")[1], "\n")))
	if err != nil || len(one) != 1 || one[0].ID != "run1-42" {
		t.Fatalf("unterminated last line: %v %v", one, err)
	}
}

func TestDecodeErrors(t *testing.T) {
	good, _ := json.Marshal(roundTrips[1].rec)
	edit := func(from, to string) string { return strings.Replace(string(good), from, to, 1) }
	tests := []struct{ name, in, want string }{
		{"newer schema", edit(`"v":1`, `"v":2`), "record schema v2; this tokentap reads v1 to v1 (upgrade tokentap)"},
		{"no schema", edit(`"v":1`, `"v":0`), "record schema v0"},
		{"not json", `{"v":1,`, "unexpected end of JSON input"},
		{"bad base64", edit(`"arrivals":"`, `"arrivals":"!!`), "arrivals: illegal base64"},
		{"fewer arrivals than events", edit(`"events":4`, `"events":5`), "4 arrivals for 5 events"},
		{"first disagrees", edit(`"first_ns":1250000000`, `"first_ns":1`), "first_ns disagrees"},
		{"negative events", edit(`"events":4`, `"events":-1`), "events"},
		{"absurd events", edit(`"events":4`, `"events":1152921504606846976`), "events"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Record
			err := json.Unmarshal([]byte(tt.in), &r)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to contain %q (input %s)", err, tt.want, tt.in)
			}
		})
	}
	// A reader names the line.
	in := string(good) + "\n" + edit(`"v":1`, `"v":9`) + "\n"
	rd := NewReader(strings.NewReader(in))
	var r Record
	if err := rd.Read(&r); err != nil {
		t.Fatal(err)
	}
	if err := rd.Read(&r); err == nil || !strings.HasPrefix(err.Error(), "line 2: ") {
		t.Fatalf("error %v, want it to name line 2", err)
	}
	if err := NewReader(strings.NewReader("")).Read(&r); !errors.Is(err, io.EOF) {
		t.Fatalf("empty input: %v, want io.EOF", err)
	}
}

// TestEncodeNeverRefuses: the encoder writes every record it is given
// (a capture never loses one), times that go back at the time before them.
func TestEncodeNeverRefuses(t *testing.T) {
	tests := []struct {
		name       string
		in         Record
		arrivals   []time.Duration
		tokens     []int32
		wantTokens bool
	}{
		{"arrival before the previous", Record{ID: "b", Sent: ms(10), Arrivals: []time.Duration{ms(20), ms(15), ms(30)}},
			[]time.Duration{ms(20), ms(20), ms(30)}, nil, false},
		{"arrival before sent", Record{ID: "s", Sent: ms(10), Arrivals: []time.Duration{ms(9), ms(12)}},
			[]time.Duration{ms(10), ms(12)}, nil, false},
		{"too few token counts", Record{ID: "m", Arrivals: []time.Duration{1, 2}, Tokens: []int32{3}},
			[]time.Duration{1, 2}, []int32{3, 1}, true},
		{"too many token counts", Record{ID: "n", Arrivals: []time.Duration{1}, Tokens: []int32{2, 5}},
			[]time.Duration{1}, []int32{2}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.in)
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			var got Record
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("written but not read back: %v\n%s", err, b)
			}
			if !reflect.DeepEqual(got.Arrivals, tt.arrivals) || got.First != tt.arrivals[0] {
				t.Fatalf("arrivals %v (first %v), want %v", got.Arrivals, got.First, tt.arrivals)
			}
			if tt.wantTokens && !reflect.DeepEqual(got.Tokens, tt.tokens) {
				t.Fatalf("tokens %v, want %v", got.Tokens, tt.tokens)
			}
		})
	}
}

// TestTimesNeverGoBack: AddEvent and SetEnd, where times are taken, keep
// a record's times in order whatever order the stamps come in.
func TestTimesNeverGoBack(t *testing.T) {
	r := Record{Sent: ms(10)}
	for _, at := range []time.Duration{ms(9), ms(15), ms(14), ms(20), ms(20) - 3} {
		r.AddEvent(at, 1)
	}
	want := []time.Duration{ms(10), ms(15), ms(15), ms(20), ms(20)}
	if !reflect.DeepEqual(r.Arrivals, want) || r.First != ms(10) {
		t.Fatalf("arrivals %v first %v, want %v", r.Arrivals, r.First, want)
	}
	r.SetEnd(ms(19))
	if r.End != ms(20) {
		t.Fatalf("end %v, want the last arrival %v", r.End, ms(20))
	}
	var none Record
	none.Sent = ms(5)
	none.SetEnd(ms(4))
	if none.End != ms(5) {
		t.Fatalf("end %v of a record without events, want sent %v", none.End, ms(5))
	}
}

// FuzzDecode: the decoder never panics or allocates without bound on any
// line, and what it accepts encodes and decodes back to itself.
func FuzzDecode(f *testing.F) {
	for _, tt := range roundTrips {
		b, _ := json.Marshal(tt.rec)
		f.Add(b)
	}
	f.Add([]byte(`{"v":1,"events":3,"arrivals":"gICAgICAgICAAQ","tokens":"AQEB"}`))
	f.Add([]byte(`{"v":1,"events":-7}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Record
		if err := r.UnmarshalJSON(b); err != nil {
			return
		}
		out, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("decoded %s into a record that does not encode: %v", b, err)
		}
		var back Record
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("re-encoded record does not decode: %v\n%s", err, out)
		}
		if !equalRecords(back, r) {
			t.Fatalf("round trip changed the record\n got %+v\nwant %+v", back, r)
		}
	})
}

// TestReadAllTornLastLine: a capture whose writer was killed mid-line
// keeps its whole records; only a cut last line is ErrTornLine, a bad
// line elsewhere is still an error naming it.
func TestReadAllTornLastLine(t *testing.T) {
	whole := `{"v":1,"id":"a","sent_ns":0,"end_ns":1,"outcome":"ok"}` + "\n"
	for _, tt := range []struct {
		name  string
		in    string
		recs  int
		torn  bool
		fails bool
	}{
		{"whole", whole + whole, 2, false, false},
		{"torn last line", whole + whole + `{"v":1,"id":"c","sent_`, 2, true, true},
		{"bad middle line", whole + "{\"v\":1,\n" + whole, 1, false, true},
		{"bad last line with its newline", whole + "{\"v\":1,\n", 1, false, true},
		{"last line whole without a newline", whole + strings.TrimSuffix(whole, "\n"), 2, false, false},
	} {
		recs, err := ReadAll(strings.NewReader(tt.in))
		if len(recs) != tt.recs || errors.Is(err, ErrTornLine) != tt.torn || (err != nil) != tt.fails {
			t.Errorf("%s: %d records, err %v; want %d, torn %v, error %v", tt.name, len(recs), err, tt.recs, tt.torn, tt.fails)
		}
	}
}
