package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tokentap/tokentap/result"
)

// TestWorkloadSettingsShownAndCompared: each workload setting is a Run
// row of every format and a difference `report a b` names; a bursty run's
// grid says its arrivals are gamma, not Poisson.
func TestWorkloadSettingsShownAndCompared(t *testing.T) {
	spread := &result.Lengths{Stdev: 128, Min: 256, Max: 1024, Summary: "normal, deviation 128, held within 256 … 1024"}
	for _, tc := range []struct {
		name string
		edit func(s *result.Settings)
		want []string
	}{
		{"prompt lengths", func(s *result.Settings) { s.PromptLengths = spread }, []string{"Prompt lengths", "deviation 128"}},
		{"output lengths", func(s *result.Settings) {
			s.OutputLengths = &result.Lengths{RangeRatio: 0.25, Summary: "uniform within ±25% of the mean (--random-range-ratio 0.25)"}
		}, []string{"Output lengths", "--random-range-ratio 0.25"}},
		{"burstiness", func(s *result.Settings) { s.Burstiness = 0.25 }, []string{"Burstiness", "0.25"}},
		{"requests", func(s *result.Settings) { s.Requests = 200 }, []string{"Requests per cell", "200"}},
	} {
		a, b := loadSeed(t, "002"), loadSeed(t, "002")
		tc.edit(&b.Settings)
		for _, f := range []Format{Text, Markdown, HTML} {
			var buf bytes.Buffer
			if err := Render(&buf, b, f); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(buf.String(), w) {
					t.Errorf("%s, %s report: lacks %q", tc.name, f, w)
				}
			}
		}
		var buf bytes.Buffer
		if err := Compare(&buf, a, b, "text"); err != nil {
			t.Fatal(err)
		}
		_, differs, _ := strings.Cut(buf.String(), "What differs")
		differs, _, _ = strings.Cut(differs, "\n\n")
		if flat := strings.Join(strings.Fields(differs), " "); !strings.Contains(flat, tc.want[0]) {
			t.Errorf("%s: What differs lacks %q:\n%s", tc.name, tc.want[0], differs)
		}
	}

	rate := loadSeed(t, "002")
	rate.Settings.Rates = []float64{1, 2}
	for _, tt := range []struct {
		b    float64
		want string
	}{{0, "Poisson arrivals"}, {1, "Poisson arrivals"}, {0.25, "gamma arrivals of burstiness 0.25"}} {
		rate.Settings.Burstiness = tt.b
		var buf bytes.Buffer
		if err := Render(&buf, rate, Text); err != nil {
			t.Fatal(err)
		}
		if flat := strings.Join(strings.Fields(buf.String()), " "); !strings.Contains(flat, "columns: request rates (requests per second, "+tt.want+")") {
			t.Errorf("burstiness %v: the grid's head does not say %q", tt.b, tt.want)
		}
		buf.Reset()
		if err := Compare(&buf, rate, rate, "text"); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), tt.want) {
			t.Errorf("burstiness %v: the comparison's head does not say %q", tt.b, tt.want)
		}
	}
}
