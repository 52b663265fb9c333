// Package engines asks an inference engine what it is and what it can hold
// (METHOD.md §4): it detects vLLM, SGLang, llama.cpp llama-server, TGI,
// Ollama or a plain OpenAI-compatible server from what each one answers,
// never from a flag or a guess, and records every fact with the endpoint it
// came from. It also reads the engine's waiting/running gauges during a run
// (Info.Load) and counts tokens the way the engine does (Info.CountTokens).
//
// A target that cannot be reached, refuses the API key, or is not an
// OpenAI-compatible API gets an error that says so, before any load is sent.
// The API key goes only into the Authorization header: it is never logged,
// never part of an error and never stored in a fact.
package engines

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/tokentap/tokentap/result"
)

// Engine kinds, as Info.Kind and result.Engine.Name spell them.
const (
	KindVLLM     = "vllm"
	KindSGLang   = "sglang"
	KindLlamaCpp = "llama.cpp"
	KindTGI      = "tgi"
	KindOllama   = "ollama"
	KindOpenAI   = "openai-compatible"
)

// The two request APIs CountTokens knows. A chat prompt is counted as one
// user message: {"messages":[{"role":"user","content":text}]}.
const (
	APIChat        = "chat"
	APICompletions = "completions"
)

// Fact names Probe records (result.Fact.Name).
const (
	FactKind        = "engine"
	FactVersion     = "version"
	FactModel       = "model"
	FactMaxModelLen = "max_model_len"
	FactKVCapacity  = "kv_capacity_tokens"
	FactKVMemory    = "kv_cache_memory_bytes"
	FactSlots       = "slots"
	FactTokenize    = "tokenize"
	FactGauges      = "waiting_running_gauges"
)

// Target says where the engine is and what the user told tokentap.
type Target struct {
	// BaseURL of the engine, e.g. http://127.0.0.1:8000 (a trailing /v1 is
	// accepted and removed; a missing scheme means http).
	BaseURL string
	// APIKey, sent as "Authorization: Bearer …" when set (TOKENTAP_API_KEY).
	APIKey string
	// Model to use; empty picks the first model /v1/models lists. A model
	// the engine does not list is an error.
	Model string
	// HTTPClient for every request; nil means a client with no overall
	// timeout (each probe GET is bounded by its own 10 s deadline;
	// CountTokens is bounded by its ctx).
	HTTPClient *http.Client
	// KVCapacity and MaxModelLen, when > 0, override what the engine says
	// (flags --kv-capacity and --max-model-len); the probed value, if any,
	// is still recorded as a fact.
	KVCapacity  int
	MaxModelLen int
}

// Info is what Probe found. Fields hold the effective values (a flag wins
// over a probe); Facts list every value with where it came from, in the
// order found, so a flag's fact comes after the probed fact it overrides.
type Info struct {
	Kind    string // one of the Kind constants
	Version string // engine version or build; "" when the engine does not say
	Model   string // the model name requests use
	// Models are the model ids GET /v1/models lists, in its order.
	Models      []string
	MaxModelLen int // tokens; 0 = unknown
	// EngineMaxModelLen is the context the engine itself said, before
	// --max-model-len (Target.MaxModelLen) overrode it; 0 = it said none.
	EngineMaxModelLen int
	KVCapacity        int // KV cache capacity in tokens; 0 = unknown (see KVMin, KVMax)
	// CacheBlock is the block, in tokens, the engine's prefix cache keeps
	// whole (vLLM's cache_config_info block_size: 16 on GPUs by default,
	// 128 on its CPU build); 0 = unknown. A fully cached prompt finds its
	// whole blocks before its last token in the cache, no more.
	CacheBlock int
	// KVBlocks and KVBlockSize are the KV cache's blocks and their size in
	// tokens where the engine says them (vLLM's cache_config_info
	// num_gpu_blocks and block_size); KVFromBlocks says KVCapacity is
	// their product because the engine gave no capacity of its own (a
	// vLLM without the group-aware kv_cache_size_tokens label): right
	// only for a model whose layers form one KV cache group (METHOD §4).
	KVBlocks, KVBlockSize int
	KVFromBlocks          bool
	// KVMin and KVMax bound the KV capacity where the engine says only
	// enough to bound it (0: no bound). llama-server tells each slot's
	// context and the number of slots, not whether the slots share one
	// unified KV cache (-kvu): the capacity is one slot's context if they
	// do, all slots' together if not.
	KVMin, KVMax int
	// Slots is how many requests the engine runs at once where it has a
	// fixed number of sequence slots (llama.cpp --parallel, Ollama
	// OLLAMA_NUM_PARALLEL); requests beyond it wait. 0: no such limit known.
	Slots int
	// Tokenize is true when CountTokens uses the engine's POST /tokenize
	// (cheap). When false, every count is a max_tokens:1 request whose
	// usage.prompt_tokens is read (a real prefill on the engine).
	Tokenize bool
	// Gauges is true when Load can read waiting/running gauges.
	Gauges bool
	// ModelFacts is what the engine says of its model's size and shape
	// (model.go), for the decode limit.
	ModelFacts ModelFacts
	// BaseURL is the normalized target URL, credentials redacted.
	BaseURL string
	Facts   []result.Fact

	c *client

	slotsAtLeast bool // Slots is a lower bound (every probe stream ran at once)

	mu      sync.Mutex
	offsets map[string]int // usage.prompt_tokens − /tokenize count, per API
}

func (in *Info) add(name, value, source string) {
	in.Facts = append(in.Facts, result.Fact{Name: name, Value: value, Source: source})
}

func (in *Info) addInt(name string, v int, source string) {
	in.add(name, strconv.Itoa(v), source)
}

// Probe asks the engine at t.BaseURL what it is, engine by engine, and
// returns what it found. Errors wrap ErrUnreachable, ErrUnauthorized or
// ErrNotOpenAI and say what to do; they never contain the API key.
func Probe(ctx context.Context, t Target) (*Info, error) {
	if strings.TrimSpace(t.BaseURL) == "" {
		return nil, errors.New("no target URL: pass --target http://HOST:PORT (the engine's base URL)")
	}
	base, shown, err := NormalizeBase(t.BaseURL)
	if err != nil {
		return nil, err
	}
	hc := t.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	c := &client{base: base, shown: shown, apiKey: t.APIKey, hc: hc}
	in := &Info{Kind: KindOpenAI, BaseURL: shown, c: c}

	// 1. The OpenAI model list: reachability, auth, and "is this an API".
	models, err := c.get(ctx, "/v1/models")
	if err != nil {
		return nil, err
	}
	if models.status == http.StatusUnauthorized || models.status == http.StatusForbidden {
		return nil, c.authError("GET /v1/models", models.status)
	}
	if models.isHTML() {
		return nil, fmt.Errorf("%w: %s answers GET /v1/models with an HTML page, not an OpenAI-compatible API: --target should be the engine's base URL (e.g. http://127.0.0.1:8000)", ErrNotOpenAI, shown)
	}
	list, listOK := parseModels(models.body)
	listOK = listOK && models.ok()

	// 2. Native endpoints, most specific first; the first that answers in
	// its engine's shape names the engine.
	var (
		sgl    sglangInfo
		props  llamaProps
		tgi    tgiInfo
		olVer  string
		metric Metrics
		metOK  bool
	)
	probeGet := func(path string) (*response, error) {
		r, err := c.get(ctx, path)
		if err != nil {
			return nil, err
		}
		if r.status == http.StatusUnauthorized || r.status == http.StatusForbidden {
			return nil, c.authError("GET "+path, r.status)
		}
		return r, nil
	}
	detect := []struct {
		path string
		kind string
		try  func(*response) bool
	}{
		{"/get_server_info", KindSGLang, func(r *response) (ok bool) { sgl, ok = parseServerInfo(r.body); return r.ok() && ok }},
		{"/props", KindLlamaCpp, func(r *response) (ok bool) { props, ok = parseProps(r.body); return r.ok() && ok }},
		{"/info", KindTGI, func(r *response) (ok bool) { tgi, ok = parseTGIInfo(r.body); return r.ok() && ok }},
		{"/api/version", KindOllama, func(r *response) (ok bool) { olVer, ok = parseVersion(r.body); return r.ok() && ok }},
	}
	for _, d := range detect {
		r, err := probeGet(d.path)
		if err != nil {
			return nil, err
		}
		if d.try(r) {
			in.Kind = d.kind
			break
		}
	}
	if in.Kind != KindOllama {
		r, err := probeGet("/metrics")
		if err != nil {
			return nil, err
		}
		if r.ok() && !r.isHTML() {
			metric, _ = ParseMetrics(r.body) // keep the good lines of a partly garbled page
			metOK = len(metric) > 0
		}
	}
	var vllmVer string
	if in.Kind == KindOpenAI {
		r, err := probeGet("/version")
		if err != nil {
			return nil, err
		}
		vllmVer, _ = parseVersion(r.body)
		vllmVer = strings.TrimSpace(vllmVer)
		hasLen := false
		for _, m := range list {
			hasLen = hasLen || m.MaxModelLen > 0
		}
		if (metOK && metric.Has("vllm:")) || (r.ok() && vllmVer != "" && hasLen) {
			in.Kind = KindVLLM
		}
	}
	if !listOK && in.Kind == KindOpenAI {
		if models.ok() {
			return nil, fmt.Errorf("%w: %s answers GET /v1/models with something that is not an OpenAI model list (%q): check --target", ErrNotOpenAI, shown, models.excerpt())
		}
		return nil, fmt.Errorf("%w: %s answers GET /v1/models with HTTP %d and no engine endpoint answered either: check --target (the engine's base URL, e.g. http://127.0.0.1:8000)", ErrNotOpenAI, shown, models.status)
	}
	how := "GET /v1/models answered; no engine-specific endpoint did"
	switch in.Kind {
	case KindSGLang:
		how = "GET /get_server_info answered in SGLang's shape"
	case KindLlamaCpp:
		how = "GET /props answered with total_slots"
	case KindTGI:
		how = "GET /info answered with max_total_tokens"
	case KindOllama:
		how = "GET /api/version answered"
	case KindVLLM:
		how = "GET /metrics has vllm: metrics"
		if !metric.Has("vllm:") {
			how = "GET /version answered and /v1/models has max_model_len"
		}
	}
	in.add(FactKind, in.Kind, how)

	// 3. The model.
	for _, e := range list {
		in.Models = append(in.Models, e.ID)
	}
	if listOK {
		m, ok := pickModel(list, t.Model)
		if !ok {
			ids := make([]string, 0, len(list))
			for _, e := range list {
				ids = append(ids, e.ID)
			}
			if len(ids) == 0 {
				return nil, fmt.Errorf("%w: %s lists no models on GET /v1/models: is a model loaded? pass --model NAME", ErrModel, shown)
			}
			return nil, fmt.Errorf("%w: %s does not serve model %q; it lists: %s (check --model)", ErrModel, shown, t.Model, strings.Join(ids, ", "))
		}
		in.Model = m.ID
		src := "GET /v1/models data[0].id"
		switch {
		case t.Model != "" && t.Model != m.ID:
			src = fmt.Sprintf("flag --model %s, listed by GET /v1/models as %s", t.Model, m.ID)
		case t.Model != "":
			src = "flag --model, listed by GET /v1/models"
		}
		in.add(FactModel, m.ID, src)
		if m.MaxModelLen > 0 {
			in.MaxModelLen = m.MaxModelLen
			in.addInt(FactMaxModelLen, m.MaxModelLen, "GET /v1/models data[id="+m.ID+"].max_model_len")
		}
	} else if t.Model != "" {
		in.Model = t.Model
		in.add(FactModel, t.Model, "flag --model")
	}

	// 4. Engine by engine (METHOD.md §4 table).
	switch in.Kind {
	case KindVLLM:
		if vllmVer == "" {
			if r, err := probeGet("/version"); err == nil {
				vllmVer, _ = parseVersion(r.body)
			}
		}
		if vllmVer != "" {
			in.Version = vllmVer
			in.add(FactVersion, vllmVer, "GET /version version")
		}
		if kv, _ := parseCacheConfig(metric); kv.BlockSize > 0 {
			in.CacheBlock = kv.BlockSize
		}
		if kv, ok := parseCacheConfig(metric); ok {
			in.KVCapacity = kv.Tokens
			in.KVBlocks, in.KVBlockSize = kv.Blocks, kv.BlockSize
			in.KVFromBlocks = !kv.Labelled
			in.addInt(FactKVCapacity, kv.Tokens, "GET /metrics vllm:cache_config_info "+kv.Source)
			if kv.MemoryBytes > 0 {
				in.add(FactKVMemory, strconv.FormatInt(kv.MemoryBytes, 10), "GET /metrics vllm:cache_config_info label kv_cache_memory_bytes")
			}
		}
		if kv, _ := parseCacheConfig(metric); kv.DType != "" {
			in.ModelFacts.KVDType, in.ModelFacts.KVDTypeSource = kv.DType, "GET /metrics vllm:cache_config_info label cache_dtype"
			in.add(FactKVDType, kv.DType, in.ModelFacts.KVDTypeSource)
		}
	case KindSGLang:
		if sgl.Version != "" {
			in.Version = sgl.Version
			in.add(FactVersion, sgl.Version, "GET /get_server_info version")
		}
		if sgl.MaxTotalNumTokens > 0 {
			in.KVCapacity = sgl.MaxTotalNumTokens
			in.addInt(FactKVCapacity, sgl.MaxTotalNumTokens, "GET /get_server_info "+sgl.Source)
		}
		if in.MaxModelLen == 0 && sgl.ContextLength > 0 {
			in.MaxModelLen = sgl.ContextLength
			in.addInt(FactMaxModelLen, sgl.ContextLength, "GET /get_server_info context_length")
		}
	case KindLlamaCpp:
		if props.BuildInfo != "" {
			in.Version = props.BuildInfo
			in.add(FactVersion, props.BuildInfo, "GET /props build_info")
		}
		in.Slots = props.TotalSlots
		in.addInt(FactSlots, props.TotalSlots, "GET /props total_slots")
		nctx, src := props.NCtx, "GET /props default_generation_settings.n_ctx"
		if nctx == 0 {
			if r, err := probeGet("/slots"); err == nil && r.ok() {
				if _, n, ok := parseSlots(r.body); ok && n > 0 {
					nctx, src = n, "GET /slots [0].n_ctx"
				}
			}
		}
		if nctx > 0 {
			in.MaxModelLen = nctx // the context one request can use: one slot's
			in.addInt(FactMaxModelLen, nctx, src+" (per slot)")
			in.llamaCapacity(nctx, props.TotalSlots, src)
		}
		if size, ok := parseLlamaModelMeta(models.body); ok {
			in.ModelFacts.WeightBytes, in.ModelFacts.WeightSource = size, "GET /v1/models data[0].meta.size"
			in.add(FactWeightBytes, fmt.Sprint(size), in.ModelFacts.WeightSource)
		}
		if props.ModelPath != "" {
			in.ModelFacts.Path, in.ModelFacts.PathSource = props.ModelPath, "GET /props model_path"
			in.add(FactModelPath, props.ModelPath, in.ModelFacts.PathSource)
		}
	case KindTGI:
		if tgi.Version != "" {
			in.Version = tgi.Version
			in.add(FactVersion, tgi.Version, "GET /info version")
		}
		in.MaxModelLen = tgi.MaxTotalTokens
		in.addInt(FactMaxModelLen, tgi.MaxTotalTokens, "GET /info max_total_tokens")
		if tgi.MaxBatchTotalTokens > 0 {
			in.KVCapacity = tgi.MaxBatchTotalTokens
			in.addInt(FactKVCapacity, tgi.MaxBatchTotalTokens, "GET /info max_batch_total_tokens")
		}
		if in.Model == "" {
			in.Model = tgi.ModelID
			in.add(FactModel, tgi.ModelID, "GET /info model_id")
		}
	case KindOllama:
		in.Version = olVer
		in.add(FactVersion, olVer, "GET /api/version version")
		// Measuring the slots loads the model, so /api/ps then tells the
		// context it really runs with.
		in.measureSlots(ctx)
		if err := in.probeOllamaContext(ctx, probeGet); err != nil {
			return nil, err
		}
		in.ollamaCapacity()
		if err := in.probeOllamaModel(ctx); err != nil {
			return nil, err
		}
	}

	// 5. Gauges and tokenize.
	if g, ok := gaugeNames[in.Kind]; ok && metOK {
		if _, ok := metric.Sum(g.waiting); ok {
			in.Gauges = true
			in.add(FactGauges, g.waiting+", "+g.running, "GET /metrics")
		}
	}
	if tokenizeKinds[in.Kind] {
		tctx, cancel := context.WithTimeout(ctx, probeTimeout)
		n, err := in.tokenize(tctx, "Hello")
		cancel()
		if err == nil && n > 0 {
			in.Tokenize = true
			in.add(FactTokenize, "POST /tokenize", "POST /tokenize answered a count")
		} else if errors.Is(err, ErrUnreachable) || errors.Is(err, ErrUnauthorized) {
			return nil, err
		}
	}
	if !in.Tokenize {
		in.add(FactTokenize, "usage.prompt_tokens of max_tokens:1 requests", "no POST /tokenize")
	}

	// 6. Flags win (the engine's own context is kept beside them).
	in.EngineMaxModelLen = in.MaxModelLen
	if t.KVCapacity > 0 {
		in.KVCapacity = t.KVCapacity
		in.KVMin, in.KVMax = 0, 0
		in.KVBlocks, in.KVFromBlocks = 0, false // the user's tokens, not the engine's blocks
		in.addInt(FactKVCapacity, t.KVCapacity, "flag --kv-capacity")
	}
	if t.MaxModelLen > 0 {
		in.MaxModelLen = t.MaxModelLen
		in.addInt(FactMaxModelLen, t.MaxModelLen, "flag --max-model-len")
	}
	if in.Model == "" {
		return nil, fmt.Errorf("%w: %s does not say which model it serves: pass --model NAME", ErrModel, shown)
	}
	return in, nil
}

// probeOllamaContext finds the context length Ollama runs the model with:
// GET /api/ps context_length when the model is loaded, else POST /api/show
// parameters num_ctx, else the trained length in model_info.
func (in *Info) probeOllamaContext(ctx context.Context, get func(string) (*response, error)) error {
	r, err := get("/api/ps")
	if err != nil {
		return err
	}
	if running, ok := parseOllamaPS(r.body); ok && r.ok() {
		for _, m := range running {
			if m.Name == in.Model && m.ContextLength > 0 {
				in.MaxModelLen = m.ContextLength
				in.addInt(FactMaxModelLen, m.ContextLength, "GET /api/ps models[name="+m.Name+"].context_length")
				return nil
			}
		}
	}
	sctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	r, err = in.c.do(sctx, http.MethodPost, "/api/show", map[string]string{"model": in.Model})
	if err != nil {
		return err
	}
	show, ok := parseOllamaShow(r.body)
	if !ok || !r.ok() {
		return nil
	}
	switch {
	case show.NumCtx > 0:
		in.MaxModelLen = show.NumCtx
		in.addInt(FactMaxModelLen, show.NumCtx, "POST /api/show parameters num_ctx")
	case show.TrainedCtx > 0:
		in.MaxModelLen = show.TrainedCtx
		in.addInt(FactMaxModelLen, show.TrainedCtx, "POST /api/show model_info."+show.TrainedSource+" (trained length; Ollama may run with less, see OLLAMA_CONTEXT_LENGTH)")
	}
	return nil
}

// probeOllamaModel reads the model's shape and weights' bytes from POST
// /api/show (model_info and tensors).
func (in *Info) probeOllamaModel(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	r, err := in.c.do(sctx, http.MethodPost, "/api/show", map[string]string{"model": in.Model})
	if err != nil {
		return err
	}
	m, ok := parseOllamaModel(r.body)
	if !ok || !r.ok() {
		return nil
	}
	f := &in.ModelFacts
	if m.WeightBytes > 0 {
		f.WeightBytes, f.WeightSource = m.WeightBytes, "POST /api/show tensors (types × shapes)"
		in.add(FactWeightBytes, fmt.Sprint(m.WeightBytes), f.WeightSource)
	}
	f.Shape, f.ShapeSource = m, "POST /api/show model_info (the GGUF's metadata)"
	if m.HasKV() {
		in.add(FactKVShape, m.KV.Layout, f.ShapeSource)
	}
	if e := m.MoE; e.IsMoE() {
		in.add(FactExperts, fmt.Sprintf("%d experts, %d per token, in %d layers", e.Experts, e.Used, e.Layers), "POST /api/show model_info expert_count, expert_used_count and tensors *_exps")
	}
	return nil
}

// gauges names the waiting/running gauges of an engine's /metrics.
type gauges struct{ waiting, running string }

var gaugeNames = map[string]gauges{
	KindVLLM:     {"vllm:num_requests_waiting", "vllm:num_requests_running"},
	KindSGLang:   {"sglang:num_queue_reqs", "sglang:num_running_reqs"},
	KindLlamaCpp: {"llamacpp:requests_deferred", "llamacpp:requests_processing"},
	KindTGI:      {"tgi_queue_size", "tgi_batch_current_size"},
}

// CutStreamsStick reports whether cutting a stream while the engine
// generates it can leave one of its slots taken for good. Ollama's can
// (0.17.4, and 0.33 still): its OpenAI handler hands each token to the
// response writer over an unbuffered channel from the goroutine holding
// the slot's semaphore; a writer that has seen its client leave receives
// no more, and a token read just before the cancellation blocks that
// goroutine, so the slot, until a restart. Seen here with
// OLLAMA_NUM_PARALLEL=1: four streams cut at random moments stuck it
// within ten rounds (METHOD.md §3).
func (in *Info) CutStreamsStick() bool { return in.Kind == KindOllama }

// Load scrapes the engine's waiting and running gauges (summed over label
// sets). ok is false, with a nil error, when the engine has no such gauges
// (Ollama, plain OpenAI servers, llama-server without --metrics); then the
// caller falls back to average active requests (METHOD.md §3).
func (in *Info) Load(ctx context.Context) (running, waiting int, ok bool, err error) {
	g, has := gaugeNames[in.Kind]
	if !has || !in.Gauges || in.c == nil {
		return 0, 0, false, nil
	}
	m, err := in.scrape(ctx)
	if err != nil {
		return 0, 0, false, err
	}
	w, okW := m.Sum(g.waiting)
	run, okR := m.Sum(g.running)
	if !okW {
		return 0, 0, false, fmt.Errorf("GET %s/metrics no longer has %s", in.BaseURL, g.waiting)
	}
	if !okR {
		run = 0
	}
	return int(run + 0.5), int(w + 0.5), true, nil
}

// scrape reads the engine's /metrics. Lines that do not parse are skipped
// (ParseMetrics keeps the rest): one odd metric must not hide the gauges.
func (in *Info) scrape(ctx context.Context) (Metrics, error) {
	r, err := in.c.get(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	if !r.ok() {
		return nil, fmt.Errorf("GET %s/metrics: HTTP %d: %s", in.BaseURL, r.status, r.excerpt())
	}
	m, _ := ParseMetrics(r.body)
	return m, nil
}

// PrefixCache reads the engine's prefix-cache counters: prompt tokens
// looked up in the cache and tokens found there, since the engine started
// (diff two readings for a window). ok is false, with a nil error, where
// the engine exposes no such counters (vLLM has them: vllm:prefix_cache_hits
// and vllm:prefix_cache_queries; SGLang only a hit-rate gauge; llama.cpp
// reports timings.cache_n per response instead).
func (in *Info) PrefixCache(ctx context.Context) (hits, queries int64, ok bool, err error) {
	if in.Kind != KindVLLM || in.c == nil {
		return 0, 0, false, nil
	}
	m, err := in.scrape(ctx)
	if err != nil {
		return 0, 0, false, err
	}
	h, okH := sumEither(m, "vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits")
	q, okQ := sumEither(m, "vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries")
	if !okH || !okQ {
		return 0, 0, false, nil
	}
	return int64(h + 0.5), int64(q + 0.5), true, nil
}

// sumEither sums the first of the names the page has.
func sumEither(m Metrics, names ...string) (float64, bool) {
	for _, n := range names {
		if v, ok := m.Sum(n); ok {
			return v, true
		}
	}
	return 0, false
}

// Reachable asks the engine for its model list (every OpenAI-compatible
// engine answers it from memory) and returns nil when any HTTP answer
// comes, or an error wrapping ErrUnreachable when none does: the engine
// went away (refused, reset, no answer within the probe's timeout). A
// matrix asks it after a failed cell, to tell an engine that broke off
// the run from a cell whose requests failed.
func (in *Info) Reachable(ctx context.Context) error {
	if in.c == nil {
		return nil
	}
	_, err := in.c.get(ctx, "/v1/models")
	return err
}
