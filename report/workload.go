package report

import (
	"fmt"
	"strconv"

	"github.com/tokentap/tokentap/result"
)

// workloadRows are the Run section's rows for the workload settings (a
// dataset, a request count, bursty arrivals, a sweep, the seed), so every
// format shows them and a comparison names a difference in any.
func workloadRows(s result.Settings) []kv {
	var rows []kv
	if d := s.Dataset; d != nil {
		v := fmt.Sprintf("%s (%s, %s bytes, sha256 %s): %s usable requests", d.Name, d.Format, fmtInt(int(d.Size)), d.SHA256, fmtInt(d.Entries))
		if d.Skipped > 0 {
			v += "; " + d.SkippedWhy
		}
		rows = append(rows, kv{"Dataset", v})
	}
	if s.Requests > 0 {
		rows = append(rows, kv{"Requests per cell", fmtInt(s.Requests)})
	}
	if s.Burstiness > 0 && s.Burstiness != 1 {
		rows = append(rows, kv{"Burstiness", strconv.FormatFloat(s.Burstiness, 'g', -1, 64) + " (gamma-distributed gaps; 1 is Poisson)"})
	}
	if l := s.PromptLengths; l != nil {
		rows = append(rows, kv{"Prompt lengths", "drawn per request around its row's context: " + l.Summary})
	}
	if l := s.OutputLengths; l != nil {
		rows = append(rows, kv{"Output lengths", "max_tokens drawn per request around the max output: " + l.Summary})
	}
	if s.Sweep {
		rows = append(rows, kv{"Sweep", "one request at a time, the throughput, then rates between"})
	}
	if s.Seed != 0 || s.Dataset != nil || s.Sweep || s.Burstiness > 0 || s.PromptLengths != nil || s.OutputLengths != nil {
		rows = append(rows, kv{"Seed", strconv.FormatInt(s.Seed, 10)})
	}
	return rows
}
