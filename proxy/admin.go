package proxy

import (
	"net/http"
)

// ResetHeader must be "1" on POST /stats for it to reset.
const ResetHeader = "X-Tokentap-Reset"

// AdminHandler serves the admin endpoints:
//
//	GET  /metrics  Prometheus exposition (histograms of TTFT, time between
//	               tokens, request duration, prompt and output tokens per
//	               model, native with classic buckets too; requests by model,
//	               outcome and blame; in flight; the Go process)
//	GET  /stats    JSON per-model summary with HDR percentiles since the last reset
//	POST /stats    the same summary, then a reset (Prometheus series are never
//	               reset); only with the header X-Tokentap-Reset: 1
//	GET  /healthz  "ok"; 503 "draining" once the proxy is shutting down
//	               (Close), so a load balancer stops sending to it
//
// Serve it on a loopback address: it shows which models clients use.
func (p *Proxy) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", p.m.handler())
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(p.m.stats(false).encode())
	})
	mux.HandleFunc("POST /stats", func(w http.ResponseWriter, r *http.Request) {
		// A header a web page cannot send without asking first (CORS), so
		// no page a user visits can reset the proxy's figures.
		if r.Header.Get(ResetHeader) != "1" {
			http.Error(w, "tokentap proxy: POST /stats resets the figures only with the header "+ResetHeader+": 1", http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(p.m.stats(true).encode())
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if p.Draining() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("draining\n"))
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}
