package report

import (
	"fmt"
	"strings"

	"github.com/tokentap/tokentap/internal/english"
	"github.com/tokentap/tokentap/result"
)

// engineLine is "vllm · 0.32.0 · FP8 · 6 contexts (0–248K) × 8 concurrency
// levels (1–128) · prefill at 8K, 16K, 32K".
func engineLine(r *result.Result) string {
	var parts []string
	for _, s := range []string{r.Engine.Name, r.Engine.Version, r.Engine.Quantization} {
		if s != "" {
			parts = append(parts, s)
		}
	}
	contexts, cols := axes(r)
	if len(contexts) > 0 && len(cols) > 0 {
		cr := ctxLabel(contexts[0])
		if len(contexts) > 1 {
			cr += "–" + ctxLabel(contexts[len(contexts)-1])
		}
		rows := english.Count(len(contexts), "context", "contexts") + " (" + cr + ")"
		if r.Settings.Dataset != nil {
			rows = "a dataset's prompts (" + r.Settings.Dataset.Name + ")" // their own lengths: no context of tokentap's
		}
		span := func(cs []result.Column) string {
			nr := colHead(cs[0])
			if len(cs) > 1 {
				nr += "–" + colHead(cs[len(cs)-1])
			}
			return nr
		}
		var ns, rates []result.Column
		for _, c := range cols {
			if c.Rate > 0 {
				rates = append(rates, c)
			} else {
				ns = append(ns, c)
			}
		}
		switch {
		case len(ns) > 0 && len(rates) > 0: // a sweep: its one-at-a-time and throughput cells beside its rates
			parts = append(parts, fmt.Sprintf("%s × %s (%s) and %s (%s)",
				rows, english.Count(len(ns), "concurrency level", "concurrency levels"), span(ns),
				english.Count(len(rates), "request rate", "request rates"), span(rates)))
		default:
			one, many := "concurrency level", "concurrency levels"
			if r.RateRun() {
				one, many = "request rate", "request rates"
			}
			parts = append(parts, fmt.Sprintf("%s × %s (%s)",
				rows, english.Count(len(cols), one, many), span(cols)))
		}
	}
	if len(r.Settings.PrefillAt) > 0 {
		parts = append(parts, "prefill at "+ctxList(r.Settings.PrefillAt))
	}
	return strings.Join(parts, " · ")
}
