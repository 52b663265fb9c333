package result

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/tokentap/tokentap/histo"
)

// DefaultPercentiles are the percentiles reports show and the result
// carries as numbers when none are asked for (--percentiles 50,90,99).
var DefaultPercentiles = []float64{50, 90, 99}

// Percentiles are a decode cell's distributions read off its histograms at
// the run's percentiles, as plain numbers beside the histograms so that jq
// and spreadsheets can read them (the histograms stay the source: any
// other percentile can be read from them later).
type Percentiles struct {
	TTFTms     *Dist `json:"ttft_ms,omitempty"`
	TBTms      *Dist `json:"tbt_ms,omitempty"`
	E2Ems      *Dist `json:"e2e_ms,omitempty"`
	PerRequest *Dist `json:"per_request_tok_s,omitempty"`
}

// Dist is one distribution: its sample count and its value at each
// percentile, encoded as {"n": 40, "p50": 34.1, "p90": 35.2, "p99": 36,
// "low_count": ["p99"]}. LowCount names the percentiles the samples are
// too few for (LowCount): such a value is the largest sample, not a tail.
//
// TTFT and end to end are over every request sent (METHOD §3): Sent is N
// plus the requests censored (no first token, no end when cut or ended;
// 0 when none was, and then Sent is N), and AtLeast names the percentiles
// that lie among the censored, whose value is a lower bound (histo.Quantile).
type Dist struct {
	N        int64
	Sent     int64
	At       []Point
	LowCount []string
	AtLeast  []string
}

// Total is the requests the distribution is over: Sent where some were
// censored, else N.
func (d *Dist) Total() int64 {
	if d == nil {
		return 0
	}
	return max(d.N, d.Sent)
}

// Censored reports whether percentile p lies among the censored: its
// value is a lower bound, shown as "≥".
func (d *Dist) Censored(p float64) bool {
	return d != nil && slices.Contains(d.AtLeast, Label(p))
}

// Point is one percentile: P in percent (99.9) and its value.
type Point struct {
	P     float64
	Value float64
}

// Label is "p50", "p99.9": how a percentile is named in JSON, CSV and
// reports.
func Label(p float64) string { return "p" + strconv.FormatFloat(p, 'f', -1, 64) }

// LowCount reports whether n samples are too few for percentile p (in
// percent): fewer than 1/(1 − p/100), so that not one sample lies beyond
// it and it reads the largest value seen (under 100 samples for p99, under
// 10 for p90, under 2 for the median); below the median, likewise
// 1/(p/100).
func LowCount(n int64, p float64) bool {
	return float64(n)*min(p/100, 1-p/100) < 1-1e-9
}

// Value returns the value at percentile p and whether the Dist has it.
func (d *Dist) Value(p float64) (float64, bool) {
	if d == nil {
		return 0, false
	}
	for _, pt := range d.At {
		if pt.P == p {
			return pt.Value, true
		}
	}
	return 0, false
}

// Low reports whether percentile p is marked as read from too few samples.
func (d *Dist) Low(p float64) bool {
	return d != nil && slices.Contains(d.LowCount, Label(p))
}

// MarshalJSON writes {"n": …, "p50": …, …, "low_count": […]} in percentile order.
func (d Dist) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"n":`)
	b.WriteString(strconv.FormatInt(d.N, 10))
	if d.Sent > d.N {
		b.WriteString(`,"sent":`)
		b.WriteString(strconv.FormatInt(d.Sent, 10))
	}
	for _, pt := range d.At {
		if math.IsNaN(pt.Value) || math.IsInf(pt.Value, 0) {
			return nil, fmt.Errorf("result: %s is %v", Label(pt.P), pt.Value)
		}
		b.WriteString(`,"` + Label(pt.P) + `":`)
		b.WriteString(strconv.FormatFloat(pt.Value, 'f', -1, 64))
	}
	if len(d.LowCount) > 0 {
		lc, err := json.Marshal(d.LowCount)
		if err != nil {
			return nil, err
		}
		b.WriteString(`,"low_count":`)
		b.Write(lc)
	}
	if len(d.AtLeast) > 0 {
		al, err := json.Marshal(d.AtLeast)
		if err != nil {
			return nil, err
		}
		b.WriteString(`,"at_least":`)
		b.Write(al)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads what MarshalJSON wrote; keys other than n, sent,
// low_count, at_least and pNN are errors.
func (d *Dist) UnmarshalJSON(data []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	var out Dist
	for k, v := range raw {
		switch {
		case k == "n":
			if err := json.Unmarshal(v, &out.N); err != nil || out.N < 0 {
				return fmt.Errorf("percentiles: n %s is not a sample count", v)
			}
		case k == "sent":
			if err := json.Unmarshal(v, &out.Sent); err != nil || out.Sent < 0 {
				return fmt.Errorf("percentiles: sent %s is not a request count", v)
			}
		case k == "at_least":
			if err := json.Unmarshal(v, &out.AtLeast); err != nil {
				return fmt.Errorf("percentiles: at_least: %w", err)
			}
		case k == "low_count":
			if err := json.Unmarshal(v, &out.LowCount); err != nil {
				return fmt.Errorf("percentiles: low_count: %w", err)
			}
		case strings.HasPrefix(k, "p"):
			p, err := strconv.ParseFloat(k[1:], 64)
			if err != nil || p <= 0 || p >= 100 {
				return fmt.Errorf("percentiles: %q is not a percentile", k)
			}
			var val float64
			if err := json.Unmarshal(v, &val); err != nil {
				return fmt.Errorf("percentiles: %s: %w", k, err)
			}
			out.At = append(out.At, Point{P: p, Value: val})
		default:
			return fmt.Errorf("percentiles: unknown key %q", k)
		}
	}
	slices.SortFunc(out.At, func(a, b Point) int { return cmpFloat(a.P, b.P) })
	*d = out
	return nil
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ParsePercentiles reads a list such as "50,90,99" or "p50, p99.9":
// percentiles above 0 and below 100, returned sorted without duplicates.
func ParsePercentiles(s string) ([]float64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("empty list: give percentiles such as 50,90,99")
	}
	var out []float64
	for i, part := range strings.Split(s, ",") {
		t := strings.TrimPrefix(strings.ToLower(strings.TrimSpace(part)), "p")
		p, err := strconv.ParseFloat(t, 64)
		if err != nil || math.IsNaN(p) || p <= 0 || p >= 100 {
			return nil, fmt.Errorf("%q: item %d (%q) is not a percentile between 0 and 100, such as 50, 90, 99 or 99.9", s, i+1, strings.TrimSpace(part))
		}
		out = append(out, p)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// latencyDist reads a latency histogram (µs) at ps, in milliseconds, over
// the values it holds and the censored ones beside it (nil: none), with
// histo.Quantile; nil when neither holds a value. A percentile's samples
// are too few (LowCount) by the count of every request, seen or censored.
func latencyDist(h, censored *hdr.Histogram, ps []float64) *Dist {
	var n, nc int64
	if h != nil {
		n = h.TotalCount()
	}
	if censored != nil {
		nc = censored.TotalCount()
	}
	if n+nc == 0 {
		return nil
	}
	d := &Dist{N: n}
	if nc > 0 {
		d.Sent = n + nc
	}
	for _, p := range ps {
		v, atLeast, _ := histo.Quantile(h, censored, p/100)
		d.At = append(d.At, Point{P: p, Value: round3(float64(v) / float64(time.Millisecond))})
		switch {
		case atLeast:
			d.AtLeast = append(d.AtLeast, Label(p))
		case LowCount(n+nc, p):
			d.LowCount = append(d.LowCount, Label(p))
		}
	}
	return d
}

// round3 rounds to 3 decimals: latencies are kept to the microsecond.
func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// PercentilesOf reads a histogram set at ps (in percent): TTFT, time
// between tokens and end-to-end in milliseconds (TTFT and end to end over
// every request, the censored included), per-request decode rate
// in tokens per second. nil when the set is nil or empty.
func PercentilesOf(s *histo.Set, ps []float64) *Percentiles {
	if s == nil {
		return nil
	}
	if len(ps) == 0 {
		ps = DefaultPercentiles
	}
	out := &Percentiles{TTFTms: latencyDist(s.TTFT, s.TTFTCensored, ps), TBTms: latencyDist(s.TBT, nil, ps),
		E2Ems: latencyDist(s.E2E, s.E2ECensored, ps)}
	if n := s.Rate.TotalCount(); n > 0 {
		d := &Dist{N: n}
		for _, p := range ps {
			v, _ := s.RateAt(p / 100)
			d.At = append(d.At, Point{P: p, Value: round3(v)})
			if LowCount(n, p) {
				d.LowCount = append(d.LowCount, Label(p))
			}
		}
		out.PerRequest = d
	}
	if out.TTFTms == nil && out.TBTms == nil && out.E2Ems == nil && out.PerRequest == nil {
		return nil
	}
	return out
}

// SetPercentiles fills every decode cell's Percentiles from its
// histograms at ps (nil: DefaultPercentiles) and records ps in the
// settings. Cells without histograms get none.
func (r *Result) SetPercentiles(ps []float64) {
	if len(ps) == 0 {
		ps = DefaultPercentiles
	}
	r.Settings.Percentiles = slices.Clone(ps)
	for i := range r.Decode {
		c := &r.Decode[i]
		c.Percentiles = PercentilesOf(c.Histograms, ps)
	}
}
