// Package histo keeps the latency and rate histograms of a cell, a worker or
// a proxy model on HdrHistogram: microsecond resolution, 3 significant
// digits, merged without loss and encoded (HDR V2 compressed, base64) inside
// the JSON result so any percentile can be read later (METHOD.md §3).
//
// A Set is owned by one goroutine; workers keep their own and Merge them once
// (as fortio does), so no lock sits on the hot path.
package histo

import (
	"bytes"
	"compress/zlib"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

const (
	sigFigs = 3
	// MaxLatency is the longest latency recorded exactly; longer ones are
	// clamped to it (and counted in Clamped).
	MaxLatency = 2 * time.Hour
	// MaxRate is the highest decode rate (tokens/s) recorded.
	MaxRate = 1e6
	// rateScale turns tokens/s into the integer units the rate histogram
	// holds (milli-tokens per second).
	rateScale = 1000
)

// Set holds one run's worth of a cell's distributions. Make one with New (or
// decode one with UnmarshalJSON); the zero Set has no histograms to record in.
type Set struct {
	TTFT *hdr.Histogram // time to first token, µs
	TBT  *hdr.Histogram // time between tokens, µs (a multi-token event's gap split evenly, per token)
	E2E  *hdr.Histogram // request end-to-end, µs
	Rate *hdr.Histogram // per-request decode rate, milli-tokens/s
	// TTFTCensored and E2ECensored hold, µs, the waits of requests that
	// had no first token (no end) when they were cut or ended: each a lower
	// bound of a TTFT (end-to-end time) that was never seen. Quantile reads
	// a latency over every request from both.
	TTFTCensored *hdr.Histogram
	E2ECensored  *hdr.Histogram
	// ITL holds, µs, every gap between two token events whole, however
	// many tokens the later one carried: vLLM's ITL, per chunk (METHOD
	// §3). TBT splits the same gaps per token.
	ITL *hdr.Histogram
	// Clamped counts values outside a histogram's range: latencies below 0
	// or above MaxLatency and rates below 0 or above MaxRate (recorded at the
	// nearest bound), and NaN rates (dropped).
	Clamped int64
}

func newLatency() *hdr.Histogram { return hdr.New(1, MaxLatency.Microseconds(), sigFigs) }
func newRate() *hdr.Histogram    { return hdr.New(1, int64(MaxRate*rateScale), sigFigs) }

// New returns an empty set.
func New() *Set {
	return &Set{TTFT: newLatency(), TBT: newLatency(), E2E: newLatency(), Rate: newRate(),
		TTFTCensored: newLatency(), E2ECensored: newLatency(), ITL: newLatency()}
}

func (s *Set) recordLatency(h *hdr.Histogram, d time.Duration, n int64) {
	// Sub-microsecond values (a multi-token event's gap split many ways, two
	// events read in one go) truncate to 0 µs, which HDR records exactly.
	us := d.Microseconds()
	switch {
	case us < 0:
		us = 0 // a clock that went backwards: keep the count, flag it
		s.Clamped += n
	case us > MaxLatency.Microseconds():
		us = MaxLatency.Microseconds()
		s.Clamped += n
	}
	_ = h.RecordValues(us, n) // in range by construction
}

// RecordTTFT records one time to first token.
func (s *Set) RecordTTFT(d time.Duration) { s.recordLatency(s.TTFT, d, 1) }

// RecordTBT records n gaps of d each (n > 1 for a multi-token event whose
// gap is split evenly over its tokens).
func (s *Set) RecordTBT(d time.Duration, n int) {
	if n < 1 {
		return
	}
	s.recordLatency(s.TBT, d, int64(n))
}

// RecordITL records one gap between token events whole (vLLM's ITL, per
// chunk).
func (s *Set) RecordITL(d time.Duration) { s.recordLatency(s.ITL, d, 1) }

// RecordE2E records one request's end-to-end time.
func (s *Set) RecordE2E(d time.Duration) { s.recordLatency(s.E2E, d, 1) }

// RecordRate records one request's decode rate in tokens per second, to
// 0.001 tokens/s. Rates above MaxRate are clamped to it, negative rates to 0
// (both counted in Clamped); NaN is dropped and counted in Clamped.
func (s *Set) RecordRate(tokensPerSecond float64) {
	var v int64
	switch {
	case tokensPerSecond != tokensPerSecond: // NaN
		s.Clamped++
		return
	case tokensPerSecond < 0:
		s.Clamped++
	case tokensPerSecond >= MaxRate:
		v = int64(MaxRate * rateScale)
		if tokensPerSecond > MaxRate {
			s.Clamped++
		}
	default:
		v = int64(math.Round(tokensPerSecond * rateScale))
	}
	_ = s.Rate.RecordValue(v)
}

// Merge adds every value of o into s, exactly: both come from New or
// UnmarshalJSON, so they share one geometry and every count lands in the same
// bucket it had in o. A nil o is a no-op.
func (s *Set) Merge(o *Set) {
	if o == nil {
		return
	}
	// Same geometry by construction, so nothing is dropped; count it anyway
	// should a hand-built Set ever break that.
	s.Clamped += s.TTFT.Merge(o.TTFT) + s.TBT.Merge(o.TBT) + s.E2E.Merge(o.E2E) + s.Rate.Merge(o.Rate)
	if o.TTFTCensored != nil {
		s.Clamped += s.TTFTCensored.Merge(o.TTFTCensored)
	}
	if o.E2ECensored != nil {
		s.Clamped += s.E2ECensored.Merge(o.E2ECensored)
	}
	if o.ITL != nil {
		s.Clamped += s.ITL.Merge(o.ITL)
	}
	s.Clamped += o.Clamped
}

// MergeExact adds every value of o into s, as Merge does, but first checks
// that each histogram of o has the settings (lowest and highest trackable
// value, significant figures) of its counterpart in s, and refuses to merge
// anything when one does not: values merged into other settings land in
// other buckets, and a merge that changes values is not the exact merge
// METHOD §10 promises. It returns how many values the merge dropped (out of
// s's range; 0 whenever the settings match, as they do here). A nil o is a
// no-op.
func (s *Set) MergeExact(o *Set) (dropped int64, err error) {
	if o == nil {
		return 0, nil
	}
	for _, p := range s.pairs(o) {
		if p.a == nil || p.b == nil {
			return 0, fmt.Errorf("histo: %s: missing histogram", p.name)
		}
		if !sameSettings(p.a, p.b) {
			return 0, fmt.Errorf("histo: %s: settings differ (lowest %d, highest %d, %d digits against lowest %d, highest %d, %d digits): refusing a merge that would move values",
				p.name, p.b.LowestTrackableValue(), p.b.HighestTrackableValue(), p.b.SignificantFigures(),
				p.a.LowestTrackableValue(), p.a.HighestTrackableValue(), p.a.SignificantFigures())
		}
	}
	for _, p := range s.pairs(o) {
		dropped += p.a.Merge(p.b)
	}
	s.Clamped += o.Clamped + dropped
	return dropped, nil
}

type histPair struct {
	name string
	a, b *hdr.Histogram
}

func (s *Set) pairs(o *Set) [7]histPair {
	return [7]histPair{{"ttft_us", s.TTFT, o.TTFT}, {"tbt_us", s.TBT, o.TBT}, {"e2e_us", s.E2E, o.E2E}, {"rate_mtok_s", s.Rate, o.Rate},
		{"ttft_censored_us", s.TTFTCensored, o.TTFTCensored}, {"e2e_censored_us", s.E2ECensored, o.E2ECensored}, {"itl_us", s.ITL, o.ITL}}
}

func sameSettings(a, b *hdr.Histogram) bool {
	return a.LowestTrackableValue() == b.LowestTrackableValue() && a.HighestTrackableValue() == b.HighestTrackableValue() &&
		a.SignificantFigures() == b.SignificantFigures()
}

// Reset empties s.
func (s *Set) Reset() {
	s.TTFT.Reset()
	s.TBT.Reset()
	s.E2E.Reset()
	s.Rate.Reset()
	s.TTFTCensored.Reset()
	s.E2ECensored.Reset()
	s.ITL.Reset()
	s.Clamped = 0
}

// Latency reads quantile q (0..1) of a latency histogram as a duration; ok
// is false when it holds no value.
func Latency(h *hdr.Histogram, q float64) (d time.Duration, ok bool) {
	if h == nil || h.TotalCount() == 0 {
		return 0, false
	}
	return time.Duration(h.ValueAtQuantile(q*100)) * time.Microsecond, true
}

// RateAt reads quantile q (0..1) of the rate histogram in tokens per second.
func (s *Set) RateAt(q float64) (rate float64, ok bool) {
	if s.Rate.TotalCount() == 0 {
		return 0, false
	}
	return float64(s.Rate.ValueAtQuantile(q*100)) / rateScale, true
}

// TPOTAt returns the per-request time per output token (1 / the
// request's decode rate) at quantile q of the requests, by nearest rank
// over that time (METHOD §2's "TPOT per request"), not 1 / the rate at q:
// with an even count the two pick different requests, since the
// requests in ascending time per token are in descending rate.
func (s *Set) TPOTAt(q float64) (tpot time.Duration, ok bool) {
	n := s.Rate.TotalCount()
	if n == 0 {
		return 0, false
	}
	rank := max(1, min(n, int64(q*float64(n)+0.5)))
	// The rank-th smallest time per token is the (n+1−rank)-th smallest
	// rate; ValueAtQuantile takes the rank it is given as q·n rounded.
	v := s.Rate.ValueAtQuantile(float64(n+1-rank) / float64(n) * 100)
	if v <= 0 {
		return 0, false
	}
	return time.Duration(float64(time.Second) * rateScale / float64(v)), true
}

type wireSet struct {
	TTFT string `json:"ttft_us"`
	TBT  string `json:"tbt_us"`
	E2E  string `json:"e2e_us"`
	Rate string `json:"rate_mtok_s"`
	// Written only where a request was censored, so a document without
	// them reads as none censored.
	TTFTCensored string `json:"ttft_censored_us,omitempty"`
	E2ECensored  string `json:"e2e_censored_us,omitempty"`
	// Written only where there was a gap; documents from before it have
	// none.
	ITL     string `json:"itl_us,omitempty"`
	Clamped int64  `json:"clamped,omitempty"`
}

// MarshalJSON encodes each histogram as HDR V2 compressed, base64.
func (s *Set) MarshalJSON() ([]byte, error) {
	var w wireSet
	for _, p := range []struct {
		h   *hdr.Histogram
		dst *string
	}{{s.TTFT, &w.TTFT}, {s.TBT, &w.TBT}, {s.E2E, &w.E2E}, {s.Rate, &w.Rate}} {
		b, err := p.h.Encode(hdr.V2CompressedEncodingCookieBase)
		if err != nil {
			return nil, fmt.Errorf("histo: encode: %w", err)
		}
		*p.dst = string(b)
	}
	for _, p := range []struct {
		h   *hdr.Histogram
		dst *string
	}{{s.TTFTCensored, &w.TTFTCensored}, {s.E2ECensored, &w.E2ECensored}, {s.ITL, &w.ITL}} {
		if p.h == nil || p.h.TotalCount() == 0 {
			continue
		}
		b, err := p.h.Encode(hdr.V2CompressedEncodingCookieBase)
		if err != nil {
			return nil, fmt.Errorf("histo: encode: %w", err)
		}
		*p.dst = string(b)
	}
	w.Clamped = s.Clamped
	return json.Marshal(w)
}

// UnmarshalJSON decodes what MarshalJSON wrote. A missing histogram decodes
// as an empty one. It refuses (with an error, never a panic) anything that is
// not an HDR V2 compressed histogram of exactly the geometry New makes, so a
// decoded set merges with any other without dropping a value and a crafted
// document cannot make it allocate more than New does. On error s is left
// unchanged.
func (s *Set) UnmarshalJSON(b []byte) error {
	var w wireSet
	if err := json.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("histo: not a histogram set: %w", err)
	}
	if w.Clamped < 0 {
		return fmt.Errorf("histo: clamped count %d is negative", w.Clamped)
	}
	var n Set
	var err error
	if n.TTFT, err = decodeHist("ttft_us", w.TTFT, latencyHighest, newLatency); err != nil {
		return err
	}
	if n.TBT, err = decodeHist("tbt_us", w.TBT, latencyHighest, newLatency); err != nil {
		return err
	}
	if n.E2E, err = decodeHist("e2e_us", w.E2E, latencyHighest, newLatency); err != nil {
		return err
	}
	if n.Rate, err = decodeHist("rate_mtok_s", w.Rate, rateHighest, newRate); err != nil {
		return err
	}
	if n.TTFTCensored, err = decodeHist("ttft_censored_us", w.TTFTCensored, latencyHighest, newLatency); err != nil {
		return err
	}
	if n.E2ECensored, err = decodeHist("e2e_censored_us", w.E2ECensored, latencyHighest, newLatency); err != nil {
		return err
	}
	if n.ITL, err = decodeHist("itl_us", w.ITL, latencyHighest, newLatency); err != nil {
		return err
	}
	n.Clamped = w.Clamped
	*s = n
	return nil
}

var (
	latencyHighest = MaxLatency.Microseconds()
	rateHighest    = int64(MaxRate * rateScale)
)

// decodeHist decodes one base64 HDR V2 compressed histogram whose geometry
// must be (1, highest, sigFigs).
func decodeHist(name, v string, highest int64, fresh func() *hdr.Histogram) (h *hdr.Histogram, err error) {
	if v == "" {
		return fresh(), nil
	}
	if err := checkHeader(v, highest); err != nil {
		return nil, fmt.Errorf("histo: %s: %w", name, err)
	}
	defer func() {
		if r := recover(); r != nil {
			h, err = nil, fmt.Errorf("histo: %s: corrupt histogram: %v", name, r)
		}
	}()
	h, err = hdr.Decode([]byte(v))
	if err != nil {
		return nil, fmt.Errorf("histo: %s: corrupt histogram: %w", name, err)
	}
	return h, nil
}

// checkHeader reads only the fixed header of an encoded histogram (cookie,
// lengths, geometry) and refuses any geometry but ours before the decoder
// allocates a counts array for it.
func checkHeader(v string, highest int64) error {
	raw, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return fmt.Errorf("not base64: %w", err)
	}
	if len(raw) < 8 {
		return fmt.Errorf("encoded histogram of %d bytes is too short", len(raw))
	}
	if c := int32(binary.BigEndian.Uint32(raw[0:4])) &^ 0xf0; c != hdr.V2CompressedEncodingCookieBase {
		return fmt.Errorf("not an HDR V2 compressed histogram (cookie %#x)", uint32(c))
	}
	n := int64(int32(binary.BigEndian.Uint32(raw[4:8])))
	if n < 0 || n > int64(len(raw)-8) {
		return fmt.Errorf("compressed length %d does not fit the %d bytes given", n, len(raw)-8)
	}
	z, err := zlib.NewReader(bytes.NewReader(raw[8 : 8+n]))
	if err != nil {
		return fmt.Errorf("not zlib data: %w", err)
	}
	defer z.Close()
	var hd [40]byte
	if _, err := io.ReadFull(z, hd[:]); err != nil {
		return fmt.Errorf("truncated header: %w", err)
	}
	sig := int32(binary.BigEndian.Uint32(hd[12:16]))
	lowest := int64(binary.BigEndian.Uint64(hd[16:24]))
	high := int64(binary.BigEndian.Uint64(hd[24:32]))
	if sig != sigFigs || lowest != 1 || high != highest {
		return fmt.Errorf("geometry (lowest %d, highest %d, %d digits) is not tokentap's (1, %d, %d)",
			lowest, high, sig, highest, sigFigs)
	}
	return nil
}
