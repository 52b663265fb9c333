package wire

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
)

// FuzzRead reads arbitrary bytes as a capture: it must end, without a
// panic, in an error or in exchanges.
func FuzzRead(f *testing.F) {
	w := newPcap(binary.LittleEndian, true, LinkEthernet)
	keepAlive(w, netip.MustParseAddrPort("127.0.0.1:40000"), netip.MustParseAddrPort("127.0.0.1:8000"), 1)
	f.Add(w.buf.Bytes())
	for _, link := range []uint32{LinkSLL, LinkSLL2, LinkNull} {
		w := newPcap(binary.BigEndian, false, link)
		keepAlive(w, netip.MustParseAddrPort("[::1]:40000"), netip.MustParseAddrPort("[::1]:8000"), 1<<31)
		f.Add(w.buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Read(bytes.NewReader(b), Options{})
		if err == nil && c == nil {
			t.Fatal("no capture and no error")
		}
		if c != nil {
			for _, x := range c.Exchanges {
				if len(x.Wire.Arrivals) > x.Events {
					t.Fatalf("%d token events of %d events", len(x.Wire.Arrivals), x.Events)
				}
			}
		}
	})
}

// FuzzExchanges feeds arbitrary request and response bytes, cut into
// packets at arbitrary places (some sent twice, some out of order), to
// one connection: the HTTP and SSE extraction must never panic or hang,
// and must hold no more than a small multiple of its input.
func FuzzExchanges(f *testing.F) {
	body := `{"model":"m","prompt":"hi","max_tokens":3,"stream":true}`
	sse := tokenEvent("cmpl-1", "a") + usageEvent("cmpl-1", 1) + done
	f.Add([]byte(request(body)+request(body)), []byte(sseHead+chunk(sse)+"0\r\n\r\n"+sseHead+chunk(sse[:9])+chunk(sse[9:])+"0\r\n\r\n"), []byte{7, 200, 3, 0x81, 50})
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"), []byte("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"+sse), []byte{1})
	f.Add([]byte("HEAD / HTTP/1.1\r\n\r\n"), []byte("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"), []byte{})
	f.Add([]byte("POST /v1/chat/completions HTTP/1.1\r\nX-Request-Id: peers-3\r\nContent-Length: 2\r\n\r\n{}"), []byte(sseHead+chunk(sse)+"0\r\n\r\n"), []byte{40})
	f.Fuzz(func(t *testing.T, req, resp, cuts []byte) {
		w := newPcap(binary.LittleEndian, true, LinkEthernet)
		fl := w.flow(netip.MustParseAddrPort("127.0.0.1:40000"), netip.MustParseAddrPort("127.0.0.1:8000"), 1, 1)
		fl.handshake(at(0))
		ms := 1
		sendCut := func(up bool, p []byte) {
			for i := 0; len(p) > 0; i++ {
				n := len(p)
				var c byte
				if len(cuts) > 0 {
					c = cuts[i%len(cuts)]
					n = min(len(p), int(c&0x7f)+1)
				}
				if c&0x80 != 0 && n < len(p) {
					// Out of order: the next piece first, then this one, then this one again.
					m := min(len(p)-n, n)
					fl.at(up, at(ms), uint32(n), string(p[n:n+m]))
					fl.at(up, at(ms+1), 0, string(p[:n]))
					fl.at(up, at(ms+2), 0, string(p[:n]))
					fl.advance(up, n)
				} else {
					fl.send(up, at(ms), string(p[:n]))
				}
				ms += 3
				p = p[n:]
			}
		}
		sendCut(true, req)
		sendCut(false, resp)
		fl.fin(at(ms))
		c, err := Read(bytes.NewReader(w.buf.Bytes()), Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range c.Exchanges {
			if x.RequestID != "" && !bytes.Contains(req, []byte(x.RequestID)) {
				t.Fatalf("request id %q is not in the requests' bytes", x.RequestID)
			}
			if len(x.Wire.Arrivals) > x.Events {
				t.Fatalf("%d token events of %d events", len(x.Wire.Arrivals), x.Events)
			}
			for _, a := range x.Wire.Arrivals {
				if a < wt(0) || a > wt(ms) {
					t.Fatalf("an event at %v, outside the capture", a-wt(0))
				}
			}
		}
		if len(c.Exchanges) > len(req)+len(resp) {
			t.Fatalf("%d exchanges from %d bytes", len(c.Exchanges), len(req)+len(resp))
		}
	})
}
