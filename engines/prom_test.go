package engines

import (
	"errors"
	"math"
	"os"
	"strings"
	"testing"
)

func TestParseMetrics(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []Sample
		wantErr bool
	}{
		{"plain", "a 1\n", []Sample{{Name: "a", Value: 1}}, false},
		{"comments and blanks", "# HELP a x\n# TYPE a gauge\n\n  \na 2.5\n", []Sample{{Name: "a", Value: 2.5}}, false},
		{"labels", `vllm:x{engine="0",model_name="m"} 3` + "\n",
			[]Sample{{Name: "vllm:x", Labels: []Label{{"engine", "0"}, {"model_name", "m"}}, Value: 3}}, false},
		{"escapes", `m{a="q\"b\\c\nd",b="\x"} 1`,
			[]Sample{{Name: "m", Labels: []Label{{"a", "q\"b\\c\nd"}, {"b", `\x`}}, Value: 1}}, false},
		{"braces and commas inside values", `m{a="{,}=",} 4`, []Sample{{Name: "m", Labels: []Label{{"a", "{,}="}}, Value: 4}}, false},
		{"spaces around labels", `m { a = "1" , b="2" } 5`, []Sample{{Name: "m", Labels: []Label{{"a", "1"}, {"b", "2"}}, Value: 5}}, false},
		{"timestamp ignored", "m 7 1700000000000\n", []Sample{{Name: "m", Value: 7}}, false},
		{"exponent", "m 8.128902e+06", []Sample{{Name: "m", Value: 8128902}}, false},
		{"+Inf -Inf", "a +Inf\nb -Inf\n", []Sample{{Name: "a", Value: math.Inf(1)}, {Name: "b", Value: math.Inf(-1)}}, false},
		{"CRLF", "a 1\r\nb 2\r\n", []Sample{{Name: "a", Value: 1}, {Name: "b", Value: 2}}, false},
		{"bad line kept going", "a 1\nb{x=\"1 2\nc 3\n", []Sample{{Name: "a", Value: 1}, {Name: "c", Value: 3}}, true},
		{"no value", "a\n", nil, true},
		{"bad value", "a one\n", nil, true},
		{"trailing junk", "a 1 2 3\n", nil, true},
		{"unquoted label", "a{b=1} 1\n", nil, true},
		{"bad name", "1a 1\n", nil, true},
		{"EOF marker", "a 1\n# EOF\n", []Sample{{Name: "a", Value: 1}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseMetrics([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, ErrMetricsSyntax) {
				t.Errorf("error %v does not wrap ErrMetricsSyntax", err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d samples %+v, want %+v", len(got), got, tt.want)
			}
			for i := range got {
				if got[i].String() != tt.want[i].String() {
					t.Errorf("sample %d = %s, want %s", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestParseMetricsNaN(t *testing.T) {
	m, err := ParseMetrics([]byte("a NaN\na 2\n"))
	if err != nil || len(m) != 2 || !math.IsNaN(m[0].Value) {
		t.Fatalf("%v %v", m, err)
	}
	if s, ok := m.Sum("a"); !ok || s != 2 {
		t.Errorf("Sum skips NaN: got %v %v", s, ok)
	}
}

func TestParseMetricsCaptures(t *testing.T) {
	for _, f := range []string{"llamacpp/metrics.txt", "vllm/metrics_blocks.txt", "vllm/metrics_kvtokens.txt", "sglang/metrics.txt", "tgi/metrics.txt"} {
		b, err := os.ReadFile("testdata/" + f)
		if err != nil {
			t.Fatal(err)
		}
		m, err := ParseMetrics(b)
		if err != nil {
			t.Errorf("%s: %v", f, err)
		}
		lines := 0
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSpace(l); l != "" && l[0] != '#' {
				lines++
			}
		}
		if len(m) != lines {
			t.Errorf("%s: %d samples from %d sample lines", f, len(m), lines)
		}
	}
	b, _ := os.ReadFile("testdata/vllm/metrics_blocks.txt")
	m, _ := ParseMetrics(b)
	c, ok := parseCacheConfig(m)
	if !ok || c.Tokens != 44608 || c.Blocks != 2788 || c.BlockSize != 16 {
		t.Errorf("cache config %+v %v", c, ok)
	}
}

func equalSample(a, b Sample) bool {
	if a.Name != b.Name || len(a.Labels) != len(b.Labels) {
		return false
	}
	for i := range a.Labels {
		if a.Labels[i] != b.Labels[i] {
			return false
		}
	}
	return a.Value == b.Value || (math.IsNaN(a.Value) && math.IsNaN(b.Value))
}

// FuzzParseMetrics: any input parses without panicking, and every sample
// it yields prints back to text that parses to the same sample.
func FuzzParseMetrics(f *testing.F) {
	for _, name := range []string{"llamacpp/metrics.txt", "vllm/metrics_blocks.txt", "sglang/metrics.txt", "tgi/metrics.txt"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`m{a="q\"b\\c\nd"} NaN 12`))
	f.Add([]byte("a +Inf\nb -Inf\nc{} 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, _ := ParseMetrics(b)
		for _, s := range m {
			again, err := ParseMetrics([]byte(s.String()))
			if err != nil || len(again) != 1 || !equalSample(s, again[0]) {
				t.Fatalf("%q → %q → %+v, %v", b, s.String(), again, err)
			}
		}
		_, _ = parseCacheConfig(m)
	})
}
