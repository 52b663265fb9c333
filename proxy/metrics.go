package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/tokentap/tokentap/histo"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/slo"
	"github.com/tokentap/tokentap/tap"
)

// maxModels bounds the model label's cardinality while the engine's model
// list is unknown (see models.go): the model name comes from the client,
// and a client inventing names must not grow /metrics forever. Records of
// further models are counted under otherModel.
const maxModels = 100

// maxLabelLen bounds a model label's length in bytes. A model name is the
// client's bytes: a longer one is cut (at a rune's start) and marked, so
// one request cannot put a megabyte into every scrape.
const maxLabelLen = 128

// modelTTL is how long a model's series live without a request: a name
// a client sent once does not stay in /metrics for good.
const modelTTL = time.Hour

// Classic Prometheus bucket bounds (seconds or tokens), chosen for LLM
// serving: TTFT from cached prompts (ms) to long prefills (minutes), decode
// gaps from fast small models (~1 ms) to stalls. Every histogram keeps them
// for Prometheus servers without native histograms, and is a native
// histogram besides (nativeFactor).
var (
	ttftBuckets   = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	tbtBuckets    = []float64{0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 5}
	e2eBuckets    = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}
	promptBuckets = []float64{16, 64, 256, 1024, 4096, 8192, 16384, 32768, 65536, 131072, 262144}
	outputBuckets = []float64{1, 8, 32, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}
)

// Native histograms: every bucket at most 5% wider than the one before
// (schema 4, 16 buckets per power of two), so a quantile over any number of
// replicas, summed by Prometheus, is exact to within one such bucket. At
// most nativeMaxBuckets buckets per series; beyond them the histogram
// halves its resolution rather than reset (MinResetDuration 0), so its
// counts only grow.
const (
	nativeFactor     = 1.05
	nativeMaxBuckets = 160
)

// modelStats is everything kept per model.
type modelStats struct {
	// Prometheus side: monotonic since start, this model's series.
	ttft, tbt, e2e, prompt, output prometheus.Observer
	// /stats side: reset by POST /stats.
	set       *histo.Set
	requests  int64
	outcomes  map[record.Outcome]int64
	promptSum int64
	outputSum int64
	slo       sloStats  // slo.go
	seen      time.Time // the last record of this model
}

// metrics aggregates finished records for /metrics and /stats. One
// goroutine (the proxy's recorder) writes; the admin handlers read under mu
// (/stats) or through the registry (/metrics), whose histograms and
// counters are safe to read while they are written.
type metrics struct {
	mu        sync.Mutex
	names     *modelNames // the engine's models: the labels allowed
	models    map[string]*modelStats
	since     time.Time
	inFlight  atomic.Int64 // measured requests between arrival and record
	passed    atomic.Uint64
	measErrs  atomic.Uint64
	slo       slo.Spec      // objectives requests are judged against; zero: none (slo.go)
	ttl       time.Duration // modelTTL; tests shorten it
	swept     time.Time     // when expired models were last looked for
	recPanics atomic.Uint64 // records whose bookkeeping panicked (recorder)

	capturing     bool          // the proxy has a capture (set before serving)
	captured      atomic.Uint64 // records written to the capture file
	captureFailed atomic.Uint64 // records the capture could not take (recorder)
	captureHeld   atomic.Int64  // records waiting for a capture file that fails
	recordsLate   atomic.Uint64 // records finished after the recorder closed

	clientConns atomic.Int64                  // open client connections
	acceptErrs  atomic.Uint64                 // accepts that failed for want of descriptors (retried)
	rejects     [nRejectReasons]atomic.Uint64 // refused requests and connections, by reason
	resends     [nResendReasons]atomic.Uint64 // requests sent to the engine again, by reason
	staleConns  atomic.Uint64                 // idle upstream connections found closed before use
	outOfStep   atomic.Uint64                 // upstream connections closed after bytes past a response's end

	reg                            *prometheus.Registry
	ttft, tbt, e2e, prompt, output *prometheus.HistogramVec
	requests                       *prometheus.CounterVec
}

func histogram(name, help string, buckets []float64) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: name, Help: help, Buckets: buckets,
		NativeHistogramBucketFactor: nativeFactor, NativeHistogramMaxBucketNumber: nativeMaxBuckets,
	}, []string{"model"})
}

// rejected counts a refused request or connection.
func (m *metrics) rejected(r rejectReason) { m.rejects[r].Add(1) }

func newMetrics() *metrics {
	m := &metrics{names: newModelNames(), models: map[string]*modelStats{}, since: time.Now(), ttl: modelTTL, reg: prometheus.NewRegistry()}
	m.ttft = histogram("tokentap_time_to_first_token_seconds", "Time from the request reaching the proxy to the first token event from the engine.", ttftBuckets)
	m.tbt = histogram("tokentap_time_between_tokens_seconds", "Gap between successive output tokens of a stream (a multi-token event's gap split evenly).", tbtBuckets)
	m.e2e = histogram("tokentap_request_duration_seconds", "Time from the request reaching the proxy to the end of the engine's response.", e2eBuckets)
	m.prompt = histogram("tokentap_prompt_tokens", "Prompt tokens per request, as the engine counted them.", promptBuckets)
	m.output = histogram("tokentap_output_tokens", "Output tokens per request (the engine's usage, else counted token events).", outputBuckets)
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tokentap_requests_total",
		Help: "Measured requests (chat and completions) by model, outcome and whose fault a failure was."}, []string{"model", "outcome", "blame"})
	m.reg.MustRegister(m.ttft, m.tbt, m.e2e, m.prompt, m.output, m.requests,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tokentap_requests_in_flight", Help: "Measured requests the proxy is serving now."},
			func() float64 { return float64(m.inFlight.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tokentap_passthrough_requests_total", Help: "Requests proxied without measurement (other paths and methods)."},
			func() float64 { return float64(m.passed.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tokentap_measurement_errors_total", Help: "Streams whose measurement failed inside tokentap; the client's stream went on unmeasured."},
			func() float64 { return float64(m.measErrs.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tokentap_internal_errors_total", Help: "Faults inside tokentap recovered without ending the process (a panic while serving a request or keeping a record); the stream and the record were kept as far as they could be. Please report them."},
			func() float64 { return float64(m.recPanics.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tokentap_upstream_stale_connections_total", Help: "Idle connections to the engine found closed before a request was written on them (dropped unused)."},
			func() float64 { return float64(m.staleConns.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tokentap_upstream_out_of_step_connections_total", Help: "Connections to the engine closed, not reused, because the engine sent bytes past the end of a response: an answer no request asked for."},
			func() float64 { return float64(m.outOfStep.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tokentap_capture_records_total", Help: "Records written to the capture file (--capture)."},
			func() float64 { return float64(m.captured.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tokentap_capture_errors_total", Help: "Records that could not be written to the capture file (--capture); each is logged with the reason."},
			func() float64 { return float64(m.captureFailed.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tokentap_capture_held_records", Help: "Records waiting in memory (at most 16 MiB of them) for a capture file whose writes fail; written, in order, when a write succeeds again."},
			func() float64 { return float64(m.captureHeld.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tokentap_usage_unread_total", Help: "Non-streaming answers passed on whole whose usage was not read: the answers held at once for it were at their 64 MiB bound; their output tokens are not known."},
			func() float64 { return float64(tap.UnreadBodies()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tokentap_records_lost_total", Help: "Records of requests that ended after the proxy's recorder had shut down (not counted elsewhere); each is logged."},
			func() float64 { return float64(m.recordsLate.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tokentap_client_connections", Help: "Client connections open now."},
			func() float64 { return float64(m.clientConns.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tokentap_client_accept_errors_total", Help: "Client connections that could not be accepted for want of file descriptors (or kernel buffers); the proxy waits and accepts again."},
			func() float64 { return float64(m.acceptErrs.Load()) }),
		edgeCollector{m},
		// The process's goroutines, descriptors, memory and CPU: a leak
		// shows as a line that only grows.
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// labelValue makes a client's model name a valid, bounded label value:
// valid UTF-8 (client_golang panics on anything else), control characters
// written as escapes (an ESC in a scrape would reach a terminal that shows
// it; the exposition format escapes only \, " and newline), and at most
// maxLabelLen bytes.
func labelValue(name string) string {
	if len(name) <= maxLabelLen && utf8.ValidString(name) && !hasControl(name) {
		return name
	}
	name = strings.ToValidUTF8(name, "\uFFFD")
	if hasControl(name) {
		var b strings.Builder
		for _, r := range name {
			if unicode.IsControl(r) {
				fmt.Fprintf(&b, "\\x%02x", r) // C0, DEL and C1: all below 0x100
				continue
			}
			b.WriteRune(r)
		}
		name = b.String()
	}
	if len(name) <= maxLabelLen {
		return name
	}
	const mark = "…"
	cut := maxLabelLen - len(mark)
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return name[:cut] + mark
}

// hasControl says whether s holds a control character (C0, DEL or C1).
func hasControl(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) {
			return true
		}
	}
	return false
}

// model returns the stats of a model and the label it is kept under.
func (m *metrics) model(name string) (string, *modelStats) {
	name, _ = m.names.label(name)
	name = labelValue(name)
	if s, ok := m.models[name]; ok {
		return name, s
	}
	if len(m.models) >= maxModels {
		name = otherModel
		if s, ok := m.models[name]; ok {
			return name, s
		}
	}
	s := &modelStats{
		ttft: m.ttft.WithLabelValues(name), tbt: m.tbt.WithLabelValues(name), e2e: m.e2e.WithLabelValues(name),
		prompt: m.prompt.WithLabelValues(name), output: m.output.WithLabelValues(name),
		set: histo.New(), outcomes: map[record.Outcome]int64{},
	}
	m.models[name] = s
	return name, s
}

// expire drops the series of models without a record for m.ttl, looking
// at most once a minute.
func (m *metrics) expire(now time.Time) {
	if now.Sub(m.swept) < time.Minute && m.ttl >= time.Minute {
		return
	}
	m.swept = now
	for name, s := range m.models {
		if now.Sub(s.seen) <= m.ttl {
			continue
		}
		l := prometheus.Labels{"model": name}
		for _, v := range []*prometheus.HistogramVec{m.ttft, m.tbt, m.e2e, m.prompt, m.output} {
			v.Delete(l)
		}
		m.requests.DeletePartialMatch(l)
		delete(m.models, name)
	}
}

// add folds one finished record in.
func (m *metrics) add(r *record.Record) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	m.expire(now)
	name, s := m.model(r.Model)
	s.seen = now
	blame := string(r.Blame)
	if blame == "" {
		blame = "none"
	}
	m.requests.WithLabelValues(name, string(r.Outcome), blame).Inc()
	s.requests++
	s.outcomes[r.Outcome]++
	if !m.slo.IsZero() {
		s.slo.add(m.slo.Judge(r), r.CompletionTokens)
	}
	if d, ok := r.TTFT(); ok {
		s.ttft.Observe(d.Seconds())
		s.set.RecordTTFT(d)
	}
	for i := 1; i < len(r.Arrivals); i++ {
		n := r.EventTokens(i)
		gap := (r.Arrivals[i] - r.Arrivals[i-1]) / time.Duration(n)
		for range n {
			s.tbt.Observe(gap.Seconds())
		}
		s.set.RecordTBT(gap, n)
	}
	if e2e := r.End - r.Sent; e2e > 0 {
		s.e2e.Observe(e2e.Seconds())
		s.set.RecordE2E(e2e)
	}
	if rate, ok := r.DecodeRate(); ok {
		s.set.RecordRate(rate)
	}
	if r.PromptTokens > 0 {
		s.prompt.Observe(float64(r.PromptTokens))
		s.promptSum += int64(r.PromptTokens)
	}
	if r.CompletionTokens > 0 || r.Outcome == record.OK {
		s.output.Observe(float64(r.CompletionTokens))
		s.outputSum += int64(r.CompletionTokens)
	}
}

// handler serves the registry: the Prometheus text format (classic buckets)
// by default, the protobuf format with native histograms where the scraper
// asks for it, OpenMetrics where it asks for that.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(prometheus.GathererFunc(m.gather), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, EnableOpenMetrics: true})
}

// gather is the registry's Gather with go_goroutines read before it: the
// registry collects on goroutines of its own, so the Go collector's count
// would move from scrape to scrape with how many of them were running, and
// a leak is seen as a count that only grows.
func (m *metrics) gather() ([]*dto.MetricFamily, error) {
	n := float64(runtime.NumGoroutine())
	mfs, err := m.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "go_goroutines" && len(mf.Metric) == 1 && mf.Metric[0].Gauge != nil {
			mf.Metric[0].Gauge.Value = &n
		}
	}
	return mfs, err
}

// The counters kept in arrays by reason, and the SLO counters per model
// (slo.go), are read at each scrape: edgeCollector hands them to the
// registry as they are then.
var (
	retriesDesc = prometheus.NewDesc("tokentap_upstream_retries_total",
		"Requests sent to the engine again, by why that was safe: nothing of them had been written, or they are replayable (Idempotency-Key; GET, HEAD, OPTIONS, TRACE) and no answer had begun.",
		[]string{"reason"}, nil)
	rejectedDesc = prometheus.NewDesc("tokentap_client_rejected_total",
		"Client requests and connections the proxy refused, by reason.", []string{"reason"}, nil)
)

type edgeCollector struct{ m *metrics }

// Describe sends nothing: the collector is unchecked, as its SLO series
// exist only where the proxy has objectives.
func (edgeCollector) Describe(chan<- *prometheus.Desc) {}

func (c edgeCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	for i, name := range resendReasonNames {
		ch <- prometheus.MustNewConstMetric(retriesDesc, prometheus.CounterValue, float64(m.resends[i].Load()), name)
	}
	for i, name := range rejectReasonNames {
		ch <- prometheus.MustNewConstMetric(rejectedDesc, prometheus.CounterValue, float64(m.rejects[i].Load()), name)
	}
	m.collectSLO(ch)
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
	// Capture counts the records written to the capture file and those it
	// could not take, since the proxy started (present with --capture).
	Capture *CaptureStats `json:"capture,omitempty"`
	// RecordsLost counts records of requests that ended after the proxy's
	// recorder shut down, since it started (0 but for a fault).
	RecordsLost uint64 `json:"records_lost"`
}

// CaptureStats counts what became of the records meant for the capture.
type CaptureStats struct {
	Written uint64 `json:"written"`
	Failed  uint64 `json:"failed"`
	// Held records wait for a capture file whose writes fail.
	Held int64 `json:"held"`
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
	st := &Stats{Since: m.since, Until: now, InFlight: m.inFlight.Load(), Models: map[string]*ModelStats{}, RecordsLost: m.recordsLate.Load()}
	if m.capturing {
		st.Capture = &CaptureStats{Written: m.captured.Load(), Failed: m.captureFailed.Load(), Held: m.captureHeld.Load()}
	}
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
