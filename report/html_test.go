package report

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokentap/tokentap/result"
)

func renderHTML(t *testing.T, r *result.Result) string {
	t.Helper()
	var buf bytes.Buffer
	if err := Render(&buf, r, "html"); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// TestHTMLSelfContained checks the page needs nothing from anywhere: no
// script, no attribute that loads a resource, no CSS import or external url().
func TestHTMLSelfContained(t *testing.T) {
	loaders := regexp.MustCompile(`(?i)<script|<link|<iframe|<img|\s(src|href|srcset|action|poster|data)\s*=|@import`)
	urls := regexp.MustCompile(`url\(([^)]*)\)`)
	for _, r := range []*result.Result{loadRun(t), loadSeed(t, "000"), loadSeed(t, "002")} {
		page := renderHTML(t, r)
		if m := loaders.FindString(page); m != "" {
			t.Errorf("%s: page loads something: %q", r.Model.Name, m)
		}
		for _, m := range urls.FindAllStringSubmatch(page, -1) {
			if !strings.HasPrefix(m[1], "#") {
				t.Errorf("%s: CSS url() outside the page: %q", r.Model.Name, m[0])
			}
		}
		if !strings.Contains(page, "@media print") {
			t.Error("no print styles")
		}
	}
}

// TestHTMLContent checks the grid cells, statuses and percentile charts.
func TestHTMLContent(t *testing.T) {
	r := loadRun(t)
	page := renderHTML(t, r)
	charts := 0
	for _, c := range r.Decode {
		switch c.Status {
		case result.Valid, result.RequestsQueued, result.CacheMissed:
			v := fmtHeadline(c.TotalTokPerSec)
			if !strings.Contains(page, `<span class="v">`+v+`</span>`) {
				t.Errorf("cell %d×%d: tok/s %s missing", c.Context, c.Concurrency, v)
			}
			if c.Histograms != nil {
				charts += 2
				if c.Histograms.E2E.TotalCount() > 0 {
					charts++
				}
			}
		}
	}
	for _, want := range []string{`class="oc"`, `class="failed"`, `<span class="q">Requests queued</span>`, `<span class="q">Cache missed</span>`,
		"Failed: requests to the server failed", "Latency percentiles", "p90", "p99", "n=400", "TTFT, warm prefix", HeatColor(1)} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	got := strings.Count(page, `aria-label="TTFT, warm prefix percentiles"`) + strings.Count(page, `aria-label="TTFT, cache missed percentiles"`) +
		strings.Count(page, `aria-label="Time between tokens percentiles"`) + strings.Count(page, `aria-label="End to end percentiles"`)
	if got != charts || charts == 0 {
		t.Errorf("%d percentile charts, want %d", got, charts)
	}
	// Percentiles asked for are drawn; one the samples are too few for
	// (p99.9 of 400 TTFTs) is marked, not drawn as a tail.
	var buf bytes.Buffer
	if err := RenderWith(&buf, r, "html", Options{Percentiles: []float64{50, 99.9}}); err != nil {
		t.Fatal(err)
	}
	if p := buf.String(); !strings.Contains(p, ">p99.9<") || strings.Contains(p, ">p90<") || !strings.Contains(p, lowMark+"</text>") {
		t.Error("--percentiles 50,99.9: the charts do not show p99.9, marked for too few samples, alone with p50")
	}
	// A document without histograms (the seeds) has no chart section.
	if strings.Contains(renderHTML(t, loadSeed(t, "002")), "Latency percentiles") {
		t.Error("seed document has no histograms but got a percentile section")
	}
	// Text is escaped.
	r.Model.Name = `<b>x</b> & "y"`
	if p := renderHTML(t, r); strings.Contains(p, "<b>x</b>") || !strings.Contains(p, "&lt;b&gt;x&lt;/b&gt; &amp; &#34;y&#34;") {
		t.Error("model name not escaped")
	}
}

func TestHeatColor(t *testing.T) {
	tests := []struct {
		t    float64
		want string
	}{{-1, "#edf4fc"}, {0, "#edf4fc"}, {0.5, "#6ba4da"}, {1, "#133e7c"}, {2, "#133e7c"}}
	for _, tt := range tests {
		if got := HeatColor(tt.t); got != tt.want {
			t.Errorf("HeatColor(%v) = %s, want %s", tt.t, got, tt.want)
		}
	}
}

// chromium finds Debian's headless browser; without it the test fails in
// CI and skips (saying how to get it) elsewhere.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed; CI must run `make deps` first")
	}
	t.Skip("chromium is not installed: `make deps` installs it (Debian package chromium)")
	return ""
}

func runChromium(t *testing.T, bin string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir()}
	out, err := exec.CommandContext(ctx, bin, append(base, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, out)
	}
}

// near reports whether a 16-bit colour channel is within 4 of an 8-bit one.
func near(a, b uint32) bool {
	d := int(a>>8) - int(b)
	return d >= -4 && d <= 4
}

// countColour counts pixels within a small tolerance of "#rrggbb".
func countColour(img image.Image, hex string) int {
	var want [3]uint32
	for i := range want {
		var v uint32
		for _, c := range hex[1+2*i : 3+2*i] {
			v *= 16
			switch {
			case c >= '0' && c <= '9':
				v += uint32(c - '0')
			default:
				v += uint32(c-'a') + 10
			}
		}
		want[i] = v
	}
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if near(r, want[0]) && near(g, want[1]) && near(bl, want[2]) {
				n++
			}
		}
	}
	return n
}

// TestHTMLScreenshot opens the page in headless chromium and checks the
// screenshot shows the heat map: the best cell's colour and the Failed
// cell's colour cover at least a cell's worth of pixels. It also prints
// the page to PDF, the path `@media print` styles.
func TestHTMLScreenshot(t *testing.T) {
	img, shot, page := screenshot(t, renderHTML(t, loadRun(t)), 2000)
	if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 2000 {
		t.Errorf("screenshot is %v, want 1280×2000", b)
	}
	// A grid cell is about 118×66 CSS pixels; a third of one is plenty to
	// prove the heat map rendered (text covers part of it).
	if n := countColour(img, HeatColor(1)); n < 2500 {
		t.Errorf("best cell colour %s covers %d pixels; the heat map did not render", HeatColor(1), n)
	}
	if n := countColour(img, "#fbe3e1"); n < 2500 {
		t.Errorf("Failed cell colour covers %d pixels", n)
	}
	if n := countColour(img, "#ff00ff"); n != 0 {
		t.Errorf("%d magenta pixels on a page without magenta: the colour counter is broken", n)
	}
	if n := countColour(img, "#ffffff"); n > 1280*2000*97/100 {
		t.Errorf("screenshot is %d%% white: blank page", n*100/(1280*2000))
	}
	if keep := os.Getenv("TOKENTAP_KEEP_SCREENSHOT"); keep != "" {
		b, _ := os.ReadFile(shot)
		if err := os.WriteFile(keep, b, 0o644); err != nil {
			t.Error(err)
		}
	}

	pdf := filepath.Join(filepath.Dir(page), "run.pdf")
	runChromium(t, chromium(t), "--no-pdf-header-footer", "--print-to-pdf="+pdf, "file://"+page)
	b, err := os.ReadFile(pdf)
	if err != nil || !bytes.HasPrefix(b, []byte("%PDF-")) || len(b) < 10_000 {
		t.Errorf("printing to PDF: %v, %d bytes", err, len(b))
	}
}

// screenshot renders page in headless Chromium, 1280 pixels wide and
// height high, and returns the picture, its file and the page's file.
func screenshot(t *testing.T, page string, height int) (img image.Image, shot, file string) {
	t.Helper()
	bin := chromium(t)
	dir := t.TempDir()
	file = filepath.Join(dir, "page.html")
	if err := os.WriteFile(file, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	shot = filepath.Join(dir, "page.png")
	runChromium(t, bin, "--screenshot="+shot, "--window-size=1280,"+strconv.Itoa(height), "file://"+file)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if img, err = png.Decode(f); err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	return img, shot, file
}
