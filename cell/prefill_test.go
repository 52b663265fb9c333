package cell

import (
	"strings"
	"testing"

	"github.com/tokentap/tokentap/result"
)

func rep(tps, ttft float64, prompt int) result.PrefillRepeat {
	return result.PrefillRepeat{PromptTokens: prompt, TokPerSec: tps, TTFTms: ttft}
}

func TestSummarizePrefill(t *testing.T) {
	bad := result.PrefillRepeat{PromptTokens: 8192, Error: "http_error (HTTP 500): boom"}
	tests := []struct {
		name                string
		each                []result.PrefillRepeat
		status              result.Status
		requests, measured  int
		tps, ttft, min, max float64
		prompt              int
		errHas              string
	}{
		{"three, median not mean", []result.PrefillRepeat{rep(8000, 1024, 8192), rep(2000, 4096, 8190), rep(8200, 999, 8194)},
			result.Valid, 3, 3, 8000, 1024, 2000, 8200, 8192, ""},
		{"one", []result.PrefillRepeat{rep(16000, 512, 8192)}, result.Valid, 1, 1, 16000, 512, 16000, 16000, 8192, ""},
		{"even: mean of the middle two", []result.PrefillRepeat{rep(100, 10, 1), rep(300, 30, 3), rep(200, 20, 2), rep(400, 40, 4)},
			result.Valid, 4, 4, 250, 25, 100, 400, 2, ""},
		{"a failed repeat is counted", []result.PrefillRepeat{rep(9000, 910, 8192), bad, rep(11000, 745, 8192)},
			result.Valid, 3, 2, 10000, 827.5, 9000, 11000, 8192, "1 repeat of 3 gave no figure (the first: http_error (HTTP 500): boom)"},
		{"all failed", []result.PrefillRepeat{bad, bad}, result.Failed, 2, 0, 0, 0, 0, 0, 8192, "http_error (HTTP 500): boom"},
		{"none sent", nil, result.Failed, 0, 0, 0, 0, 0, 0, 0, "no repeat was sent"},
		{"cached repeat is no figure", []result.PrefillRepeat{rep(5000, 1600, 8192), {PromptTokens: 8192, TokPerSec: 90000, TTFTms: 91, Error: "served from cache"}},
			result.Valid, 2, 1, 5000, 1600, 5000, 5000, 8192, "1 repeat of 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			row := result.Prefill{Context: 8192, Status: result.NotRun, Each: tt.each, Error: "stale"}
			SummarizePrefill(&row)
			if row.Status != tt.status || row.Requests != tt.requests || row.Measured != tt.measured {
				t.Errorf("status %s requests %d measured %d; want %s %d %d", row.Status, row.Requests, row.Measured, tt.status, tt.requests, tt.measured)
			}
			if row.TokPerSec != tt.tps || row.TTFTms != tt.ttft || row.TokPerSecMin != tt.min || row.TokPerSecMax != tt.max {
				t.Errorf("tok/s %g TTFT %g spread %g–%g; want %g %g %g–%g", row.TokPerSec, row.TTFTms, row.TokPerSecMin, row.TokPerSecMax, tt.tps, tt.ttft, tt.min, tt.max)
			}
			if row.PromptTokens != tt.prompt {
				t.Errorf("prompt tokens %d, want %d", row.PromptTokens, tt.prompt)
			}
			if (tt.errHas == "") != (row.Error == "") || !strings.Contains(row.Error, tt.errHas) {
				t.Errorf("error %q, want one holding %q", row.Error, tt.errHas)
			}
		})
	}
}

func TestColdCached(t *testing.T) {
	for _, tt := range []struct {
		cached, tol int
		want        bool
	}{{0, 41, false}, {16, 41, false}, {41, 41, false}, {42, 41, true}, {8176, 41, true}} {
		if got := ColdCached(tt.cached, tt.tol); got != tt.want {
			t.Errorf("ColdCached(%d, %d) = %v, want %v", tt.cached, tt.tol, got, tt.want)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, tt := range []struct {
		v    []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := Median(tt.v); got != tt.want {
			t.Errorf("Median(%v) = %g, want %g", tt.v, got, tt.want)
		}
	}
}
