package change

import (
	"slices"
	"testing"

	"github.com/tokentap/tokentap/result"
)

// row is a Valid prefill row of 8,192-token repeats at these tok/s, its
// figures their median as package cell sets them.
func row(tps ...float64) *result.Prefill {
	p := &result.Prefill{Context: 8192, Status: result.Valid, Repeats: len(tps)}
	var ok []float64
	for _, v := range tps {
		e := result.PrefillRepeat{PromptTokens: 8192, TokPerSec: v, TTFTms: 8192 / v * 1000}
		if v == 0 {
			e = result.PrefillRepeat{PromptTokens: 8192, Error: "http_error (HTTP 500)"}
		} else {
			ok = append(ok, v)
		}
		p.Each = append(p.Each, e)
	}
	p.Measured = len(ok)
	s := slices.Sorted(slices.Values(ok))
	if len(s) > 0 {
		m := len(s) / 2
		p.TokPerSec = s[m]
		if len(s)%2 == 0 {
			p.TokPerSec = (s[m-1] + s[m]) / 2
		}
		p.TTFTms = 8192 / p.TokPerSec * 1000
	}
	return p
}

func TestOfPrefill(t *testing.T) {
	old := &result.Prefill{Context: 8192, Status: result.Valid, TokPerSec: 10000, TTFTms: 819.2, Requests: 1}
	failed := &result.Prefill{Context: 8192, Status: result.Failed}
	tests := []struct {
		name    string
		a, b    *result.Prefill
		known   bool
		changed bool
	}{
		{"the same run", row(10000, 10050, 9950), row(10000, 10050, 9950), true, false},
		{"a rerun within 1%", row(10000, 10080, 9930), row(10040, 9960, 10090), true, false},
		{"6% slower, repeats within 1%", row(10000, 10080, 9930), row(9400, 9460, 9350), true, true},
		{"6% faster, five repeats", row(10000, 10080, 9930, 10010, 9990), row(10600, 10650, 10550, 10620, 10580), true, true},
		{"6% slower but A's repeats spread 10%", row(10000, 10600, 9500), row(9400, 9460, 9350), true, false},
		{"a failed repeat leaves two: too few", row(10000, 0, 10050), row(9400, 9460, 9350), false, false},
		{"one repeat each", row(10000), row(9000), false, false},
		{"a document from before repeats", old, row(9400, 9460, 9350), false, false},
		{"a failed row", failed, row(9400, 9460, 9350), false, false},
		{"nil", nil, row(9400, 9460, 9350), false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := OfPrefill(tt.a, tt.b)
			for name, x := range map[string]Verdict{"tok/s": v.TokS, "TTFT": v.TTFT} {
				if x.Known != tt.known || x.Changed() != tt.changed {
					t.Errorf("%s: known %v changed %v (ratio %.4f, %.4f–%.4f, %s); want known %v changed %v",
						name, x.Known, x.Changed(), x.Ratio, x.Lo, x.Hi, x.Why, tt.known, tt.changed)
				}
				if x.Known && !(x.Lo <= x.Ratio && x.Ratio <= x.Hi) {
					t.Errorf("%s: ratio %.4f outside its interval %.4f–%.4f", name, x.Ratio, x.Lo, x.Hi)
				}
			}
		})
	}
	// Seeded: the same rows always give the same interval.
	a, b := OfPrefill(row(10000, 10080, 9930), row(9400, 9460, 9350)), OfPrefill(row(10000, 10080, 9930), row(9400, 9460, 9350))
	if a != b {
		t.Errorf("two comparisons of the same rows differ: %+v, %+v", a, b)
	}
}
