package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/record"
)

var t0 = time.Unix(1_700_000_000, 0)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// wt is a wire time as Exchange holds them.
func wt(ms int) time.Duration { return time.Duration(at(ms).UnixNano()) }

func tokenEvent(id, text string) string {
	return `data: {"id":"` + id + `","object":"text_completion","created":1,"model":"m","choices":[{"text":"` + text + `","index":0,"finish_reason":null}]}` + "\n\n"
}

func usageEvent(id string, completion int) string {
	return fmt.Sprintf(`data: {"id":%q,"object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n", id, completion, 5+completion)
}

const done = "data: [DONE]\n\n"

func chunk(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }

func request(body string) string {
	return "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
		fmt.Sprint(len(body)) + "\r\n\r\n" + body
}

const sseHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

// keepAlive writes one connection with three exchanges: a chunked SSE
// stream whose packets come split, out of order and retransmitted; a
// Content-Length SSE body split across packets; and a close-delimited
// JSON body ended by FIN.
func keepAlive(w *pcapWriter, client, server netip.AddrPort, isn uint32) {
	f := w.flow(client, server, isn, 7)
	f.handshake(at(0))
	body := `{"model":"m","prompt":"hi","max_tokens":3,"stream":true}`
	req := request(body)
	f.send(true, at(1), req[:len(req)-10])
	f.send(true, at(2), req[len(req)-10:]) // the request's last byte: 2 ms

	f.send(false, at(10), sseHead)
	f.send(false, at(50), chunk(tokenEvent("cmpl-1", "a")))
	e2 := chunk(tokenEvent("cmpl-1", "b"))
	f.send(false, at(70), e2[:20]) // an event split across packets: its first byte came at 70
	f.send(false, at(72), e2[20:])
	e3 := chunk(tokenEvent("cmpl-1", "c"))
	f.at(false, at(90), 30, e3[30:]) // its tail first, out of order
	f.at(false, at(91), 0, e3[:30])  // then its head: the first byte's packet is at 91
	f.at(false, at(95), 0, e3[:40])  // a retransmission changes nothing
	f.advance(false, len(e3))
	f.send(false, at(100), chunk(usageEvent("cmpl-1", 3))) // not a token event
	f.send(false, at(101), chunk(done))
	f.send(false, at(102), "0\r\n\r\n")

	req2 := request(body)
	req2 = strings.Replace(req2, "Host: 127.0.0.1\r\n", "Host: 127.0.0.1\r\nx-request-id:  bench-7 \r\n", 1) // as vLLM's bench serve names its requests
	f.send(true, at(200), req2)
	resp := tokenEvent("cmpl-2", "x") + ": a comment\n\n" + tokenEvent("cmpl-2", "y") + done
	head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nContent-Length: " + fmt.Sprint(len(resp)) + "\r\n\r\n"
	f.send(false, at(250), head+resp[:5])
	f.send(false, at(260), resp[5:])

	f.send(true, at(300), "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
	f.send(false, at(301), "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"data\":[]}")
	f.send(false, at(302), "\n")
	f.fin(at(303))
}

func checkKeepAlive(t *testing.T, c *Capture) {
	t.Helper()
	if len(c.Exchanges) != 3 {
		t.Fatalf("%d exchanges, want 3: %+v", len(c.Exchanges), c.Exchanges)
	}
	x := c.Exchanges[0]
	if x.Method != "POST" || x.Path != "/v1/completions" || x.Status != 200 || !x.Complete || !x.ReqDone {
		t.Errorf("exchange 1: %s %s %d complete %v req %v", x.Method, x.Path, x.Status, x.Complete, x.ReqDone)
	}
	if x.Wire.ResponseID != "cmpl-1" {
		t.Errorf("exchange 1 id %q", x.Wire.ResponseID)
	}
	if x.Wire.Sent != wt(2) {
		t.Errorf("request's last byte at %v, want 2 ms", x.Wire.Sent-wt(0))
	}
	want := []time.Duration{wt(50), wt(70), wt(91)}
	if !slices.Equal(x.Wire.Arrivals, want) {
		t.Errorf("token events at %v, want %v", rel(x.Wire.Arrivals), rel(want))
	}
	if x.Wire.End != wt(101) || x.Last != wt(102) || x.Head != wt(10) {
		t.Errorf("end %v last %v head %v, want 101, 102, 10 ms", x.Wire.End-wt(0), x.Last-wt(0), x.Head-wt(0))
	}
	if x.Wire.Outcome != record.OK || x.Wire.CompletionTokens != 3 {
		t.Errorf("outcome %s, %d tokens", x.Wire.Outcome, x.Wire.CompletionTokens)
	}
	if x.Events != 5 || x.Split != 2 {
		t.Errorf("%d events, %d split; want 5, 2", x.Events, x.Split)
	}
	y := c.Exchanges[1]
	if x.RequestID != "" || y.RequestID != "bench-7" {
		t.Errorf("request ids %q, %q; want none, bench-7", x.RequestID, y.RequestID)
	}
	if y.Wire.ResponseID != "cmpl-2" || y.Wire.Sent != wt(200) || !y.Complete {
		t.Errorf("exchange 2: id %q sent %v complete %v", y.Wire.ResponseID, y.Wire.Sent-wt(0), y.Complete)
	}
	if want := []time.Duration{wt(250), wt(260)}; !slices.Equal(y.Wire.Arrivals, want) {
		t.Errorf("exchange 2 events at %v, want %v", rel(y.Wire.Arrivals), rel(want))
	}
	if y.Wire.End != wt(260) {
		t.Errorf("exchange 2 ends at %v", y.Wire.End-wt(0))
	}
	z := c.Exchanges[2]
	if z.Method != "GET" || z.Status != 200 || !z.Complete || z.Last != wt(302) || z.Wire.Stream || len(z.Wire.Arrivals) != 0 {
		t.Errorf("exchange 3: %s %d complete %v last %v stream %v", z.Method, z.Status, z.Complete, z.Last-wt(0), z.Wire.Stream)
	}
	if c.Holed != 0 || c.BadHTTP != 0 || c.Conns != 1 {
		t.Errorf("holed %d, bad %d, conns %d", c.Holed, c.BadHTTP, c.Conns)
	}
}

func rel(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d - wt(0)
	}
	return out
}

func TestExchangesEveryFormat(t *testing.T) {
	v4c, v4s := netip.MustParseAddrPort("127.0.0.1:40000"), netip.MustParseAddrPort("127.0.0.1:8000")
	v6c, v6s := netip.MustParseAddrPort("[::1]:40000"), netip.MustParseAddrPort("[::1]:8000")
	for _, order := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		for _, nano := range []bool{false, true} {
			for _, link := range []uint32{LinkEthernet, LinkSLL, LinkSLL2, LinkNull} {
				for _, v6 := range []bool{false, true} {
					name := fmt.Sprintf("%s/nano=%v/link=%d/v6=%v", order, nano, link, v6)
					t.Run(name, func(t *testing.T) {
						w := newPcap(order, nano, link)
						c, s := v4c, v4s
						if v6 {
							c, s = v6c, v6s
						}
						keepAlive(w, c, s, 1000)
						capt, err := Read(bytes.NewReader(w.buf.Bytes()), Options{})
						if err != nil {
							t.Fatal(err)
						}
						if capt.LinkType != link {
							t.Errorf("link type %d", capt.LinkType)
						}
						checkKeepAlive(t, capt)
					})
				}
			}
		}
	}
}

// The sequence numbers wrap past 2^32 in the middle of the stream.
func TestSequenceWrap(t *testing.T) {
	w := newPcap(binary.LittleEndian, true, LinkEthernet)
	keepAlive(w, netip.MustParseAddrPort("127.0.0.1:40000"), netip.MustParseAddrPort("127.0.0.1:8000"), 0xffffffff-100)
	c, err := Read(bytes.NewReader(w.buf.Bytes()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkKeepAlive(t, c)
}

func TestNanosecondsKept(t *testing.T) {
	for _, nano := range []bool{false, true} {
		w := newPcap(binary.BigEndian, nano, LinkEthernet)
		ts := t0.Add(123456789 * time.Nanosecond)
		w.packet(ts, []byte{1, 2, 3})
		r, err := NewReader(bytes.NewReader(w.buf.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		p, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		want := ts
		if !nano {
			want = ts.Truncate(time.Microsecond)
		}
		if !p.Time.Equal(want) || r.Nano() != nano || !bytes.Equal(p.Data, []byte{1, 2, 3}) {
			t.Errorf("nano=%v: time %v, want %v", nano, p.Time, want)
		}
		if _, err := r.Next(); err != io.EOF {
			t.Errorf("after the last packet: %v", err)
		}
	}
}

func TestReaderErrors(t *testing.T) {
	if _, err := NewReader(strings.NewReader("\x0a\x0d\x0d\x0a pcapng file header.....")); !errors.Is(err, ErrFormat) {
		t.Errorf("pcapng: %v", err)
	}
	if _, err := NewReader(strings.NewReader("short")); !errors.Is(err, ErrFormat) {
		t.Errorf("short: %v", err)
	}
	w := newPcap(binary.LittleEndian, false, LinkEthernet)
	h := make([]byte, 16)
	binary.LittleEndian.PutUint32(h[8:], MaxPacket+1)
	w.buf.Write(h)
	if _, err := Read(bytes.NewReader(w.buf.Bytes()), Options{}); !errors.Is(err, ErrFormat) {
		t.Errorf("a huge packet: %v", err)
	}
	// A file cut inside a packet: what came before is read.
	w = newPcap(binary.LittleEndian, false, LinkEthernet)
	keepAlive(w, netip.MustParseAddrPort("127.0.0.1:40000"), netip.MustParseAddrPort("127.0.0.1:8000"), 5)
	w.packet(at(400), make([]byte, 100))
	b := w.buf.Bytes()
	c, err := Read(bytes.NewReader(b[:len(b)-50]), Options{})
	if err != nil || !c.Truncated {
		t.Fatalf("cut file: %v, truncated %v", err, c != nil && c.Truncated)
	}
	checkKeepAlive(t, c)
}

// A packet the capture lost leaves a hole: the stream is read up to it,
// and the capture says so.
func TestHole(t *testing.T) {
	w := newPcap(binary.LittleEndian, true, LinkEthernet)
	f := w.flow(netip.MustParseAddrPort("127.0.0.1:40000"), netip.MustParseAddrPort("127.0.0.1:8000"), 1, 1)
	f.handshake(at(0))
	f.send(true, at(1), request("{}"))
	f.send(false, at(10), sseHead)
	f.send(false, at(20), chunk(tokenEvent("cmpl-9", "a")))
	lost := chunk(tokenEvent("cmpl-9", "b"))
	f.advance(false, len(lost)) // never captured
	f.send(false, at(40), chunk(tokenEvent("cmpl-9", "c")))
	f.fin(at(50))
	c, err := Read(bytes.NewReader(w.buf.Bytes()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Holed != 1 || len(c.Exchanges) != 1 {
		t.Fatalf("holed %d, %d exchanges", c.Holed, len(c.Exchanges))
	}
	x := c.Exchanges[0]
	if x.Complete || len(x.Wire.Arrivals) != 1 || x.Wire.Outcome != record.Broken {
		t.Errorf("complete %v, %d events, outcome %s", x.Complete, len(x.Wire.Arrivals), x.Wire.Outcome)
	}
}

// Two connections on different server ports, and a reused 4-tuple: Ports
// keeps one port's exchanges, and a new SYN starts a new connection.
func TestPortsAndReuse(t *testing.T) {
	w := newPcap(binary.LittleEndian, true, LinkEthernet)
	cl := netip.MustParseAddrPort("127.0.0.1:40000")
	for i, port := range []string{"8000", "9000", "8000"} {
		f := w.flow(cl, netip.MustParseAddrPort("127.0.0.1:"+port), uint32(i*1000), 5)
		f.handshake(at(i * 100))
		f.send(true, at(i*100+1), request("{}"))
		f.send(false, at(i*100+2), sseHead+chunk(tokenEvent(fmt.Sprintf("id-%d", i), "a"))+chunk(done)+"0\r\n\r\n")
		f.fin(at(i*100 + 3))
	}
	c, err := Read(bytes.NewReader(w.buf.Bytes()), Options{Ports: []uint16{8000}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, x := range c.Exchanges {
		ids = append(ids, x.Wire.ResponseID)
	}
	if !slices.Equal(ids, []string{"id-0", "id-2"}) || c.Conns != 3 {
		t.Errorf("ids %v, %d conns", ids, c.Conns)
	}
}

// A capture that began mid-connection: no SYN; the request line tells the
// client.
func TestNoHandshake(t *testing.T) {
	w := newPcap(binary.LittleEndian, true, LinkEthernet)
	f := w.flow(netip.MustParseAddrPort("127.0.0.1:1000"), netip.MustParseAddrPort("127.0.0.1:50000"), 77, 99)
	f.send(true, at(1), request("{}"))
	f.send(false, at(5), sseHead+chunk(tokenEvent("id", "a"))+chunk(done)+"0\r\n\r\n")
	c, err := Read(bytes.NewReader(w.buf.Bytes()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Exchanges) != 1 || c.Exchanges[0].Server.Port() != 50000 || len(c.Exchanges[0].Wire.Arrivals) != 1 {
		t.Fatalf("%+v", c.Exchanges)
	}
}

func TestCompare(t *testing.T) {
	wall := t0
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	recs := []record.Record{
		{ResponseID: "a", Wall: wall, Sent: ms(1000), First: ms(1051), Arrivals: []time.Duration{ms(1051), ms(1071), ms(1092)}, End: ms(1100), Outcome: record.OK},
		{ResponseID: "zz", Wall: wall, Sent: ms(0)},
	}
	xs := []Exchange{{ReqDone: true, Wire: record.Record{ResponseID: "a", Sent: wt(0), First: wt(50),
		Arrivals: []time.Duration{wt(50), wt(70), wt(90)}, End: wt(99), Outcome: record.OK}}}
	pairs, un := Match(recs, xs)
	if len(pairs) != 1 || un != 1 {
		t.Fatalf("%d pairs, %d unmatched", len(pairs), un)
	}
	e := Compare(pairs)
	if len(e.TTFTRel) != 1 || e.TTFTAbs[0] != ms(1) || fmt.Sprintf("%.3f", e.TTFTRel[0]) != "0.020" {
		t.Errorf("ttft %v %v", e.TTFTAbs, e.TTFTRel)
	}
	if !slices.Equal(e.Gap, []time.Duration{0, ms(1)}) || !slices.Equal(e.WireGap, []time.Duration{ms(20), ms(20)}) {
		t.Errorf("gaps %v, wire %v", e.Gap, e.WireGap)
	}
	if !slices.Equal(e.E2E, []time.Duration{ms(1)}) || !slices.Equal(e.Offset, []time.Duration{0}) {
		t.Errorf("e2e %v offset %v", e.E2E, e.Offset)
	}
	byRec, byWire := Tokens(recs, xs, wt(60), wt(100))
	if byRec != 2 || byWire != 2 {
		t.Errorf("tokens %d by records, %d by wire", byRec, byWire)
	}
	back := []Exchange{{ReqDone: true, Wire: record.Record{ResponseID: "a", Sent: wt(-1), Arrivals: []time.Duration{wt(49), wt(69)}}}}
	h := MeasureHop(xs, back)
	if h.Matched != 1 || !slices.Equal(h.Event, []time.Duration{ms(1), ms(1)}) || !slices.Equal(h.Request, []time.Duration{-ms(1)}) {
		t.Errorf("hop %+v", h)
	}
	// Way in 3 ms, the engine's TTFT 42 ms, way out 5 ms: 8 ms added to
	// the client's 50.
	back2 := []Exchange{{ReqDone: true, Wire: record.Record{ResponseID: "a", Sent: wt(3), Arrivals: []time.Duration{wt(45)}}}}
	if h := MeasureHop(xs, back2); !slices.Equal(h.TTFT, []time.Duration{ms(8)}) || !slices.Equal(h.Request, []time.Duration{ms(3)}) {
		t.Errorf("hop's TTFT %v, way in %v; want [8ms], [3ms]", h.TTFT, h.Request)
	}
	th := Through(xs, back)
	if len(th) != 1 || th[0].Wire.Sent != wt(0) || th[0].Wire.Arrivals[0] != wt(49) {
		t.Errorf("through %+v", th)
	}
	if q := Quantile([]float64{5, 1, 4, 2, 3}, 0.5); q != 3 {
		t.Errorf("median %v", q)
	}
}

// A hole still open a second (of capture time) after bytes beyond it
// arrived is given up on: what fills it later is not read, and the bytes
// held are let go.
func TestHoleGivenUp(t *testing.T) {
	w := newPcap(binary.LittleEndian, true, LinkEthernet)
	f := w.flow(netip.MustParseAddrPort("127.0.0.1:40000"), netip.MustParseAddrPort("127.0.0.1:8000"), 1, 1)
	f.handshake(at(0))
	f.send(true, at(1), request("{}"))
	f.send(false, at(10), sseHead)
	f.send(false, at(20), chunk(tokenEvent("cmpl-9", "a")))
	lost := chunk(tokenEvent("cmpl-9", "b"))
	third := chunk(tokenEvent("cmpl-9", "c"))
	f.at(false, at(40), uint32(len(lost)), third)
	f.at(false, at(1200), uint32(len(lost)+len(third)), chunk(done)) // over a second after the hole opened
	f.at(false, at(1500), 0, lost)                                   // too late
	c, err := Read(bytes.NewReader(w.buf.Bytes()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Holed != 1 || len(c.Exchanges) != 1 || len(c.Exchanges[0].Wire.Arrivals) != 1 {
		t.Fatalf("holed %d, exchanges %+v", c.Holed, c.Exchanges)
	}
}
