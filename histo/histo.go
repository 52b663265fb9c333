// Package histo keeps the latency and rate histograms of a cell, a worker or
// a proxy model on HdrHistogram: microsecond resolution, 3 significant
// digits, merged without loss and encoded (HDR V2 compressed, base64) inside
// the JSON result so any percentile can be read later (METHOD.md §3).
//
// A Set is owned by one goroutine; workers keep their own and Merge them once
// (as fortio does), so no lock sits on the hot path.
package histo

import (
	"encoding/json"
	"fmt"
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

// Set holds one run's worth of a cell's distributions.
type Set struct {
	TTFT *hdr.Histogram // time to first token, µs
	TBT  *hdr.Histogram // time between tokens, µs (a multi-token event's gap split evenly, per token)
	E2E  *hdr.Histogram // request end-to-end, µs
	Rate *hdr.Histogram // per-request decode rate, milli-tokens/s
	// Clamped counts values outside a histogram's range that were clamped.
	Clamped int64
}

func newLatency() *hdr.Histogram { return hdr.New(1, MaxLatency.Microseconds(), sigFigs) }
func newRate() *hdr.Histogram    { return hdr.New(1, int64(MaxRate*rateScale), sigFigs) }

// New returns an empty set.
func New() *Set {
	return &Set{TTFT: newLatency(), TBT: newLatency(), E2E: newLatency(), Rate: newRate()}
}

func (s *Set) recordLatency(h *hdr.Histogram, d time.Duration, n int64) {
	us := d.Microseconds()
	if us < 1 {
		us = 1 // sub-microsecond gaps are real (a multi-token event split many ways); keep them in the first bucket
	}
	if us > MaxLatency.Microseconds() {
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

// RecordE2E records one request's end-to-end time.
func (s *Set) RecordE2E(d time.Duration) { s.recordLatency(s.E2E, d, 1) }

// RecordRate records one request's decode rate in tokens per second.
func (s *Set) RecordRate(tokensPerSecond float64) {
	v := int64(tokensPerSecond * rateScale)
	if v < 1 {
		v = 1
	}
	if v > int64(MaxRate*rateScale) {
		v = int64(MaxRate * rateScale)
		s.Clamped++
	}
	_ = s.Rate.RecordValue(v)
}

// Merge adds every value of o into s. Both must come from New or Decode.
func (s *Set) Merge(o *Set) {
	if o == nil {
		return
	}
	s.TTFT.Merge(o.TTFT)
	s.TBT.Merge(o.TBT)
	s.E2E.Merge(o.E2E)
	s.Rate.Merge(o.Rate)
	s.Clamped += o.Clamped
}

// Reset empties s.
func (s *Set) Reset() {
	s.TTFT.Reset()
	s.TBT.Reset()
	s.E2E.Reset()
	s.Rate.Reset()
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

type wireSet struct {
	TTFT    string `json:"ttft_us"`
	TBT     string `json:"tbt_us"`
	E2E     string `json:"e2e_us"`
	Rate    string `json:"rate_mtok_s"`
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
	w.Clamped = s.Clamped
	return json.Marshal(w)
}

// UnmarshalJSON decodes what MarshalJSON wrote.
func (s *Set) UnmarshalJSON(b []byte) error {
	var w wireSet
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	dec := func(name, v string, fresh func() *hdr.Histogram) (*hdr.Histogram, error) {
		if v == "" {
			return fresh(), nil
		}
		h, err := hdr.Decode([]byte(v))
		if err != nil {
			return nil, fmt.Errorf("histo: %s: %w", name, err)
		}
		return h, nil
	}
	var err error
	if s.TTFT, err = dec("ttft_us", w.TTFT, newLatency); err != nil {
		return err
	}
	if s.TBT, err = dec("tbt_us", w.TBT, newLatency); err != nil {
		return err
	}
	if s.E2E, err = dec("e2e_us", w.E2E, newLatency); err != nil {
		return err
	}
	if s.Rate, err = dec("rate_mtok_s", w.Rate, newRate); err != nil {
		return err
	}
	s.Clamped = w.Clamped
	return nil
}
