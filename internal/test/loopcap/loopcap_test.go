package loopcap

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tokentap/tokentap/internal/wire"
)

// TestCapture captures one streamed exchange over the loopback and reads
// it back with package wire: its request id, its events, their order.
// Without tcpdump, or without the right to capture, it is skipped,
// saying which.
func TestCapture(t *testing.T) {
	tl, err := Find()
	if err != nil {
		t.Skipf("no capture here: %v", err)
	}
	dir := t.TempDir()
	if err := tl.Check(dir); err != nil {
		t.Skipf("no capture here: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: {\"id\":\"cmpl-9\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\"w%d\"}]}\n\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(5 * time.Millisecond)
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	file := filepath.Join(dir, "c.pcap")
	c, err := tl.Start(file, []int{port})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", "http://127.0.0.1:"+strconv.Itoa(port)+"/v1/completions", nil)
	req.Header.Set("X-Request-Id", "peer-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
	}
	resp.Body.Close()
	dropped, err := c.Stop()
	if err != nil || dropped != 0 {
		t.Fatalf("stop: %v, %d dropped", err, dropped)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := wire.Read(f, wire.Options{Ports: []uint16{uint16(port)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Exchanges) != 1 {
		t.Fatalf("%d exchanges, want 1 (%d packets; tcpdump said: %s)", len(got.Exchanges), got.Packets, c.Text())
	}
	x := got.Exchanges[0]
	if x.RequestID != "peer-1" || x.Wire.ResponseID != "cmpl-9" || len(x.Wire.Arrivals) != 3 || !x.Complete {
		t.Errorf("exchange: request id %q, response id %q, %d events, complete %v", x.RequestID, x.Wire.ResponseID, len(x.Wire.Arrivals), x.Complete)
	}
	for i := 1; i < len(x.Wire.Arrivals); i++ {
		if x.Wire.Arrivals[i] < x.Wire.Arrivals[i-1] || x.Wire.Arrivals[0] < x.Wire.Sent {
			t.Errorf("events out of order: sent %v, events %v", x.Wire.Sent, x.Wire.Arrivals)
		}
	}
}
