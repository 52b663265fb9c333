package scenarios

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLengthsDraw is a statistical test with fixed keys: each spread's
// draws stay within its bounds and have the mean and spread it names
// (20,000 draws: the sample mean's error is under 1% of the deviation).
func TestLengthsDraw(t *testing.T) {
	tests := []struct {
		name             string
		l                Lengths
		mean             int
		lo, hi           int
		wantMean, wantSD float64
	}{
		{"constant", Lengths{}, 1000, 1000, 1000, 1000, 0},
		// vLLM's range: uniform over [750, 1250], sd (501²−1)/12 under the root.
		{"range ratio 0.25", Lengths{RangeRatio: 0.25}, 1000, 750, 1250, 1000, math.Sqrt((501*501 - 1) / 12.0)},
		// GuideLLM's normal, bounds far: its own mean and deviation.
		{"stdev, wide bounds", Lengths{Stdev: 100, Min: 1, Max: 5000}, 1000, 1, 5000, 1000, 100},
		// Bounds unset: mean ± 5σ.
		{"stdev alone", Lengths{Stdev: 50}, 400, 150, 650, 400, 50},
		// Held within tight bounds: never beyond them.
		{"stdev, tight bounds", Lengths{Stdev: 300, Min: 900, Max: 1100}, 1000, 900, 1100, 1000, -1},
		{"min and max: uniform", Lengths{Min: 10, Max: 30}, 20, 10, 30, 20, math.Sqrt((21*21 - 1) / 12.0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if lo, hi := tt.l.Bounds(tt.mean); lo != tt.lo || hi != tt.hi {
				t.Fatalf("bounds %d … %d, want %d … %d", lo, hi, tt.lo, tt.hi)
			}
			const n = 20000
			var sum, sq float64
			for k := uint64(0); k < n; k++ {
				v := tt.l.Draw(tt.mean, k)
				if v < tt.lo || v > tt.hi {
					t.Fatalf("draw %d outside %d … %d", v, tt.lo, tt.hi)
				}
				sum += float64(v)
				sq += float64(v) * float64(v)
			}
			m := sum / n
			sd := math.Sqrt(sq/n - m*m)
			if tol := max(tt.wantSD*0.03, 0.5); math.Abs(m-tt.wantMean) > tol {
				t.Errorf("mean %.1f, want %.1f", m, tt.wantMean)
			}
			if tt.wantSD >= 0 && math.Abs(sd-tt.wantSD) > max(tt.wantSD*0.03, 0.01) {
				t.Errorf("deviation %.2f, want %.2f", sd, tt.wantSD)
			}
			if a, b := tt.l.Draw(tt.mean, 7), tt.l.Draw(tt.mean, 7); a != b {
				t.Errorf("one key drew %d and %d", a, b)
			}
		})
	}
}

// TestLengthsRefused: spreads that cannot be meant are refused, saying
// why, by Validate and by a scenario file.
func TestLengthsRefused(t *testing.T) {
	base := Seed()
	for _, tt := range []struct {
		name string
		edit func(s *Scenario)
		err  string
	}{
		{"ratio 1", func(s *Scenario) { s.PromptLengths.RangeRatio = 1 }, "random_range_ratio 1: give a ratio from 0 up to, not including, 1"},
		{"ratio and stdev", func(s *Scenario) { s.PromptLengths = Lengths{RangeRatio: 0.2, Stdev: 5} }, "random_range_ratio and a deviation"},
		{"min above max", func(s *Scenario) { s.OutputLengths = Lengths{Stdev: 5, Min: 50, Max: 10} }, "min 50 is above max 10"},
		{"min alone", func(s *Scenario) { s.OutputLengths = Lengths{Min: 10} }, "give both"},
		{"a row outside the bounds", func(s *Scenario) { s.PromptLengths = Lengths{Stdev: 100, Min: 10, Max: 2000} }, "the mean 16384 is outside min 10 … max 2000"},
		{"with a dataset", func(s *Scenario) { s.Dataset = "d.jsonl"; s.OutputLengths = Lengths{RangeRatio: 0.5} }, "a dataset's requests have their own lengths"},
	} {
		s := base
		tt.edit(&s)
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s: error %v, want one saying %q", tt.name, err, tt.err)
		}
	}
	s := base
	s.Contexts = []int{0, 1024}
	s.PromptLengths = Lengths{Stdev: 100, Min: 512, Max: 2048} // context 0 is not spread
	s.OutputLengths = Lengths{RangeRatio: 0.5}
	if err := s.Validate(); err != nil {
		t.Errorf("a spread around every row: %v", err)
	}
}

// TestLoadLengths: the scenario keys are GuideLLM's and vLLM's names.
func TestLoadLengths(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "s.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sc, err := Load(write("contexts: [1k]\nmax_output: 128\nprompt_tokens_stdev: 100\nprompt_tokens_min: 512\nprompt_tokens_max: 2k\noutput_tokens_stdev: 16\noutput_tokens_min: 64\noutput_tokens_max: 192\n"))
	if err != nil {
		t.Fatal(err)
	}
	if sc.PromptLengths != (Lengths{Stdev: 100, Min: 512, Max: 2048}) || sc.OutputLengths != (Lengths{Stdev: 16, Min: 64, Max: 192}) {
		t.Errorf("prompt %+v, output %+v", sc.PromptLengths, sc.OutputLengths)
	}
	sc, err = Load(write("contexts: [1k]\nrandom_range_ratio: 0.25\n"))
	if err != nil || sc.PromptLengths.RangeRatio != 0.25 || sc.OutputLengths.RangeRatio != 0.25 {
		t.Errorf("random_range_ratio: %+v %+v, %v", sc.PromptLengths, sc.OutputLengths, err)
	}
	if _, err = Load(write("random_range_ratio: lots\n")); err == nil || !strings.Contains(err.Error(), `"lots" is not a number`) {
		t.Errorf("a bad ratio: %v", err)
	}
	if _, err = Load(write("prompt_tokens_stdev: [1]\n")); err == nil {
		t.Error("a list as a deviation was taken")
	}
}

// TestRequestsKey: a scenario's request count is a whole number; "1k" is
// told to be written in full, as --requests is.
func TestRequestsKey(t *testing.T) {
	sc, err := Parse([]byte("requests: 20\n"), "s.yaml")
	if err != nil || sc.Requests != 20 || sc.Window != 0 {
		t.Fatalf("requests 20: %+v, %v (want 20 and no window)", sc.Requests, err)
	}
	for in, want := range map[string]string{
		"requests: 1k\n":  `"1k": write the count in full (such as 1000)`,
		"requests: -1\n":  `"-1": give a whole number, 0 or more`,
		"requests: 2.5\n": `"2.5": give a whole number, 0 or more`,
	} {
		if _, err := Parse([]byte(in), "s.yaml"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one saying %s", in, err, want)
		}
	}
}
