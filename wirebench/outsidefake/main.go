// Command outsidefake is the wire harness's outside engine: a small SSE
// server on the standard library alone (net/http), sharing no code with
// tokentap, so tokentap is also measured against an engine it did not
// write. The harness does not trust its timing (the capture is the truth);
// it only asks it how late it wrote against its own schedule.
//
// It serves the OpenAI completions API (POST /v1/completions, streaming or
// not; chat is refused), GET /v1/models and GET /late (its lateness: median
// and p99 in ms, and the count). It prints its base URL on stdout's first
// line. Every streamed response sends its first token ttft after the
// request was read, then one every gap, max_tokens in all, then usage when
// stream_options.include_usage asks, then [DONE].
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type completionRequest struct {
	Model         string `json:"model"`
	Prompt        any    `json:"prompt"`
	MaxTokens     int    `json:"max_tokens"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type server struct {
	model    string
	ttft     time.Duration
	gap      time.Duration
	maxLen   int
	seq      atomic.Int64
	mu       sync.Mutex
	late     []time.Duration
	maxLate  int
	lateSeen int
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on")
	model := flag.String("model", "outside", "served model name")
	ttft := flag.Duration("ttft", 50*time.Millisecond, "time from the request to the first token")
	gap := flag.Duration("gap", 20*time.Millisecond, "time between tokens")
	maxLen := flag.Int("max-model-len", 1<<20, "max model length /v1/models reports")
	flag.Parse()
	s := &server{model: *model, ttft: *ttft, gap: *gap, maxLen: *maxLen, maxLate: 1 << 21}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "outsidefake:", err)
		os.Exit(1)
	}
	fmt.Printf("http://%s\n", ln.Addr())
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("POST /v1/completions", s.completions)
	mux.HandleFunc("GET /late", s.lateness)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, "outsidefake:", err)
		os.Exit(1)
	}
}

func (s *server) models(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model","owned_by":"outside","max_model_len":%d}]}`, s.model, s.maxLen)
}

// promptTokens counts a prompt's tokens as one per word, at least one.
func promptTokens(p any) int {
	var text string
	switch v := p.(type) {
	case string:
		text = v
	case []any:
		for _, e := range v {
			if str, ok := e.(string); ok {
				text += " " + str
			}
		}
	}
	return max(1, len(strings.Fields(text)))
}

func (s *server) completions(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	var req completionRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, `{"error":{"message":"body is not JSON"}}`, http.StatusBadRequest)
		return
	}
	n := max(1, req.MaxTokens)
	prompt := promptTokens(req.Prompt)
	id := fmt.Sprintf("cmpl-outside-%d", s.seq.Add(1))
	created := arrived.Unix()
	if !req.Stream {
		time.Sleep(s.ttft + time.Duration(n-1)*s.gap)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":%q,"object":"text_completion","created":%d,"model":%q,"choices":[{"text":%q,"index":0,"finish_reason":"length"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
			id, created, req.Model, strings.Repeat(" tok", n), prompt, n, prompt+n)
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "no flusher", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var late []time.Duration
	defer func() { s.keepLate(late) }()
	for i := 0; i < n; i++ {
		due := arrived.Add(s.ttft + time.Duration(i)*s.gap)
		if d := time.Until(due); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-r.Context().Done():
				return
			}
		}
		finish := "null"
		if i == n-1 {
			finish = `"length"`
		}
		if _, err := fmt.Fprintf(w, "data: {\"id\":%q,\"object\":\"text_completion\",\"created\":%d,\"model\":%q,\"choices\":[{\"text\":\" tok\",\"index\":0,\"finish_reason\":%s}]}\n\n",
			id, created, req.Model, finish); err != nil {
			return
		}
		fl.Flush()
		late = append(late, time.Since(due))
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		fmt.Fprintf(w, "data: {\"id\":%q,\"object\":\"text_completion\",\"created\":%d,\"model\":%q,\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n",
			id, created, req.Model, prompt, n, prompt+n)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
}

// keepLate keeps a reservoir of lateness samples (every one until maxLate).
func (s *server) keepLate(late []time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range late {
		s.lateSeen++
		if len(s.late) < s.maxLate {
			s.late = append(s.late, l)
		}
	}
}

func (s *server) lateness(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	late := slices.Clone(s.late)
	if r.URL.Query().Get("reset") != "" {
		s.late, s.lateSeen = s.late[:0], 0
	}
	s.mu.Unlock()
	slices.Sort(late)
	q := func(p float64) float64 {
		if len(late) == 0 {
			return 0
		}
		return float64(late[min(len(late)-1, int(p*float64(len(late))))]) / float64(time.Millisecond)
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"n":%d,"median_ms":%g,"p99_ms":%g}`, len(late), q(0.5), q(0.99))
}
