package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"
	"testing/iotest"
	"time"

	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/tap"
)

// chunk encodes data as a chunked body, cutting it at the given sizes.
func chunk(data []byte, sizes []int, ext string) []byte {
	var b bytes.Buffer
	for i := 0; len(data) > 0; i++ {
		n := len(data)
		if len(sizes) > 0 {
			n = min(max(sizes[i%len(sizes)], 1), len(data))
		}
		fmt.Fprintf(&b, "%x%s\r\n", n, ext)
		b.Write(data[:n])
		b.WriteString("\r\n")
		data = data[n:]
	}
	b.WriteString("0\r\nX-Trailer: 1\r\n\r\n")
	return b.Bytes()
}

// decodeAll runs a bodyReader over r to the end, checking that each read
// delivers something or ends.
func decodeAll(t testing.TB, r io.Reader, frame int, length int64) ([]byte, error) {
	var b bodyReader
	b.reset(bufio.NewReaderSize(r, 64), frame, length)
	var out []byte
	for i := 0; ; i++ {
		got := 0
		err := b.read(func(p []byte) { out = append(out, p...); got += len(p) })
		if err != nil {
			if err == io.EOF {
				return out, nil
			}
			return out, err
		}
		if got == 0 && i > 1<<20 {
			t.Fatal("read returns nothing forever")
		}
	}
}

func TestBodyReader(t *testing.T) {
	data := []byte("data: {\"x\":1}\n\ndata: [DONE]\n\n")
	tests := []struct {
		name   string
		wire   []byte
		frame  int
		length int64
		want   []byte
		err    error
	}{
		{"chunked", chunk(data, []int{7, 3}, ""), frameChunked, 0, data, nil},
		{"chunked with extensions", chunk(data, []int{5}, ";ext=1"), frameChunked, 0, data, nil},
		{"chunked, bare LF after data", []byte("3\r\nabc\n0\r\n\r\n"), frameChunked, 0, []byte("abc"), nil},
		{"chunked cut", chunk(data, []int{4}, "")[:20], frameChunked, 0, nil, io.ErrUnexpectedEOF},
		{"chunked bad size", []byte("zz\r\nabc\r\n0\r\n\r\n"), frameChunked, 0, nil, errChunkLine},
		{"chunked no CRLF", []byte("3\r\nabcX0\r\n\r\n"), frameChunked, 0, []byte("abc"), errChunkCRLF},
		{"length", append(append([]byte(nil), data...), "next response"...), frameLength, int64(len(data)), data, nil},
		{"length cut", data[:10], frameLength, int64(len(data)), data[:10], io.ErrUnexpectedEOF},
		{"until close", data, frameClose, 0, data, nil},
		{"none", data, frameNone, 0, nil, nil},
	}
	for _, tt := range tests {
		for _, split := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/byte-by-byte=%v", tt.name, split), func(t *testing.T) {
				var r io.Reader = bytes.NewReader(tt.wire)
				if split {
					r = iotest.OneByteReader(r)
				}
				got, err := decodeAll(t, r, tt.frame, tt.length)
				if tt.err != nil {
					if !errors.Is(err, tt.err) {
						t.Fatalf("error %v, want %v", err, tt.err)
					}
					if tt.want != nil && !bytes.HasPrefix(got, tt.want) {
						t.Fatalf("got %q before the error, want %q", got, tt.want)
					}
					return
				}
				if err != nil || !bytes.Equal(got, tt.want) {
					t.Fatalf("got %q, %v; want %q", got, err, tt.want)
				}
			})
		}
	}
}

// TestBodyReaderCoalesces checks that what arrived in one network read is
// handed on in one read call, across chunk boundaries.
func TestBodyReaderCoalesces(t *testing.T) {
	wire := chunk([]byte("aaaabbbbccccdddd"), []int{4}, "")
	var b bodyReader
	b.reset(bufio.NewReader(bytes.NewReader(wire)), frameChunked, 0)
	var got []byte
	err := b.read(func(p []byte) { got = append(got, p...) })
	if string(got) != "aaaabbbbccccdddd" || err != io.EOF {
		t.Fatalf("one read gave %q, %v; want all four chunks and the end", got, err)
	}
}

// FuzzBodyReader decodes arbitrary chunkings of arbitrary data delivered in
// arbitrary read sizes, and arbitrary bytes as a chunked body: it never
// panics, never loops, and a valid encoding always decodes to its data.
func FuzzBodyReader(f *testing.F) {
	f.Add([]byte("data: hi\n\n"), uint8(3), uint8(1), []byte("5\r\nhello\r\n0\r\n\r\n"))
	f.Add([]byte{}, uint8(1), uint8(7), []byte("ffffffffffffffff\r\n"))
	f.Add([]byte("x"), uint8(0), uint8(2), []byte("1;a=b\r\nx\n0\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte, size, readSize uint8, raw []byte) {
		wire := chunk(data, []int{int(size)}, "")
		r := &sizedReader{b: wire, n: int(readSize%32) + 1}
		got, err := decodeAll(t, r, frameChunked, 0)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("valid chunked body decoded to %q, %v; want %q", got, err, data)
		}
		got, _ = decodeAll(t, &sizedReader{b: raw, n: int(readSize%32) + 1}, frameChunked, 0)
		if len(got) > len(raw) {
			t.Fatalf("decoded %d bytes from %d", len(got), len(raw))
		}
	})
}

// sizedReader returns at most n bytes per Read.
type sizedReader struct {
	b []byte
	n int
}

func (r *sizedReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.n)], r.b)
	r.b = r.b[n:]
	return n, nil
}

func TestInjectUsage(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		inject bool   // wantsInjection
		want   string // exact output when the bytes are kept
	}{
		{"no options", `{"model":"m","stream":true}`, true, `{"stream_options":{"include_usage":true},"model":"m","stream":true}`},
		{"leading space", ` {"stream":true}`, true, ` {"stream_options":{"include_usage":true},"stream":true}`},
		{"usage off", `{"stream":true,"stream_options":{"include_usage":false}}`, true, ""},
		{"usage on", `{"stream":true,"stream_options":{"include_usage":true}}`, false, ""},
		{"options, engine default", `{"stream":true,"stream_options":{"continuous_usage_stats":true}}`, false, ""},
		{"options null", `{"stream":true,"stream_options":null}`, true, `{"stream":true,"stream_options":{"include_usage":true}}`},
		// Usage in every chunk would follow, which cannot be stripped.
		{"usage off, continuous usage", `{"stream":true,"stream_options":{"include_usage":false,"continuous_usage_stats":true}}`, false, ""},
		{"usage off, continuous usage off", `{"stream":true,"stream_options":{"include_usage":false,"continuous_usage_stats":false}}`, true, `{"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":false}}`},
		{"not streaming", `{"stream":false}`, false, ""},
		{"not json", `{"stream":true`, false, ""},
		{"array", `[{"stream":true}]`, false, ""},
		// Duplicate keys: the engine (Python's json) takes the last, so the
		// proxy cannot know what the client asked for: it changes nothing.
		{"stream_options twice", `{"stream":true,"stream_options":{"include_usage":false},"stream_options":{"include_usage":true}}`, false, ""},
		{"include_usage twice", `{"stream":true,"stream_options":{"include_usage":false,"include_usage":true}}`, false, ""},
		{"stream twice", `{"stream":true,"stream":false}`, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ri := inspect([]byte(tt.body))
			if got := ri.wantsInjection(); got != tt.inject {
				t.Fatalf("wantsInjection = %v, want %v (%+v)", got, tt.inject, ri)
			}
			if !tt.inject {
				return
			}
			out, ok := injectUsage([]byte(tt.body), ri, nil)
			if !ok {
				t.Fatal("not injected")
			}
			if tt.want != "" && string(out) != tt.want {
				t.Fatalf("got %s, want %s", out, tt.want)
			}
			if ri2 := inspect(out); !ri2.includeUsage {
				t.Fatalf("output lacks include_usage: %s", out)
			}
		})
	}
}

// FuzzInjectUsage checks on arbitrary bodies that injection yields valid
// JSON with include_usage true and every other member unchanged.
func FuzzInjectUsage(f *testing.F) {
	f.Add(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`)
	f.Add(`{"stream":true,"stream_options":{"include_usage":false,"x":[1,2.50,"\u00e9"]}}`)
	f.Add(`{"stream":true,"stream_options":{}}`)
	f.Add(` { "stream" : true } `)
	f.Fuzz(func(t *testing.T, body string) {
		ri := inspect([]byte(body))
		if !ri.wantsInjection() {
			return
		}
		out, ok := injectUsage([]byte(body), ri, nil)
		if !ok {
			return
		}
		var before, after map[string]any
		if err := json.Unmarshal([]byte(body), &before); err != nil {
			return // inspect reads only what it needs; encoding/json is the judge of the rest
		}
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatalf("injected body is not JSON: %v\n%s", err, out)
		}
		so, _ := after["stream_options"].(map[string]any)
		if so["include_usage"] != true {
			t.Fatalf("include_usage not true: %s", out)
		}
		delete(so, "include_usage")
		if bso, ok := before["stream_options"].(map[string]any); ok {
			delete(bso, "include_usage")
		} else {
			before["stream_options"] = map[string]any{}
		}
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("other members changed:\n%s\n%s", body, out)
		}
	})
}

// TestForwardAllocatesNothing checks the per-event path (decode the chunk
// from the connection buffer, measure it, strip usage, build the client's
// bytes) allocates nothing.
func TestForwardAllocatesNothing(t *testing.T) {
	event := []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" word"},"finish_reason":null}]}` + "\n\n")
	wire := fmt.Appendf(nil, "%x\r\n%s\r\n", len(event), event)
	st := tap.NewStream(record.NewClock())
	rec := record.Record{Stream: true, Arrivals: make([]time.Duration, 0, 4096)}
	st.Begin(&rec)
	st.StripUsage(true)
	st.Status(200)
	var x exchange
	x.tap, x.measure = st, true
	x.pieceFn = x.piece
	r := &repeatReader{b: wire}
	x.body.reset(bufio.NewReaderSize(r, 4096), frameChunked, 0)
	step := func() {
		x.out = x.out[:0]
		r.n = 1
		if err := x.body.read(x.pieceFn); err != nil || len(x.out) != len(event) {
			t.Fatalf("forwarded %d bytes, %v", len(x.out), err)
		}
	}
	step() // size the buffers
	if a := testing.AllocsPerRun(1000, step); a != 0 {
		t.Fatalf("%.1f allocations per event, want 0", a)
	}
}

// repeatReader returns n copies of b per Read.
type repeatReader struct {
	b []byte
	n int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	k := 0
	for ; r.n > 0 && k+len(r.b) <= len(p); r.n-- {
		k += copy(p[k:], r.b)
	}
	return k, nil
}

// blockingReader hands out n bytes at a time and errWouldBlock between
// them, as upstreamSource does in edge mode when the socket is drained.
type blockingReader struct {
	b       []byte
	n       int
	blocked bool
}

func (r *blockingReader) Read(p []byte) (int, error) {
	if !r.blocked {
		r.blocked = true
		return 0, errWouldBlock
	}
	r.blocked = false
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.n)], r.b)
	r.b = r.b[n:]
	return n, nil
}

// TestBodyReaderResumesAfterWouldBlock checks that a read that would block
// loses nothing: a partial chunk-size line, chunk data or CRLF stays
// buffered, and the next read call carries on where it stopped.
func TestBodyReaderResumesAfterWouldBlock(t *testing.T) {
	data := []byte("data: {\"x\":1}\n\ndata: [DONE]\n\n")
	tests := []struct {
		name   string
		wire   []byte
		frame  int
		length int64
	}{
		{"chunked", chunk(data, []int{7, 3}, ""), frameChunked, 0},
		{"chunked with extensions", chunk(data, []int{5}, ";ext=1"), frameChunked, 0},
		{"length", data, frameLength, int64(len(data))},
		{"until close", data, frameClose, 0},
	}
	for _, tt := range tests {
		for _, n := range []int{1, 2, 3, 7} {
			t.Run(fmt.Sprintf("%s/%d-byte-reads", tt.name, n), func(t *testing.T) {
				var b bodyReader
				b.reset(bufio.NewReaderSize(&blockingReader{b: tt.wire, n: n}, 64), tt.frame, tt.length)
				var got []byte
				blocks := 0
				for {
					err := b.read(func(p []byte) { got = append(got, p...) })
					if err == errWouldBlock {
						blocks++
						continue
					}
					if err == io.EOF {
						break
					}
					if err != nil {
						t.Fatalf("after %q: %v", got, err)
					}
				}
				if !bytes.Equal(got, data) {
					t.Fatalf("got %q, want %q", got, data)
				}
				if blocks == 0 {
					t.Fatal("the reader never said it would block: the test tests nothing")
				}
			})
		}
	}
}
