package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tokentap/tokentap/result"
)

// TestTBTDefinitions: a run with the peers' figures names tokentap's
// definition in its column head, shows the peers' columns (Markdown, HTML,
// CSV) and explains all three under the table in every format; a run
// without them (the seeds) renders as it did.
func TestTBTDefinitions(t *testing.T) {
	r := &result.Result{Schema: 1, Settings: result.Settings{Contexts: []int{0}, Concurrency: []int{4}},
		Decode: []result.Cell{{Context: 0, Concurrency: 4, Status: result.Valid, Measured: true, TotalTokPerSec: 400,
			PerRequestTokPerSec: 100, TTFTms: 30, TBTms: 10, ITLChunkMs: 40, TPOTRequestMs: 10, MaxWaiting: -1}}}
	for _, format := range []string{"text", "md", "html", "csv"} {
		var buf bytes.Buffer
		if err := Render(&buf, r, Format(format)); err != nil {
			t.Fatal(err)
		}
		out := strings.Join(strings.Fields(buf.String()), " ")
		want := []string{"Time between tokens is per token", "ITL per chunk is every gap", "k times the others"}
		switch format {
		case "md", "html":
			want = append(want, tbtPerTokenHead, itlChunkHead, tpotRequestHead, "40.0 ms")
		case "text":
			want = append(want, "TBT: time between tokens, per token")
		case "csv":
			want = []string{"itl_chunk_ms,tpot_request_ms", ",40,10"}
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: no %q in\n%s", format, w, out)
			}
		}
	}
	seed := loadSeed(t, "002")
	var buf bytes.Buffer
	if err := Render(&buf, seed, "md"); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), itlChunkHead) || strings.Contains(buf.String(), tbtPerTokenHead) {
		t.Error("a document without the peers' figures shows their columns")
	}
}

// TestCacheBelow1K (METHOD §3): the prefix cache is not judged below 1K
// tokens, so a decode cell's cache column there says so instead of a
// share read off a few tokens; at 1K and above it shows the share. The
// CSV keeps the share measured.
func TestCacheBelow1K(t *testing.T) {
	cellAt := func(ctx int, hit float64) result.Cell {
		return result.Cell{Context: ctx, Concurrency: 1, Status: result.Valid, Measured: true, TotalTokPerSec: 100, TTFTms: 20, TBTms: 10,
			MaxWaiting: -1, Cache: &result.Cache{HitRate: hit, Source: result.CacheUsage, Requests: 4}}
	}
	r := &result.Result{Schema: 1, Settings: result.Settings{Contexts: []int{0, 1024}, Concurrency: []int{1}},
		Decode: []result.Cell{cellAt(0, 0.909), cellAt(1024, 0.998)}}
	var buf bytes.Buffer
	if err := Render(&buf, r, "md"); err != nil {
		t.Fatal(err)
	}
	var row0, row1K string
	for _, l := range strings.Split(buf.String(), "\n") {
		switch {
		case strings.HasPrefix(l, "| Sustained decode | 0 |"):
			row0 = l
		case strings.HasPrefix(l, "| Sustained decode | 1K |"):
			row1K = l
		}
	}
	if !strings.Contains(row0, cacheNotJudged) || strings.Contains(row0, "90.9%") || !strings.Contains(row1K, "99.8%") {
		t.Errorf("rows:\n%s\n%s", row0, row1K)
	}
	buf.Reset()
	if err := Render(&buf, r, "csv"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "0.909") {
		t.Errorf("the CSV lost the share measured:\n%s", buf.String())
	}
}

// TestAttainmentBounds (METHOD §6): a cell whose undecided requests
// outlast every decided result shows its figure with both bounds, in the
// reports and the CSV.
func TestAttainmentBounds(t *testing.T) {
	a, lo, hi := 1.0, 12.0/13, 1.0
	r := &result.Result{Schema: 1, Settings: result.Settings{Contexts: []int{0}, Concurrency: []int{1}},
		SLO: &result.SLORun{},
		Decode: []result.Cell{{Context: 0, Concurrency: 1, Status: result.Valid, Measured: true, TotalTokPerSec: 100, TTFTms: 20, TBTms: 10, MaxWaiting: -1,
			SLO: &result.SLO{Judged: 12, Good: 12, Undecided: 1, Attainment: &a, AttainmentAtLeast: &lo, AttainmentAtMost: &hi}}}}
	var buf bytes.Buffer
	if err := Render(&buf, r, "md"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "100% (92%–100%)") {
		t.Errorf("no bounds in\n%s", buf.String())
	}
	buf.Reset()
	if err := Render(&buf, r, "csv"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "slo_attainment_at_least,slo_attainment_at_most") || !strings.Contains(buf.String(), "0.9231,1.0000") {
		t.Errorf("no bounds in the CSV\n%s", buf.String())
	}
}
