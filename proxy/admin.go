package proxy

import (
	"bytes"
	"net/http"
	"strconv"
)

// AdminHandler serves the admin endpoints:
//
//	GET  /metrics  Prometheus text exposition (histograms of TTFT, time
//	               between tokens, request duration, prompt and output tokens
//	               per model; requests by model, outcome and blame; in flight)
//	GET  /stats    JSON per-model summary with HDR percentiles since the last reset
//	POST /stats    the same summary, then a reset (Prometheus series are never reset)
//	GET  /healthz  "ok"
//
// Serve it on a loopback address: it shows which models clients use.
func (p *Proxy) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		var b bytes.Buffer
		p.m.writeProm(&b)
		b.WriteString("# HELP tokentap_upstream_connections Connections to the engine open now, busy or idle.\n# TYPE tokentap_upstream_connections gauge\n")
		b.WriteString("tokentap_upstream_connections " + strconv.Itoa(p.hc.ConnsCount()) + "\n")
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write(b.Bytes())
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(p.m.stats(false).encode())
	})
	mux.HandleFunc("POST /stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(p.m.stats(true).encode())
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}
