package proxy

import (
	"encoding/json"
	"math"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/record"
)

// scrape reads a /metrics as Prometheus with native histograms does
// (protobuf), or as one without them (text).
func scrape(t *testing.T, url string, native bool) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	if native {
		format = expfmt.NewFormat(expfmt.TypeProtoDelim)
		req.Header.Set("Accept", string(format))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	fams := map[string]*dto.MetricFamily{}
	if !native {
		p := expfmt.NewTextParser(model.UTF8Validation)
		if fams, err = p.TextToMetricFamilies(resp.Body); err != nil {
			t.Fatalf("text /metrics: %v", err)
		}
		return fams
	}
	if ct := resp.Header.Get("Content-Type"); !strings.Contains(ct, "application/vnd.google.protobuf") {
		t.Fatalf("asked for protobuf, got %q", ct)
	}
	dec := expfmt.NewDecoder(resp.Body, format)
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			break
		}
		fams[mf.GetName()] = &mf
	}
	return fams
}

// nativeBuckets turns a native histogram's spans and deltas into counts by
// bucket index.
func nativeBuckets(h *dto.Histogram, into map[int]uint64) {
	idx, k := 0, 0
	var count int64
	for i, sp := range h.GetPositiveSpan() {
		if i == 0 {
			idx = int(sp.GetOffset())
		} else {
			idx += int(sp.GetOffset())
		}
		for range sp.GetLength() {
			count += h.GetPositiveDelta()[k]
			into[idx] += uint64(count)
			idx++
			k++
		}
	}
}

// bucketOf is the native bucket (schema s) holding v: (base^(i-1), base^i].
func bucketOf(v float64, schema int32) int {
	return int(math.Ceil(math.Log2(v) * math.Exp2(float64(schema))))
}

// TestNativeHistogramsAcrossReplicas: two proxies, each with its own
// clients, serve native histograms (with the classic buckets too); summed
// bucket by bucket, as Prometheus sums replicas, every quantile falls in
// the very bucket that holds the exact quantile of all the requests' values
// together: exact to the native schema's resolution.
func TestNativeHistogramsAcrossReplicas(t *testing.T) {
	m := fixtures.DefaultModel()
	m.TBTBase, m.TBTPerRunning, m.TBTPerKTokens = 2*time.Millisecond, 300*time.Microsecond, 0
	e := fixtures.StartTest(t, m)
	replicas := []*harness{startProxy(t, e.URL(), nil), startProxy(t, e.URL(), nil)}
	var wg sync.WaitGroup
	for i, h := range replicas {
		for j := range 4 + 4*i { // unequal traffic
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _, _ = do(t, "POST", h.url+"/v1/chat/completions", chatBody(m.Name, 30+10*j, true, ""))
			}()
		}
	}
	wg.Wait()
	var ttfts, tbts []float64
	for i, h := range replicas {
		for _, r := range h.waitRecords(t, 4+4*i) {
			if r.Outcome != record.OK {
				t.Fatalf("request %s: %s %s", r.ID, r.Outcome, r.Error)
			}
			d, _ := r.TTFT()
			ttfts = append(ttfts, d.Seconds())
			for k := 1; k < len(r.Arrivals); k++ {
				n := r.EventTokens(k)
				gap := (r.Arrivals[k] - r.Arrivals[k-1]) / time.Duration(n)
				for range n {
					tbts = append(tbts, gap.Seconds())
				}
			}
		}
	}
	for _, c := range []struct {
		name string
		raw  []float64
	}{{"tokentap_time_to_first_token_seconds", ttfts}, {"tokentap_time_between_tokens_seconds", tbts}} {
		sum := map[int]uint64{}
		var zero, total uint64
		schema := int32(math.MaxInt32)
		for _, h := range replicas {
			fams := scrape(t, h.admin+"/metrics", true)
			mf := fams[c.name]
			if mf == nil || len(mf.GetMetric()) != 1 {
				t.Fatalf("%s: %v", c.name, mf)
			}
			hist := mf.GetMetric()[0].GetHistogram()
			if len(hist.GetPositiveSpan()) == 0 || len(hist.GetBucket()) == 0 {
				t.Fatalf("%s: native spans %d, classic buckets %d: want both", c.name, len(hist.GetPositiveSpan()), len(hist.GetBucket()))
			}
			if hist.GetSchema() != 4 && schema == math.MaxInt32 {
				t.Fatalf("%s: schema %d, want 4 (factor %v)", c.name, hist.GetSchema(), nativeFactor)
			}
			if schema != math.MaxInt32 && schema != hist.GetSchema() {
				t.Fatalf("%s: replicas at schemas %d and %d", c.name, schema, hist.GetSchema())
			}
			schema = hist.GetSchema()
			nativeBuckets(hist, sum)
			zero += hist.GetZeroCount()
			total += hist.GetSampleCount()
		}
		if total != uint64(len(c.raw)) {
			t.Fatalf("%s: %d values over the replicas, the records have %d", c.name, total, len(c.raw))
		}
		keys := make([]int, 0, len(sum))
		for k := range sum {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		sorted := slices.Sorted(slices.Values(c.raw))
		for _, q := range []float64{0.5, 0.9, 0.99} {
			rank := uint64(math.Ceil(q * float64(total)))
			cum, got := zero, math.MinInt
			for _, k := range keys {
				cum += sum[k]
				if cum >= rank {
					got = k
					break
				}
			}
			exact := sorted[rank-1]
			if want := bucketOf(exact, schema); got != want {
				t.Errorf("%s p%g: the summed native histogram puts it in bucket %d, the exact value %g is in bucket %d",
					c.name, 100*q, got, exact, want)
			}
		}
	}
	// Without native histograms, the text format still has the classic
	// buckets every Prometheus reads.
	fams := scrape(t, replicas[0].admin+"/metrics", false)
	h := fams["tokentap_time_between_tokens_seconds"].GetMetric()[0].GetHistogram()
	if len(h.GetBucket()) != len(tbtBuckets)+1 || len(h.GetPositiveSpan()) != 0 { // +Inf is a bucket in the text format
		t.Errorf("text /metrics: %d classic buckets (want %d and +Inf), %d native spans", len(h.GetBucket()), len(tbtBuckets), len(h.GetPositiveSpan()))
	}
}

// TestDashboardMetricsExist: every series the Grafana dashboard queries is
// one the proxy serves, so the dashboard never shows "no data" for a typo.
func TestDashboardMetricsExist(t *testing.T) {
	b, err := os.ReadFile("../deploy/grafana/tokentap-proxy.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	e := fixtures.StartTest(t, fixtures.DefaultModel())
	h := startProxy(t, e.URL(), nil)
	_, _, _ = do(t, "POST", h.url+"/v1/chat/completions", chatBody(e.Model().Name, 5, true, ""))
	_, _, _ = do(t, "POST", h.url+"/v1/chat/completions", chatBody("nope", 5, true, ""))
	h.waitRecords(t, 2)
	fams := scrape(t, h.admin+"/metrics", false)
	name := regexp.MustCompile(`tokentap_[a-z_]+`)
	exprs := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			if tg.Expr == "" {
				continue
			}
			exprs++
			for _, n := range name.FindAllString(tg.Expr, -1) {
				base := n
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if f := strings.TrimSuffix(n, suf); f != n && fams[f] != nil && fams[f].GetType() == dto.MetricType_HISTOGRAM {
						base = f
					}
				}
				if fams[base] == nil {
					t.Errorf("panel %q queries %s, which /metrics does not have", p.Title, n)
				}
			}
			for _, l := range []string{"model", "outcome", "blame"} {
				if strings.Contains(tg.Expr, "by ("+l) && !hasLabel(fams, l) {
					t.Errorf("panel %q groups by %s, which no series has", p.Title, l)
				}
			}
		}
	}
	if exprs < 5 {
		t.Errorf("the dashboard has %d queries", exprs)
	}
	for _, want := range []string{"TTFT", "between tokens", "tokens/s", "Errors"} {
		found := false
		for _, p := range dash.Panels {
			found = found || strings.Contains(p.Title, want)
		}
		if !found {
			t.Errorf("no panel about %s", want)
		}
	}
}

func hasLabel(fams map[string]*dto.MetricFamily, l string) bool {
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == l {
					return true
				}
			}
		}
	}
	return false
}
