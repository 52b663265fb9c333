package proxy

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokentap/tokentap/histo"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/slo"
)

// maxModels bounds the model label's cardinality while the engine's model
// list is unknown (see models.go): the model name comes from the client,
// and a client inventing names must not grow /metrics forever. Records of
// further models are counted under otherModel.
const maxModels = 100

// Prometheus bucket bounds (seconds or tokens), chosen for LLM serving:
// TTFT from cached prompts (ms) to long prefills (minutes), decode gaps from
// fast small models (~1 ms) to stalls.
var (
	ttftBuckets   = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	tbtBuckets    = []float64{0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 5}
	e2eBuckets    = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}
	promptBuckets = []float64{16, 64, 256, 1024, 4096, 8192, 16384, 32768, 65536, 131072, 262144}
	outputBuckets = []float64{1, 8, 32, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}
)

// promHist is a Prometheus histogram: cumulative only, never reset.
type promHist struct {
	bounds []float64
	counts []uint64 // per bucket, not cumulative; the last is +Inf
	sum    float64
	count  uint64
}

func newPromHist(bounds []float64) *promHist {
	return &promHist{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

func (h *promHist) observe(v float64, n uint64) {
	i := sort.SearchFloat64s(h.bounds, v) // first bound >= v: le semantics
	h.counts[i] += n
	h.sum += v * float64(n)
	h.count += n
}

// modelStats is everything kept per model.
type modelStats struct {
	// Prometheus side: monotonic since start.
	ttft, tbt, e2e, prompt, output *promHist
	// /stats side: reset by POST /stats.
	set       *histo.Set
	requests  int64
	outcomes  map[record.Outcome]int64
	promptSum int64
	outputSum int64
	slo       sloStats // slo.go
}

func newModelStats() *modelStats {
	return &modelStats{
		ttft: newPromHist(ttftBuckets), tbt: newPromHist(tbtBuckets), e2e: newPromHist(e2eBuckets),
		prompt: newPromHist(promptBuckets), output: newPromHist(outputBuckets),
		set: histo.New(), outcomes: map[record.Outcome]int64{},
	}
}

type outcomeKey struct {
	model   string
	outcome record.Outcome
	blame   record.Blame
}

// metrics aggregates finished records for /metrics and /stats. One
// goroutine (the proxy's recorder) writes; the admin handlers read under mu.
type metrics struct {
	mu       sync.Mutex
	names    *modelNames // the engine's models: the labels allowed
	models   map[string]*modelStats
	totals   map[outcomeKey]uint64
	since    time.Time
	inFlight atomic.Int64 // measured requests between arrival and record
	passed   atomic.Uint64
	measErrs atomic.Uint64
	slo      slo.Spec // objectives requests are judged against; zero: none (slo.go)

	clientConns atomic.Int64                  // open client connections
	rejects     [nRejectReasons]atomic.Uint64 // refused requests and connections, by reason
	resends     [nResendReasons]atomic.Uint64 // requests sent to the engine again, by reason
	staleConns  atomic.Uint64                 // idle upstream connections found closed before use
}

// rejected counts a refused request or connection.
func (m *metrics) rejected(r rejectReason) { m.rejects[r].Add(1) }

func newMetrics() *metrics {
	return &metrics{names: newModelNames(), models: map[string]*modelStats{}, totals: map[outcomeKey]uint64{}, since: time.Now()}
}

// model returns the stats of a model and the label it is kept under.
func (m *metrics) model(name string) (string, *modelStats) {
	name, _ = m.names.label(name)
	if s, ok := m.models[name]; ok {
		return name, s
	}
	if len(m.models) >= maxModels {
		name = otherModel
		if s, ok := m.models[name]; ok {
			return name, s
		}
	}
	s := newModelStats()
	m.models[name] = s
	return name, s
}

// add folds one finished record in.
func (m *metrics) add(r *record.Record) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name, s := m.model(r.Model)
	m.totals[outcomeKey{name, r.Outcome, r.Blame}]++
	s.requests++
	s.outcomes[r.Outcome]++
	if !m.slo.IsZero() {
		s.slo.add(m.slo.Judge(r), r.CompletionTokens)
	}
	if d, ok := r.TTFT(); ok {
		s.ttft.observe(d.Seconds(), 1)
		s.set.RecordTTFT(d)
	}
	for i := 1; i < len(r.Arrivals); i++ {
		n := r.EventTokens(i)
		gap := (r.Arrivals[i] - r.Arrivals[i-1]) / time.Duration(n)
		s.tbt.observe(gap.Seconds(), uint64(n))
		s.set.RecordTBT(gap, n)
	}
	if e2e := r.End - r.Sent; e2e > 0 {
		s.e2e.observe(e2e.Seconds(), 1)
		s.set.RecordE2E(e2e)
	}
	if rate, ok := r.DecodeRate(); ok {
		s.set.RecordRate(rate)
	}
	if r.PromptTokens > 0 {
		s.prompt.observe(float64(r.PromptTokens), 1)
		s.promptSum += int64(r.PromptTokens)
	}
	if r.CompletionTokens > 0 || r.Outcome == record.OK {
		s.output.observe(float64(r.CompletionTokens), 1)
		s.outputSum += int64(r.CompletionTokens)
	}
}

// writeProm writes the Prometheus text exposition (format 0.0.4).
func (m *metrics) writeProm(b *bytes.Buffer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	names := make([]string, 0, len(m.models))
	for n := range m.models {
		names = append(names, n)
	}
	sort.Strings(names)

	hist := func(metric, help string, get func(*modelStats) *promHist) {
		b.WriteString("# HELP " + metric + " " + help + "\n# TYPE " + metric + " histogram\n")
		for _, n := range names {
			h := get(m.models[n])
			lbl := `model="` + escapeLabel(n) + `"`
			var cum uint64
			for i, ub := range h.bounds {
				cum += h.counts[i]
				b.WriteString(metric + "_bucket{" + lbl + `,le="` + formatFloat(ub) + `"} ` + strconv.FormatUint(cum, 10) + "\n")
			}
			cum += h.counts[len(h.bounds)]
			b.WriteString(metric + "_bucket{" + lbl + `,le="+Inf"} ` + strconv.FormatUint(cum, 10) + "\n")
			b.WriteString(metric + "_sum{" + lbl + "} " + formatFloat(h.sum) + "\n")
			b.WriteString(metric + "_count{" + lbl + "} " + strconv.FormatUint(h.count, 10) + "\n")
		}
	}
	hist("tokentap_time_to_first_token_seconds", "Time from the request reaching the proxy to the first token event from the engine.",
		func(s *modelStats) *promHist { return s.ttft })
	hist("tokentap_time_between_tokens_seconds", "Gap between successive output tokens of a stream (a multi-token event's gap split evenly).",
		func(s *modelStats) *promHist { return s.tbt })
	hist("tokentap_request_duration_seconds", "Time from the request reaching the proxy to the end of the engine's response.",
		func(s *modelStats) *promHist { return s.e2e })
	hist("tokentap_prompt_tokens", "Prompt tokens per request, as the engine counted them.",
		func(s *modelStats) *promHist { return s.prompt })
	hist("tokentap_output_tokens", "Output tokens per request (the engine's usage, else counted token events).",
		func(s *modelStats) *promHist { return s.output })

	keys := make([]outcomeKey, 0, len(m.totals))
	for k := range m.totals {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, c := keys[i], keys[j]
		if a.model != c.model {
			return a.model < c.model
		}
		if a.outcome != c.outcome {
			return a.outcome < c.outcome
		}
		return a.blame < c.blame
	})
	b.WriteString("# HELP tokentap_requests_total Measured requests (chat and completions) by model, outcome and whose fault a failure was.\n# TYPE tokentap_requests_total counter\n")
	for _, k := range keys {
		blame := string(k.blame)
		if blame == "" {
			blame = "none"
		}
		b.WriteString(`tokentap_requests_total{model="` + escapeLabel(k.model) + `",outcome="` + escapeLabel(string(k.outcome)) +
			`",blame="` + escapeLabel(blame) + `"} ` + strconv.FormatUint(m.totals[k], 10) + "\n")
	}
	m.writeSLOProm(b, names)
	b.WriteString("# HELP tokentap_requests_in_flight Measured requests the proxy is serving now.\n# TYPE tokentap_requests_in_flight gauge\n")
	b.WriteString("tokentap_requests_in_flight " + strconv.FormatInt(m.inFlight.Load(), 10) + "\n")
	b.WriteString("# HELP tokentap_passthrough_requests_total Requests proxied without measurement (other paths and methods).\n# TYPE tokentap_passthrough_requests_total counter\n")
	b.WriteString("tokentap_passthrough_requests_total " + strconv.FormatUint(m.passed.Load(), 10) + "\n")
	b.WriteString("# HELP tokentap_measurement_errors_total Streams whose measurement failed inside tokentap; the client's stream went on unmeasured.\n# TYPE tokentap_measurement_errors_total counter\n")
	b.WriteString("tokentap_measurement_errors_total " + strconv.FormatUint(m.measErrs.Load(), 10) + "\n")
	b.WriteString("# HELP tokentap_upstream_retries_total Requests sent to the engine again, by why that was safe: nothing of them had been written, or they are replayable (Idempotency-Key; GET, HEAD, OPTIONS, TRACE) and no answer had begun.\n# TYPE tokentap_upstream_retries_total counter\n")
	for i, name := range resendReasonNames {
		b.WriteString(`tokentap_upstream_retries_total{reason="` + name + `"} ` + strconv.FormatUint(m.resends[i].Load(), 10) + "\n")
	}
	b.WriteString("# HELP tokentap_upstream_stale_connections_total Idle connections to the engine found closed before a request was written on them (dropped unused).\n# TYPE tokentap_upstream_stale_connections_total counter\n")
	b.WriteString("tokentap_upstream_stale_connections_total " + strconv.FormatUint(m.staleConns.Load(), 10) + "\n")
	b.WriteString("# HELP tokentap_client_connections Client connections open now.\n# TYPE tokentap_client_connections gauge\n")
	b.WriteString("tokentap_client_connections " + strconv.FormatInt(m.clientConns.Load(), 10) + "\n")
	b.WriteString("# HELP tokentap_client_rejected_total Client requests and connections the proxy refused, by reason.\n# TYPE tokentap_client_rejected_total counter\n")
	for i, name := range rejectReasonNames {
		b.WriteString(`tokentap_client_rejected_total{reason="` + name + `"} ` + strconv.FormatUint(m.rejects[i].Load(), 10) + "\n")
	}
	writeProcessMetrics(b)
}

func escapeLabel(s string) string {
	var b []byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '\\', '"', '\n':
			if b == nil {
				b = append(make([]byte, 0, len(s)+4), s[:i]...)
			}
			switch c {
			case '\n':
				b = append(b, '\\', 'n')
			default:
				b = append(b, '\\', c)
			}
		default:
			if b != nil {
				b = append(b, c)
			}
		}
	}
	if b == nil {
		return s
	}
	return string(b)
}

func formatFloat(f float64) string {
	if math.IsInf(f, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// Stats is the JSON document served at /stats: per-model summaries since
// the proxy started or since the last reset (POST /stats).
type Stats struct {
	Since    time.Time              `json:"since"`
	Until    time.Time              `json:"until"`
	InFlight int64                  `json:"in_flight"`
	Models   map[string]*ModelStats `json:"models"`
	// SLO is the objectives each model's requests are judged against.
	SLO *result.SLOSpec `json:"slo,omitempty"`
}

// ModelStats summarises one model's measured requests. Percentiles come
// from HDR histograms (µs resolution, 3 significant digits).
type ModelStats struct {
	Requests     int64            `json:"requests"`
	Outcomes     map[string]int64 `json:"outcomes"`
	PromptTokens int64            `json:"prompt_tokens"`
	OutputTokens int64            `json:"output_tokens"`
	TTFT         *Percentiles     `json:"ttft_ms,omitempty"`
	TBT          *Percentiles     `json:"tbt_ms,omitempty"`
	E2E          *Percentiles     `json:"e2e_ms,omitempty"`
	DecodeRate   *Percentiles     `json:"decode_tok_per_s,omitempty"`
	// SLO is how the period's requests met the objectives: judged, good,
	// attainment, goodput over the period.
	SLO *result.SLO `json:"slo,omitempty"`
}

// Percentiles of one distribution; latencies in milliseconds, rates in
// tokens per second.
type Percentiles struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

// stats returns the /stats document; with reset it also starts a new period.
func (m *metrics) stats(reset bool) *Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	st := &Stats{Since: m.since, Until: now, InFlight: m.inFlight.Load(), Models: map[string]*ModelStats{}}
	if !m.slo.IsZero() {
		spec := m.slo.Result()
		st.SLO = &spec
	}
	for name, s := range m.models {
		if s.requests == 0 {
			continue
		}
		ms := &ModelStats{Requests: s.requests, Outcomes: map[string]int64{}, PromptTokens: s.promptSum, OutputTokens: s.outputSum}
		for o, n := range s.outcomes {
			ms.Outcomes[string(o)] = n
		}
		ms.TTFT = latencyPercentiles(s.set.TTFT)
		ms.TBT = latencyPercentiles(s.set.TBT)
		ms.E2E = latencyPercentiles(s.set.E2E)
		if c := s.set.Rate.TotalCount(); c > 0 {
			h := s.set.Rate
			ms.DecodeRate = &Percentiles{Count: c, Mean: h.Mean() / 1000,
				P50: float64(h.ValueAtQuantile(50)) / 1000, P90: float64(h.ValueAtQuantile(90)) / 1000,
				P99: float64(h.ValueAtQuantile(99)) / 1000, Max: float64(h.Max()) / 1000}
		}
		if !m.slo.IsZero() {
			ms.SLO = s.slo.figures(now.Sub(m.since).Seconds())
		}
		st.Models[name] = ms
		if reset {
			s.slo.stats = slo.Tally{}
			s.set.Reset()
			s.requests, s.promptSum, s.outputSum = 0, 0, 0
			s.outcomes = map[record.Outcome]int64{}
		}
	}
	if reset {
		m.since = now
	}
	return st
}

type hdrLike interface {
	TotalCount() int64
	Mean() float64
	ValueAtQuantile(q float64) int64
	Max() int64
}

func latencyPercentiles(h hdrLike) *Percentiles {
	c := h.TotalCount()
	if c == 0 {
		return nil
	}
	ms := func(us int64) float64 { return float64(us) / 1000 }
	return &Percentiles{Count: c, Mean: h.Mean() / 1000,
		P50: ms(h.ValueAtQuantile(50)), P90: ms(h.ValueAtQuantile(90)), P99: ms(h.ValueAtQuantile(99)), Max: ms(h.Max())}
}

func (st *Stats) encode() []byte {
	b, _ := json.MarshalIndent(st, "", "  ")
	return append(b, '\n')
}

// writeProcessMetrics adds the process's goroutines and open descriptors,
// under the names Prometheus's Go client uses: a leak shows as a line that
// only grows.
func writeProcessMetrics(b *bytes.Buffer) {
	b.WriteString("# HELP go_goroutines Number of goroutines that currently exist.\n# TYPE go_goroutines gauge\n")
	b.WriteString("go_goroutines " + strconv.Itoa(runtime.NumGoroutine()) + "\n")
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.WriteString("# HELP go_memstats_heap_inuse_bytes Number of heap bytes that are in use.\n# TYPE go_memstats_heap_inuse_bytes gauge\n")
	b.WriteString("go_memstats_heap_inuse_bytes " + strconv.FormatUint(ms.HeapInuse, 10) + "\n")
	if n, ok := openFDs(); ok {
		b.WriteString("# HELP process_open_fds Number of open file descriptors.\n# TYPE process_open_fds gauge\n")
		b.WriteString("process_open_fds " + strconv.Itoa(n) + "\n")
	}
}

// openFDs counts the process's open descriptors where /proc tells.
func openFDs() (int, bool) {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0, false
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return 0, false
	}
	return len(names) - 1, true // less the directory being read
}
