package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// histogramModes are the ways a Prometheus stores the proxy's histograms
// (which serve native and classic buckets together), as Prometheus 3.16's
// scrape settings choose them (docs/configuration/configuration.md, "CASE
// 3: a histogram exposed as both a native and a classic histogram"):
// classic only (scrape_native_histograms false, the default), native only
// (true), and both (always_scrape_classic_histograms true beside it).
var histogramModes = []struct {
	name            string
	native, classic bool
}{
	{"classic", false, true},
	{"native", true, false},
	{"native and classic", true, true},
}

// TestDashboardOnPrometheus runs every query of the Grafana dashboard
// against a real Prometheus scraping a real proxy, once in each way
// Prometheus may store the proxy's histograms, and wants each to return
// data: a panel empty in one mode is the defect this guards against. The
// Prometheus binary is TOKENTAP_PROMETHEUS (make manifests installs a
// released one into a cache outside the repository).
func TestDashboardOnPrometheus(t *testing.T) {
	prom := os.Getenv("TOKENTAP_PROMETHEUS")
	if prom == "" {
		t.Skip("TOKENTAP_PROMETHEUS is not set: make manifests installs Prometheus and runs this test")
	}
	if testing.Short() {
		t.Skip("starts a proxy, an engine and three Prometheus servers")
	}
	exprs := dashboardQueries(t)
	bin := tokentapBinary(t)
	engine := fakeEngine(t, bin, "--fault", "status=500,min-prompt=500")
	admin := freeLoopback(t)
	proxyURL := startProxy(t, bin, engine, admin)

	// One Prometheus per mode, all scraping the one proxy every second.
	proms := make([]string, len(histogramModes))
	for i, m := range histogramModes {
		proms[i] = startPrometheus(t, prom, admin, m.native, m.classic)
	}
	model := engineModel(t, engine)
	// Traffic for every panel: streams that end well, and some the engine
	// fails (the errors panel), over several scrapes.
	sendTraffic(t, proxyURL, model, 6*time.Second)

	for i, m := range histogramModes {
		// A rate needs two scrapes with the traffic in them: wait for them
		// (on a busy machine, up to 30 s), seen in a counter every mode
		// stores alike and scraped with the histograms.
		for end := time.Now().Add(30 * time.Second); len(query(t, proms[i], `sum(rate(tokentap_requests_total[20s])) > 0`)) == 0; time.Sleep(500 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("%s: no request rate after 30 s: Prometheus does not scrape the proxy", m.name)
			}
		}
		// The mode is real: the stored series are the ones it keeps.
		native := query(t, proms[i], `count(tokentap_prompt_tokens)`)
		classic := query(t, proms[i], `count(tokentap_prompt_tokens_bucket)`)
		if (len(native) > 0) != m.native || (len(classic) > 0) != m.classic {
			t.Errorf("%s: native series %v, classic %v: the Prometheus settings did not take", m.name, native, classic)
		}
		for _, e := range exprs {
			q := strings.NewReplacer(`$__rate_interval`, "20s", `$model`, ".*").Replace(e.expr)
			res := query(t, proms[i], q)
			if len(res) == 0 {
				t.Errorf("%s: panel %q is empty: %s", m.name, e.panel, q)
				continue
			}
			seen := map[string]bool{}
			for _, s := range res {
				k := fmt.Sprint(s.Metric)
				if seen[k] {
					t.Errorf("%s: panel %q has the series %s twice: %s", m.name, e.panel, k, q)
				}
				seen[k] = true
				if v, ok := s.Value[1].(string); !ok || v == "NaN" || v == "+Inf" || v == "-Inf" {
					t.Errorf("%s: panel %q: %s = %v", m.name, e.panel, k, s.Value[1])
				}
			}
		}
	}
}

type panelQuery struct{ panel, expr string }

// dashboardQueries reads every query of every panel, hidden ones too.
func dashboardQueries(t *testing.T) []panelQuery {
	t.Helper()
	b, err := os.ReadFile("grafana/tokentap-proxy.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	var out []panelQuery
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			if tg.Expr != "" {
				out = append(out, panelQuery{p.Title, tg.Expr})
			}
		}
	}
	if len(out) < 8 {
		t.Fatalf("%d queries in the dashboard", len(out))
	}
	return out
}

// startProxy runs tokentap proxy in front of upstream, its admin port on
// admin, and returns its URL.
func startProxy(t *testing.T, bin, upstream, admin string) string {
	t.Helper()
	return startURL(t, "proxy", bin, "proxy", "--upstream", upstream, "--listen", "127.0.0.1:0", "--admin", admin)
}

// startPrometheus runs Prometheus scraping target every second in one
// histogram mode, and returns its URL once it is ready.
func startPrometheus(t *testing.T, bin, target string, native, classic bool) string {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: tokentap-proxy
    scrape_native_histograms: %t
    always_scrape_classic_histograms: %t
    static_configs:
      - targets: [%q]
`, native, classic, target)
	file := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	listen := freeLoopback(t)
	logf, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+file, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); logf.Close() })
	base := "http://" + listen
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if resp, err := http.Get(base + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, "log"))
	t.Fatalf("Prometheus at %s not ready in 60 s:\n%s", listen, tail(b))
	return ""
}

// engineModel is the model the engine serves.
func engineModel(t *testing.T, engine string) string {
	t.Helper()
	resp, err := http.Get(engine + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list.Data) == 0 {
		t.Fatalf("the engine's models: %v %+v", err, list)
	}
	return list.Data[0].ID
}

// sendTraffic streams chat completions through the proxy for d, four at a
// time; one request in four has a prompt the engine fails.
func sendTraffic(t *testing.T, proxyURL, model string, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	long := strings.Repeat("word ", 800)
	var wg sync.WaitGroup
	var mu sync.Mutex
	sent, failed := 0, 0
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				prompt := "Say something."
				if w == 3 {
					prompt = long
				}
				body := fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":16,"messages":[{"role":"user","content":%q}]}`, model, prompt)
				resp, err := http.Post(proxyURL+"/v1/chat/completions", "application/json", strings.NewReader(body))
				mu.Lock()
				sent++
				if err != nil || resp.StatusCode != http.StatusOK {
					failed++
				}
				mu.Unlock()
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if failed == 0 || failed == sent {
		t.Fatalf("%d requests, %d failed: want some of each for the panels", sent, failed)
	}
}

type promSeries struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// query runs an instant query and returns its vector.
func query(t *testing.T, base, q string) []promSeries {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string       `json:"resultType"`
			Result     []promSeries `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	if r.Status != "success" || r.Data.ResultType != "vector" {
		t.Fatalf("%s: %s %s (%s)", q, r.Status, r.Error, r.Data.ResultType)
	}
	return r.Data.Result
}
