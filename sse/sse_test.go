package sse

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/internal/test/benchcpu"
)

// got is an event copied out of the scanner, for comparison.
type got struct {
	Type, Data, ID string
	Start, End     int64
}

func (g got) String() string {
	return fmt.Sprintf("{type=%q data=%q id=%q [%d,%d)}", g.Type, g.Data, g.ID, g.Start, g.End)
}

// scanChunks feeds in to a fresh scanner cut at the given offsets.
func scanChunks(in []byte, max int, cuts []int) ([]got, *Scanner) {
	s := &Scanner{Max: max}
	var out []got
	prev := 0
	feed := func(p []byte) {
		// Copy so the test catches any event that outlives its chunk.
		c := append([]byte(nil), p...)
		s.Feed(c)
		for {
			ev, ok := s.Next()
			if !ok {
				break
			}
			g := got{string(ev.Type), string(ev.Data), string(ev.ID), ev.Start, ev.End}
			if ev.End == int64(prev+len(c)) && len(c) > 0 && c[len(c)-1] == '\r' && prev+len(c) < len(in) && in[prev+len(c)] == '\n' {
				g.End++ // CRLF split after the CR: see Event.End; count the LF in for comparison
			}
			out = append(out, g)
		}
		for i := range c {
			c[i] = 0xEE // poison: nothing may point here after Next returned false
		}
	}
	for _, c := range cuts {
		if c < prev || c > len(in) {
			continue
		}
		feed(in[prev:c])
		prev = c
	}
	feed(in[prev:])
	return out, s
}

// reference is a plain reading of the WHATWG algorithm over the whole input
// at once, with the same size limits as Scanner. It is deliberately simple.
func reference(in []byte, max int) (events []got, err error) {
	if max <= 0 {
		max = MaxEvent
	}
	var data strings.Builder
	hasData := false
	typ, id := "", ""
	blockStart := int64(0)
	pos := 0
	for pos < len(in) {
		end, next := -1, -1
		for i := pos; i < len(in); i++ {
			if in[i] == '\n' {
				end, next = i, i+1
				break
			}
			if in[i] == '\r' {
				end, next = i, i+1
				if i+1 < len(in) && in[i+1] == '\n' {
					next = i + 2
				}
				break
			}
		}
		if end < 0 {
			if len(in)-pos > max+lineSlack {
				return events, ErrTooLarge
			}
			return events, nil // an unterminated line is not processed
		}
		line := string(in[pos:end])
		if len(line) > max+lineSlack {
			return events, ErrTooLarge
		}
		pos = next
		switch {
		case line == "":
			if hasData {
				events = append(events, got{typ, data.String(), id, blockStart, int64(next)})
			}
			blockStart = int64(next)
			data.Reset()
			hasData, typ = false, ""
		case line[0] == ':':
		default:
			name, value, found := strings.Cut(line, ":")
			if found && strings.HasPrefix(value, " ") {
				value = value[1:]
			}
			switch name {
			case "data":
				if len(value) > max {
					return events, ErrTooLarge
				}
				if hasData {
					if data.Len()+1+len(value) > max {
						return events, ErrTooLarge
					}
					data.WriteByte('\n')
				}
				hasData = true
				data.WriteString(value)
			case "event":
				typ = value
			case "id":
				if !strings.Contains(value, "\x00") {
					id = value
				}
			}
		}
	}
	return events, nil
}

func TestScanner(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []got
	}{
		{"lf", "data: a\n\ndata: b\n\n", []got{{"", "a", "", 0, 9}, {"", "b", "", 9, 18}}},
		{"crlf", "data: a\r\n\r\ndata: b\r\n\r\n", []got{{"", "a", "", 0, 11}, {"", "b", "", 11, 22}}},
		{"cr", "data: a\r\rdata: b\r\r", []got{{"", "a", "", 0, 9}, {"", "b", "", 9, 18}}},
		{"mixed endings", "data: a\r\ndata: b\rdata: c\n\r\n", []got{{"", "a\nb\nc", "", 0, 27}}},
		{"multi-line data", "data: {\"a\":\ndata: 1}\n\n", []got{{"", "{\"a\":\n1}", "", 0, 22}}},
		{"no space after colon", "data:x\n\n", []got{{"", "x", "", 0, 8}}},
		{"two spaces keep one", "data:  x\n\n", []got{{"", " x", "", 0, 10}}},
		{"field without colon", "data\n\n", []got{{"", "", "", 0, 6}}},
		{"empty data dispatches", "data:\n\n", []got{{"", "", "", 0, 7}}},
		{"comment only block is no event", ": ping\n\ndata: a\n\n", []got{{"", "a", "", 8, 17}}},
		{"comment inside event", "data: a\n: keep-alive\ndata: b\n\n", []got{{"", "a\nb", "", 0, 30}}},
		{"event type", "event: error\ndata: x\n\ndata: y\n\n", []got{{"error", "x", "", 0, 22}, {"", "y", "", 22, 31}}},
		{"id persists", "id: 7\ndata: x\n\ndata: y\n\n", []got{{"", "x", "7", 0, 15}, {"", "y", "7", 15, 24}}},
		{"id with NUL ignored", "id: 1\ndata: a\n\nid: 2\x00\ndata: b\n\n", []got{{"", "a", "1", 0, 15}, {"", "b", "1", 15, 31}}},
		{"unknown field ignored", "foo: bar\ndata: a\n\n", []got{{"", "a", "", 0, 18}}},
		{"block without data", "event: x\n\ndata: a\n\n", []got{{"", "a", "", 10, 19}}},
		{"unterminated event not dispatched", "data: a\n\ndata: b\n", []got{{"", "a", "", 0, 9}}},
		{"done", "data: [DONE]\n\n", []got{{"", "[DONE]", "", 0, 14}}},
		{"blank lines between", "\n\n\ndata: a\n\n", []got{{"", "a", "", 3, 12}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte(tt.in)
			ref, err := reference(in, 0)
			if err != nil {
				t.Fatalf("reference: %v", err)
			}
			if fmt.Sprint(ref) != fmt.Sprint(tt.want) {
				t.Fatalf("reference disagrees with the table:\n got %v\nwant %v", ref, tt.want)
			}
			// Every single cut point, and every byte on its own.
			for cut := 0; cut <= len(in); cut++ {
				evs, s := scanChunks(in, 0, []int{cut})
				if s.Err() != nil || fmt.Sprint(evs) != fmt.Sprint(tt.want) {
					t.Fatalf("cut at %d: err %v\n got %v\nwant %v", cut, s.Err(), evs, tt.want)
				}
			}
			every := make([]int, len(in))
			for i := range every {
				every[i] = i
			}
			evs, _ := scanChunks(in, 0, every)
			if fmt.Sprint(evs) != fmt.Sprint(tt.want) {
				t.Fatalf("byte by byte:\n got %v\nwant %v", evs, tt.want)
			}
		})
	}
}

func TestRetry(t *testing.T) {
	var s Scanner
	s.Feed([]byte("retry: 1500\nretry: x\n\n"))
	for _, ok := s.Next(); ok; _, ok = s.Next() {
	}
	d, ok := s.Retry()
	if !ok || d != 1500*time.Millisecond {
		t.Fatalf("Retry = %v, %v; want 1.5s, true", d, ok)
	}
}

func TestPendingAndOffsets(t *testing.T) {
	var s Scanner
	s.Feed([]byte("data: a\n\ndata: b"))
	n := 0
	for _, ok := s.Next(); ok; _, ok = s.Next() {
		n++
	}
	if n != 1 || !s.Pending() || s.BlockStart() != 9 || s.Offset() != 16 {
		t.Fatalf("events %d pending %v blockStart %d offset %d; want 1 true 9 16", n, s.Pending(), s.BlockStart(), s.Offset())
	}
	s.Feed([]byte("\n\n"))
	ev, ok := s.Next()
	if !ok || string(ev.Data) != "b" || s.Pending() {
		t.Fatalf("second event: ok %v pending %v", ok, s.Pending())
	}
	s.Reset()
	if s.Pending() || s.Offset() != 0 {
		t.Fatalf("Reset left state behind")
	}
}

// TestLargeEvents checks that events far beyond bufio.Scanner's 64 KiB line
// limit pass, up to exactly 16 MiB, and that one byte more is a clear error.
func TestLargeEvents(t *testing.T) {
	for _, size := range []int{64 << 10, 1 << 20, MaxEvent} {
		payload := bytes.Repeat([]byte{'x'}, size)
		in := append(append([]byte("data: "), payload...), "\n\ndata: [DONE]\n\n"...)
		var s Scanner
		var sizes []int
		for off := 0; off < len(in); off += 32 << 10 {
			s.Feed(in[off:min(off+32<<10, len(in))])
			for ev, ok := s.Next(); ok; ev, ok = s.Next() {
				sizes = append(sizes, len(ev.Data))
			}
		}
		if s.Err() != nil || len(sizes) != 2 || sizes[0] != size {
			t.Fatalf("size %d: err %v, event sizes %v", size, s.Err(), sizes)
		}
	}
	// Beyond the limit, as one line and as many data lines.
	over := append(append([]byte("data: "), bytes.Repeat([]byte{'x'}, MaxEvent+1)...), "\n\n"...)
	lines := bytes.Repeat([]byte("data: "+strings.Repeat("y", 1<<20-1)+"\n"), 17)
	for name, in := range map[string][]byte{"one line": over, "many lines": lines} {
		var s Scanner
		n := 0
		for off := 0; off < len(in); off += 1 << 20 {
			s.Feed(in[off:min(off+1<<20, len(in))])
			for _, ok := s.Next(); ok; _, ok = s.Next() {
				n++
			}
		}
		if !errors.Is(s.Err(), ErrTooLarge) || n != 0 {
			t.Fatalf("%s: err %v, %d events; want ErrTooLarge and none", name, s.Err(), n)
		}
		if c := cap(s.line) + cap(s.data); c > 2*(MaxEvent+lineSlack) {
			t.Fatalf("%s: buffers grew to %d bytes", name, c)
		}
		s.Reset()
		if c := cap(s.line) + cap(s.data); c > 0 {
			t.Fatalf("%s: Reset kept %d bytes of buffers", name, c)
		}
	}
}

// vllmChunk is a realistic vLLM chat chunk (~250 bytes on the wire).
const vllmChunk = `data: {"id":"chatcmpl-8f3a2c1e9b7d4f6a8c0e2b4d6f8a0c2e","object":"chat.completion.chunk","created":1764489600,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":{"content":" the"},"logprobs":null,"finish_reason":null}]}` + "\n\n"

func TestNoAllocsPerEvent(t *testing.T) {
	one := []byte(vllmChunk)
	split := []byte(vllmChunk + vllmChunk + vllmChunk)
	var s Scanner
	run := func(p []byte) {
		s.Feed(p)
		for _, ok := s.Next(); ok; _, ok = s.Next() {
		}
	}
	// Warm the buffers once, then no chunking may allocate.
	run(split[:100])
	run(split[100:])
	for name, f := range map[string]func(){
		"one event per read":  func() { run(one) },
		"events split at 100": func() { run(split[:100]); run(split[100:]) },
		"byte by byte (3 events)": func() {
			for i := range split {
				run(split[i : i+1])
			}
		},
	} {
		if a := testing.AllocsPerRun(200, f); a != 0 {
			t.Errorf("%s: %v allocs per run, want 0", name, a)
		}
	}
}

// chunkings returns cut-point sets for in: whole, byte by byte, and a few
// random ones drawn from seed.
func chunkings(n int, seed uint64) [][]int {
	every := make([]int, n)
	for i := range every {
		every[i] = i
	}
	out := [][]int{nil, every}
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for k := 0; k < 4; k++ {
		var cuts []int
		for at := 0; at < n; {
			at += 1 + r.IntN(1+n/3)
			cuts = append(cuts, at)
		}
		out = append(out, cuts)
	}
	return out
}

func FuzzScanner(f *testing.F) {
	for _, s := range []string{
		"data: a\n\n", "data: a\r\n\r\n", "data: a\r\r", "data: a\ndata: b\n\n",
		": c\n\nevent: e\nid: 1\ndata: x\n\n", "data\n\n", "data:\n\ndata: [DONE]\n\n",
		vllmChunk + vllmChunk, "data: " + strings.Repeat("z", 80) + "\n\n", "\r\n\r\ndata:  x\r",
	} {
		f.Add([]byte(s), uint64(len(s)), uint8(0))
		f.Add([]byte(s), uint64(7), uint8(40))
	}
	f.Fuzz(func(t *testing.T, in []byte, seed uint64, smallMax uint8) {
		max := 0
		if smallMax > 0 {
			max = int(smallMax) // exercises the limit on small inputs
		}
		want, werr := reference(in, max)
		for _, cuts := range chunkings(len(in), seed) {
			evs, s := scanChunks(in, max, cuts)
			if (werr == nil) != (s.Err() == nil) || (werr != nil && !errors.Is(s.Err(), werr)) {
				t.Fatalf("cuts %v: err %v, reference %v", cuts, s.Err(), werr)
			}
			if fmt.Sprint(evs) != fmt.Sprint(want) {
				t.Fatalf("cuts %v:\n got %v\nwant %v", cuts, evs, want)
			}
		}
	})
}

// BenchmarkScanner measures scanning realistic ~250-byte vLLM chunks, read
// as one event per read (how engines flush) and as 16 KiB reads (a proxy
// under load). It reports events/s; allocs/op is per event.
func BenchmarkScanner(b *testing.B) {
	b.Run("one-event-per-read", func(b *testing.B) {
		p := []byte(vllmChunk)
		var s Scanner
		b.SetBytes(int64(len(p)))
		b.ReportAllocs()
		cpu := benchcpu.Now()
		for b.Loop() {
			s.Feed(p)
			for _, ok := s.Next(); ok; _, ok = s.Next() {
			}
		}
		benchcpu.Report(b, cpu)
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("16KiB-reads", func(b *testing.B) {
		stream := []byte(strings.Repeat(vllmChunk, 4096))
		const read = 16 << 10
		var s Scanner
		b.SetBytes(int64(len(vllmChunk)))
		b.ReportAllocs()
		off := 0
		cpu := benchcpu.Now()
		for b.Loop() {
			// One op is one event: feed reads until an event comes out.
			for {
				if ev, ok := s.Next(); ok {
					_ = ev
					break
				}
				if off >= len(stream) {
					off = 0
				}
				s.Feed(stream[off:min(off+read, len(stream))])
				off += read
			}
		}
		benchcpu.Report(b, cpu)
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
}
