package proxy

import (
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tokentap/tokentap/record"
)

// benchRecord is a finished 256-token stream as the proxy records it.
func benchRecord() *record.Record {
	r := &record.Record{Model: "m", Stream: true, Outcome: record.OK, Sent: 0, PromptTokens: 1000, CompletionTokens: 256,
		PromptSource: record.SourceUsage, CompletionSource: record.SourceUsage}
	at := 30 * time.Millisecond
	for range 256 {
		r.AddEvent(at, 1)
		at += 6*time.Millisecond + time.Duration(len(r.Arrivals)%7)*100*time.Microsecond
	}
	r.End = at
	return r
}

// BenchmarkMetricsAdd is what the proxy's metrics cost per token event:
// folding a finished 256-event stream into /metrics and /stats, divided by
// its events (ns/event).
func BenchmarkMetricsAdd(b *testing.B) {
	m := newMetrics()
	r := benchRecord()
	b.ReportAllocs()
	for b.Loop() {
		m.add(r)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(r.Arrivals)), "ns/event")
}

// BenchmarkMetricsScrape is one GET /metrics with 20 models' series.
func BenchmarkMetricsScrape(b *testing.B) {
	p := &Proxy{m: newMetrics()}
	r := benchRecord()
	for i := range 20 {
		r.Model = "model-" + string(rune('a'+i))
		p.m.add(r)
	}
	h := p.AdminHandler()
	req := httptest.NewRequest("GET", "/metrics", nil)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		_, _ = io.Copy(io.Discard, w.Body)
	}
}
