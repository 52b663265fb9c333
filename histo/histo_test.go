package histo

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// within says whether got is want as HDR at 3 significant digits reports it:
// the highest value equivalent to want, i.e. want or at most 0.1% (and at
// least 1 unit) above it.
func within(got, want time.Duration) bool {
	if got < want {
		return false
	}
	slack := want / 1000
	if slack < time.Microsecond {
		slack = time.Microsecond
	}
	return got-want <= slack
}

func TestLatencyPercentiles(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name   string
		values []time.Duration
		q      float64
		want   time.Duration
	}{
		{"single value", []time.Duration{44 * ms}, 0.5, 44 * ms},
		{"odd count median", []time.Duration{3 * ms, 1 * ms, 2 * ms}, 0.5, 2 * ms},
		{"even count median is the lower middle", []time.Duration{1 * ms, 2 * ms, 3 * ms, 4 * ms}, 0.5, 2 * ms},
		{"p0 is the smallest", []time.Duration{5 * ms, 7 * ms, 9 * ms}, 0, 5 * ms},
		{"p100 is the largest", []time.Duration{5 * ms, 7 * ms, 9 * ms}, 1, 9 * ms},
		{"p90 of 1..10 ms", seq(1, 10, ms), 0.9, 9 * ms},
		{"p99 of 1..100 ms", seq(1, 100, ms), 0.99, 99 * ms},
		{"microsecond resolution", []time.Duration{6150 * time.Microsecond}, 0.5, 6150 * time.Microsecond},
		{"sub-microsecond truncates to 0", []time.Duration{400 * time.Nanosecond}, 0.5, 0},
		{"minutes keep 3 digits", []time.Duration{211378 * ms}, 0.5, 211378 * ms},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			for _, v := range tc.values {
				s.RecordTTFT(v)
			}
			got, ok := Latency(s.TTFT, tc.q)
			if !ok {
				t.Fatal("Latency reported an empty histogram")
			}
			if !within(got, tc.want) {
				t.Fatalf("q%.2f = %v, want %v (+0.1%%)", tc.q, got, tc.want)
			}
		})
	}
}

func seq(from, to int, unit time.Duration) []time.Duration {
	var out []time.Duration
	for i := from; i <= to; i++ {
		out = append(out, time.Duration(i)*unit)
	}
	return out
}

func TestEmptyHistogramsSayNotOK(t *testing.T) {
	s := New()
	if _, ok := Latency(s.TBT, 0.5); ok {
		t.Error("Latency of an empty histogram reported ok")
	}
	if _, ok := Latency(nil, 0.5); ok {
		t.Error("Latency of a nil histogram reported ok")
	}
	if _, ok := s.RateAt(0.5); ok {
		t.Error("RateAt of an empty histogram reported ok")
	}
}

func TestTBTCountsEveryToken(t *testing.T) {
	s := New()
	s.RecordTBT(10*time.Millisecond, 1)
	s.RecordTBT(2*time.Millisecond, 4) // one 8 ms gap split over 4 tokens
	s.RecordTBT(5*time.Millisecond, 0) // no token: ignored
	if n := s.TBT.TotalCount(); n != 5 {
		t.Fatalf("TBT count = %d, want 5", n)
	}
	if got, _ := Latency(s.TBT, 0.5); !within(got, 2*time.Millisecond) {
		t.Fatalf("median TBT = %v, want 2ms", got)
	}
}

func TestRatePercentiles(t *testing.T) {
	tests := []struct {
		rates []float64
		q     float64
		want  float64
	}{
		{[]float64{162.5}, 0.5, 162.5},
		{[]float64{26.5, 30.4, 28.7}, 0.5, 28.7},
		{[]float64{0.25}, 0.5, 0.25},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.9, 9},
	}
	for _, tc := range tests {
		s := New()
		for _, r := range tc.rates {
			s.RecordRate(r)
		}
		got, ok := s.RateAt(tc.q)
		if !ok || got < tc.want || got > tc.want*1.001+0.001 {
			t.Errorf("rates %v q%.2f = %v (ok %v), want %v", tc.rates, tc.q, got, ok, tc.want)
		}
	}
}

func TestClamping(t *testing.T) {
	tests := []struct {
		name        string
		record      func(*Set)
		clamped     int64
		latency     *time.Duration // expected max latency recorded, if a latency
		rate        float64        // expected max rate recorded, if a rate
		wantRecords int64
	}{
		{"latency above the range", func(s *Set) { s.RecordE2E(3 * time.Hour) }, 1, ptr(MaxLatency), 0, 1},
		{"latency at the bound", func(s *Set) { s.RecordE2E(MaxLatency) }, 0, ptr(MaxLatency), 0, 1},
		{"negative latency", func(s *Set) { s.RecordTTFT(-time.Second) }, 1, ptr(time.Duration(0)), 0, 1},
		{"many tokens over the bound count each", func(s *Set) { s.RecordTBT(5*time.Hour, 3) }, 3, ptr(MaxLatency), 0, 3},
		{"rate above the range", func(s *Set) { s.RecordRate(5e6) }, 1, nil, MaxRate, 1},
		{"rate +Inf", func(s *Set) { s.RecordRate(math.Inf(1)) }, 1, nil, MaxRate, 1},
		{"negative rate", func(s *Set) { s.RecordRate(-3) }, 1, nil, 0, 1},
		{"NaN rate is dropped", func(s *Set) { s.RecordRate(math.NaN()) }, 1, nil, 0, 0},
		{"rate in range", func(s *Set) { s.RecordRate(99.9) }, 0, nil, 99.9, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			tc.record(s)
			if s.Clamped != tc.clamped {
				t.Errorf("Clamped = %d, want %d", s.Clamped, tc.clamped)
			}
			total := s.TTFT.TotalCount() + s.TBT.TotalCount() + s.E2E.TotalCount() + s.Rate.TotalCount()
			if total != tc.wantRecords {
				t.Errorf("values recorded = %d, want %d", total, tc.wantRecords)
			}
			if tc.latency != nil {
				var h *hdr.Histogram
				for _, c := range []*hdr.Histogram{s.TTFT, s.TBT, s.E2E} {
					if c.TotalCount() > 0 {
						h = c
					}
				}
				got, _ := Latency(h, 1)
				if !within(got, *tc.latency) {
					t.Errorf("recorded %v, want %v", got, *tc.latency)
				}
			}
			if tc.wantRecords > 0 && tc.latency == nil {
				got, _ := s.RateAt(1)
				if got < tc.rate || got > tc.rate*1.001+0.001 {
					t.Errorf("recorded rate %v, want %v", got, tc.rate)
				}
			}
		})
	}
}

func ptr(d time.Duration) *time.Duration { return &d }

// fill records a realistic spread of values: TTFT 20 ms–5 s, TBT 5–80 ms,
// E2E 1–60 s, rates 10–200 tok/s.
func fill(s *Set, r *rand.Rand, n int) {
	for range n {
		s.RecordTTFT(time.Duration(20_000+r.IntN(5_000_000)) * time.Microsecond)
		s.RecordTBT(time.Duration(5_000+r.IntN(75_000))*time.Microsecond, 1+r.IntN(3))
		s.RecordE2E(time.Duration(1+r.IntN(60_000)) * time.Millisecond)
		s.RecordRate(10 + 190*r.Float64())
	}
}

var quantiles = []float64{0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1}

// sameSet fails t unless a and b hold the same counts in every histogram and
// answer every quantile alike.
func sameSet(t *testing.T, a, b *Set) {
	t.Helper()
	names := []string{"TTFT", "TBT", "E2E", "Rate"}
	for i, p := range [][2]*hdr.Histogram{{a.TTFT, b.TTFT}, {a.TBT, b.TBT}, {a.E2E, b.E2E}, {a.Rate, b.Rate}} {
		if p[0].TotalCount() != p[1].TotalCount() {
			t.Errorf("%s count %d != %d", names[i], p[0].TotalCount(), p[1].TotalCount())
		}
		if !p[0].Equals(p[1]) {
			t.Errorf("%s histograms differ", names[i])
		}
		for _, q := range quantiles {
			if x, y := p[0].ValueAtQuantile(q*100), p[1].ValueAtQuantile(q*100); x != y {
				t.Errorf("%s q%v: %d != %d", names[i], q, x, y)
			}
		}
	}
	if a.Clamped != b.Clamped {
		t.Errorf("Clamped %d != %d", a.Clamped, b.Clamped)
	}
}

func TestMergeEqualsOneSetFedEverything(t *testing.T) {
	const workers = 8
	all := New()
	merged := New()
	for w := range workers {
		// The same seed feeds the worker's set and the all-in-one set.
		per := New()
		fill(per, rand.New(rand.NewPCG(uint64(w), 1)), 500+w*37)
		fill(all, rand.New(rand.NewPCG(uint64(w), 1)), 500+w*37)
		per.RecordE2E(3 * time.Hour) // a clamped value travels with its set
		all.RecordE2E(3 * time.Hour)
		merged.Merge(per)
	}
	merged.Merge(nil)
	sameSet(t, merged, all)
	if merged.Clamped != workers {
		t.Errorf("Clamped = %d, want %d", merged.Clamped, workers)
	}
}

func TestMergeDecodedSets(t *testing.T) {
	// Sets from several load generators arrive as JSON: merging the decoded
	// sets must equal merging the originals.
	a, b := New(), New()
	fill(a, rand.New(rand.NewPCG(1, 2)), 300)
	fill(b, rand.New(rand.NewPCG(3, 4)), 700)
	want := New()
	want.Merge(a)
	want.Merge(b)
	got := New()
	for _, s := range []*Set{a, b} {
		js, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var d Set
		if err := json.Unmarshal(js, &d); err != nil {
			t.Fatal(err)
		}
		got.Merge(&d)
	}
	sameSet(t, got, want)
}

func TestJSONRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		fill func(*Set)
	}{
		{"empty", func(*Set) {}},
		{"one value each", func(s *Set) {
			s.RecordTTFT(44 * time.Millisecond)
			s.RecordTBT(6200*time.Microsecond, 1)
			s.RecordE2E(50 * time.Second)
			s.RecordRate(162.5)
		}},
		{"thousands of values", func(s *Set) { fill(s, rand.New(rand.NewPCG(7, 7)), 5000) }},
		{"clamped values", func(s *Set) {
			s.RecordTTFT(10 * time.Hour)
			s.RecordRate(math.NaN())
			s.RecordTBT(0, 3)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			tc.fill(s)
			js, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			var back Set
			if err := json.Unmarshal(js, &back); err != nil {
				t.Fatalf("decode %s: %v", js, err)
			}
			sameSet(t, &back, s)
			// Percentiles read from the decoded set are the ones of the original.
			for _, q := range quantiles {
				a, aok := Latency(s.TBT, q)
				b, bok := Latency(back.TBT, q)
				if a != b || aok != bok {
					t.Errorf("TBT q%v: %v,%v after round trip, %v,%v before", q, b, bok, a, aok)
				}
				ra, _ := s.RateAt(q)
				rb, _ := back.RateAt(q)
				if ra != rb {
					t.Errorf("rate q%v: %v after round trip, %v before", q, rb, ra)
				}
			}
			// Encoded form: base64 text, HDR V2 compressed cookie.
			var w map[string]any
			if err := json.Unmarshal(js, &w); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"ttft_us", "tbt_us", "e2e_us", "rate_mtok_s"} {
				v, _ := w[k].(string)
				if !strings.HasPrefix(v, "HISTF") { // base64 of the 0x1c849314 cookie
					t.Errorf("%s = %q, want HDR V2 compressed base64", k, v)
				}
			}
			// The decoded set keeps working: record into it and re-encode.
			back.RecordTTFT(time.Second)
			if _, err := json.Marshal(&back); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestUnmarshalMissingHistogramsAreEmpty(t *testing.T) {
	var s Set
	if err := json.Unmarshal([]byte(`{"clamped":2}`), &s); err != nil {
		t.Fatal(err)
	}
	if s.TTFT == nil || s.TBT == nil || s.E2E == nil || s.Rate == nil || s.Clamped != 2 {
		t.Fatalf("decoded %+v", s)
	}
	s.RecordTBT(time.Millisecond, 1) // usable
	s.Merge(New())
}

func TestUnmarshalRefuses(t *testing.T) {
	foreign := func(h *hdr.Histogram) string {
		h.RecordValue(5)
		b, err := h.Encode(hdr.V2CompressedEncodingCookieBase)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	good, _ := json.Marshal(New())
	tests := []struct {
		name, doc, wantErr string
	}{
		{"wrong types", `{"tbt_us":5}`, "not a histogram set"},
		{"not an object", `[1]`, "not a histogram set"},
		{"not base64", `{"tbt_us":"!!!"}`, "tbt_us: not base64"},
		{"too short", `{"tbt_us":"AAAA"}`, "too short"},
		{"wrong cookie", `{"ttft_us":"AAAAAAAAAAAA"}`, "not an HDR V2 compressed"},
		{"other geometry (5 digits)", `{"e2e_us":"` + foreign(hdr.New(1, 7_200_000_000, 5)) + `"}`, "geometry"},
		{"other range", `{"e2e_us":"` + foreign(hdr.New(1, 1_000_000, 3)) + `"}`, "geometry"},
		{"a latency histogram as the rate", `{"rate_mtok_s":"` + foreign(newLatency()) + `"}`, "geometry"},
		{"negative clamped", `{"clamped":-1}`, "negative"},
		{"truncated", `{"ttft_us":"` + mustField(t, good, "ttft_us")[:30] + `"}`, "ttft_us"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			s.RecordTTFT(time.Second)
			err := json.Unmarshal([]byte(tc.doc), s)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			if s.TTFT.TotalCount() != 1 {
				t.Fatal("a failed decode changed the set")
			}
		})
	}
}

func mustField(t *testing.T, js []byte, k string) string {
	t.Helper()
	var w map[string]any
	if err := json.Unmarshal(js, &w); err != nil {
		t.Fatal(err)
	}
	return w[k].(string)
}

func TestRecordDoesNotAllocate(t *testing.T) {
	s := New()
	allocs := testing.AllocsPerRun(1000, func() {
		s.RecordTTFT(44 * time.Millisecond)
		s.RecordTBT(6*time.Millisecond, 2)
		s.RecordE2E(30 * time.Second)
		s.RecordRate(162.5)
	})
	if allocs != 0 {
		t.Fatalf("Record* allocate %.1f times per call set, want 0", allocs)
	}
}

func FuzzUnmarshalJSON(f *testing.F) {
	s := New()
	fill(s, rand.New(rand.NewPCG(9, 9)), 50)
	js, _ := json.Marshal(s)
	f.Add(js)
	empty, _ := json.Marshal(New())
	f.Add(empty)
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"tbt_us":"HISTFAAAAB94nJNpmSzMwMDAzAABMJoRTHMwMDAyAAAtIgGf"}`))
	f.Add([]byte(`{"ttft_us":"HISTFAAAAAAAAAA=","clamped":3}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s Set
		if err := json.Unmarshal(b, &s); err != nil {
			return
		}
		// Whatever decoded must be a working set of our geometry.
		if s.TTFT == nil || s.TBT == nil || s.E2E == nil || s.Rate == nil {
			// json "null" leaves the set untouched (no UnmarshalJSON call).
			return
		}
		s.RecordTTFT(time.Millisecond)
		s.RecordRate(10)
		all := New()
		all.Merge(&s)
		if all.TTFT.TotalCount() != s.TTFT.TotalCount() || all.Rate.TotalCount() != s.Rate.TotalCount() {
			t.Fatalf("merging a decoded set lost values")
		}
		if _, err := json.Marshal(&s); err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		Latency(s.TBT, 0.5)
		s.RateAt(0.99)
	})
}

func BenchmarkRecord(b *testing.B) {
	s := New()
	b.ReportAllocs()
	for i := range b.N {
		d := time.Duration(1000+i%100000) * time.Microsecond
		s.RecordTTFT(d)
		s.RecordTBT(d, 1)
		s.RecordE2E(d)
		s.RecordRate(float64(i%500) + 0.5)
	}
}

func BenchmarkRecordTBT(b *testing.B) {
	s := New()
	b.ReportAllocs()
	for i := range b.N {
		s.RecordTBT(time.Duration(5000+i%50000)*time.Microsecond, 1)
	}
}

// TestMergeExact: shards' sets merge to exactly the set of all their
// values, and a set of other settings is refused before anything merges.
func TestMergeExact(t *testing.T) {
	parts := []*Set{New(), New(), New()}
	all := New()
	for i := range 3000 {
		d := time.Duration(i*i%97+1) * 137 * time.Microsecond
		p := parts[i%3]
		p.RecordTTFT(d)
		p.RecordTBT(d/7, 1+i%3)
		p.RecordRate(float64(i%500) + 0.25)
		all.RecordTTFT(d)
		all.RecordTBT(d/7, 1+i%3)
		all.RecordRate(float64(i%500) + 0.25)
	}
	m := New()
	for _, p := range parts {
		dropped, err := m.MergeExact(p)
		if err != nil || dropped != 0 {
			t.Fatalf("MergeExact: dropped %d, %v", dropped, err)
		}
	}
	if !m.TTFT.Equals(all.TTFT) || !m.TBT.Equals(all.TBT) || !m.Rate.Equals(all.Rate) || !m.E2E.Equals(all.E2E) {
		t.Error("the merged set is not the set of all values")
	}

	// Other settings: the values would land in other buckets.
	other := New()
	other.TBT = hdr.New(1, MaxLatency.Microseconds(), 2)
	_ = other.TBT.RecordValue(12345)
	before := m.TTFT.TotalCount()
	if _, err := m.MergeExact(other); err == nil || !strings.Contains(err.Error(), "settings differ") {
		t.Errorf("merging other settings: %v, want a refusal", err)
	}
	if m.TTFT.TotalCount() != before {
		t.Error("a refused merge merged part of the set")
	}
	if _, err := m.MergeExact(&Set{TTFT: newLatency()}); err == nil {
		t.Error("merging a set without histograms succeeded")
	}
	if d, err := m.MergeExact(nil); d != 0 || err != nil {
		t.Errorf("merging nil: %d, %v", d, err)
	}
}
