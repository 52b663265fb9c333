package result

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/histo"
)

// TestLowCount: a percentile is marked when not one sample lies beyond it.
func TestLowCount(t *testing.T) {
	tests := []struct {
		n    int64
		p    float64
		want bool
	}{
		{1, 50, true}, {2, 50, false},
		{9, 90, true}, {10, 90, false},
		{99, 99, true}, {100, 99, false},
		{2, 99.9, true}, {999, 99.9, true}, {1000, 99.9, false},
		{9, 10, true}, {10, 10, false}, // below the median: samples beneath it count
	}
	for _, tt := range tests {
		if got := LowCount(tt.n, tt.p); got != tt.want {
			t.Errorf("LowCount(%d, p%v) = %v, want %v", tt.n, tt.p, got, tt.want)
		}
	}
}

func TestParsePercentiles(t *testing.T) {
	good := map[string][]float64{
		"50,90,99":           {50, 90, 99},
		" p99.9, 50 ,P90,50": {50, 90, 99.9},
		"99.99":              {99.99},
	}
	for in, want := range good {
		got, err := ParsePercentiles(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ParsePercentiles(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "100", "50,,90", "p", "ninety", "-5", "NaN"} {
		if _, err := ParsePercentiles(in); err == nil {
			t.Errorf("ParsePercentiles(%q) accepted", in)
		}
	}
}

// TestPercentilesOf reads a histogram set as numbers, marks the
// percentiles too few samples allow, and encodes them so jq reads
// .ttft_ms.p99 as a number.
func TestPercentilesOf(t *testing.T) {
	s := histo.New()
	for i := 1; i <= 100; i++ {
		s.RecordTTFT(time.Duration(i) * time.Millisecond)
	}
	s.RecordTBT(6200*time.Microsecond, 2)
	s.RecordRate(150)
	p := PercentilesOf(s, []float64{50, 90, 99, 99.9})
	if p == nil || p.TTFTms == nil || p.TBTms == nil || p.PerRequest == nil || p.E2Ems != nil {
		t.Fatalf("PercentilesOf = %+v; want TTFT, TBT and rate, no end-to-end", p)
	}
	if v, ok := p.TTFTms.Value(50); !ok || v < 49.9 || v > 50.1 {
		t.Errorf("TTFT p50 %v, want 50 ms", v)
	}
	if v, _ := p.TTFTms.Value(99); v < 98.9 || v > 99.1 {
		t.Errorf("TTFT p99 %v, want 99 ms", v)
	}
	if p.TTFTms.N != 100 || !reflect.DeepEqual(p.TTFTms.LowCount, []string{"p99.9"}) {
		t.Errorf("TTFT n %d low %v; want 100 samples, p99.9 too few", p.TTFTms.N, p.TTFTms.LowCount)
	}
	if !reflect.DeepEqual(p.TBTms.LowCount, []string{"p90", "p99", "p99.9"}) {
		t.Errorf("TBT of 2 samples: low %v", p.TBTms.LowCount)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"ttft_ms":{"n":100,"p50":50.015,"p90":90.047,"p99":99.007,"p99.9":100.031,"low_count":["p99.9"]}`) {
		t.Errorf("JSON layout: %s", b)
	}
	var back Percentiles
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(&back, p) {
		t.Errorf("round trip: %v\n got %+v\nwant %+v", err, back, p)
	}
	for _, bad := range []string{`{"n":1,"p150":3}`, `{"n":-1}`, `{"n":1,"median":3}`, `{"n":1,"p50":"x"}`} {
		var d Dist
		if err := json.Unmarshal([]byte(bad), &d); err == nil {
			t.Errorf("Dist accepted %s", bad)
		}
	}
	if PercentilesOf(histo.New(), nil) != nil || PercentilesOf(nil, nil) != nil {
		t.Error("an empty or absent set has no percentiles")
	}
}

// TestSetPercentiles fills every cell with histograms and records the
// percentiles in the settings.
func TestSetPercentiles(t *testing.T) {
	r := sample()
	r.SetPercentiles(nil)
	if !reflect.DeepEqual(r.Settings.Percentiles, DefaultPercentiles) {
		t.Errorf("settings percentiles %v", r.Settings.Percentiles)
	}
	if c := r.Cell(0, 1); c.Percentiles == nil || c.Percentiles.TTFTms == nil || c.Percentiles.TTFTms.N != 1 {
		t.Errorf("measured cell percentiles %+v", c.Percentiles)
	}
	if r.Cell(0, 2).Percentiles != nil {
		t.Error("a cell without histograms got percentiles")
	}
}

// FuzzParsePercentiles: any text either fails or gives sorted, distinct
// percentiles strictly between 0 and 100 that label and parse back.
func FuzzParsePercentiles(f *testing.F) {
	for _, s := range []string{"50,90,99", "p99.9", " 1 , 2", "0", "100", "1e1", "NaN", ",", "99.999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := ParsePercentiles(s)
		if err != nil {
			return
		}
		var labels []string
		for i, p := range ps {
			if !(p > 0 && p < 100) || (i > 0 && p <= ps[i-1]) {
				t.Fatalf("%q gave %v", s, ps)
			}
			labels = append(labels, Label(p))
		}
		back, err := ParsePercentiles(strings.Join(labels, ","))
		if err != nil || !reflect.DeepEqual(back, ps) {
			t.Fatalf("%q: labels %v parse back as %v, %v", s, labels, back, err)
		}
	})
}

// FuzzDistJSON: a distribution decoded from any JSON encodes and decodes
// back to itself, and decoding never panics.
func FuzzDistJSON(f *testing.F) {
	for _, s := range []string{`{"n":3,"p50":1.5,"p99.9":2,"low_count":["p99.9"]}`, `{"n":0}`, `{}`, `{"p1":1}`, `[]`, `{"n":1,"p50":-0}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var d Dist
		if err := json.Unmarshal([]byte(s), &d); err != nil {
			return
		}
		b, err := json.Marshal(d)
		if err != nil {
			return // NaN and infinities cannot be encoded, and are refused
		}
		var back Dist
		if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, d) && !(len(back.At) == 0 && len(d.At) == 0) {
			t.Fatalf("%s → %s → %+v (%v), want %+v", s, b, back, err, d)
		}
	})
}
