package scenarios

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSeed(t *testing.T) {
	s := Seed()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	want := Scenario{
		Name:        "seed",
		Contexts:    []int{0, 16384, 32768, 65536, 131072, 253952},
		Concurrency: []int{1, 2, 4, 8, 16, 32, 64, 128},
		Prefill:     []int{8192, 16384, 32768, 65536, 131072},
		Window:      30 * time.Second,
		MaxOutput:   8192,
		API:         "chat",
	}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("Seed() = %+v\nwant %+v", s, want)
	}
	// Each call is a fresh copy: changing one does not change the next.
	s.Contexts[0] = 99
	if Seed().Contexts[0] != 0 {
		t.Fatal("Seed shares its slices between calls")
	}
}

func TestParseTokens(t *testing.T) {
	tests := []struct {
		in      string
		want    int
		wantErr string
	}{
		{"0", 0, ""},
		{"8192", 8192, ""},
		{"16k", 16384, ""},
		{"16K", 16384, ""},
		{"248K", 253952, ""},
		{" 32k ", 32768, ""},
		{"1 k", 1024, ""},
		{"0k", 0, ""},
		{"2147483647", 2147483647, ""},
		{"2097151k", 2097151 * 1024, ""},
		{"", 0, "empty token count"},
		{"   ", 0, "empty token count"},
		{"k", 0, "whole number"},
		{"-1", 0, "whole number"},
		{"+5", 0, "whole number"},
		{"1.5k", 0, "whole number"},
		{"16kb", 0, "whole number"},
		{"16M", 0, "whole number"},
		{"0x10", 0, "whole number"},
		{"1_000", 0, "whole number"},
		{"2147483648", 0, "too large"},
		{"2097152k", 0, "too large"},
		{"99999999999999999999999", 0, "too large"},
	}
	for _, tc := range tests {
		got, err := ParseTokens(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseTokens(%q) = %d, %v; want an error containing %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseTokens(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseTokenList(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr string
	}{
		{"0,16k,32k,64k,128k,248k", []int{0, 16384, 32768, 65536, 131072, 253952}, ""},
		{"1,2,4,8,16,32,64,128", []int{1, 2, 4, 8, 16, 32, 64, 128}, ""},
		{"32k, 0 ,16K", []int{0, 16384, 32768}, ""},
		{"8", []int{8}, ""},
		{"4,4,2,4", []int{2, 4}, ""},
		{"16k,16384", []int{16384}, ""},
		{"", nil, "empty list"},
		{" ", nil, "empty list"},
		{"1,,2", nil, "item 2 is empty"},
		{"1,2,", nil, "item 3 is empty"},
		{"1,x", nil, `item 2: token count "x"`},
		{"1;2", nil, "whole number"},
	}
	for _, tc := range tests {
		got, err := ParseTokenList(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseTokenList(%q) = %v, %v; want an error containing %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseTokenList(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func f64(v float64) *float64 { return &v }
func i64(v int64) *int64     { return &v }
func in(v int) *int          { return &v }

func TestLoadExample(t *testing.T) {
	s, err := Load(filepath.Join("testdata", "example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := Scenario{
		Name:           "qwen-long-context",
		Model:          "bench",
		API:            "chat",
		Contexts:       []int{0, 16384, 32768, 65536},
		Concurrency:    []int{1, 2, 4, 8, 16},
		Prefill:        []int{8192, 16384, 32768},
		PrefillRepeats: 3,
		Window:         30 * time.Second,
		MaxOutput:      8192,
		Sampling: Sampling{
			Temperature: f64(0.7), TopP: f64(0.95), TopK: in(20), MinP: f64(0), Seed: i64(42),
			PresencePenalty: f64(0), FrequencyPenalty: f64(0), RepetitionPenalty: f64(1),
		},
		Extra: map[string]any{"chat_template_kwargs": map[string]any{"enable_thinking": false}},
	}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("Load = %+v\nwant %+v", s, want)
	}
	// The example sets every setting the loader knows.
	data, _ := os.ReadFile(filepath.Join("testdata", "example.yaml"))
	for _, k := range settings {
		// rate and concurrency are alternatives: one is shown commented out.
		if !strings.Contains(string(data), "\n"+k+":") && !strings.Contains(string(data), "\n# "+k+":") {
			t.Errorf("testdata/example.yaml does not show %q", k)
		}
	}
	for _, k := range samplingKeys {
		if !strings.Contains(string(data), "\n  "+k+":") {
			t.Errorf("testdata/example.yaml does not show sampling.%s", k)
		}
	}
	fields := s.SamplingFields()
	js, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	wantJS := `{"frequency_penalty":0,"min_p":0,"presence_penalty":0,"repetition_penalty":1,"seed":42,"temperature":0.7,"top_k":20,"top_p":0.95}`
	if string(js) != wantJS {
		t.Errorf("SamplingFields = %s, want %s", js, wantJS)
	}
	if js, err := json.Marshal(s.Extra); err != nil || string(js) != `{"chat_template_kwargs":{"enable_thinking":false}}` {
		t.Errorf("Extra as JSON = %s, %v", js, err)
	}
}

func TestParseSettings(t *testing.T) {
	seed := Seed()
	tests := []struct {
		name string
		yaml string
		edit func(*Scenario) // applied to Seed() with Name "file"
	}{
		{"one setting keeps the seed's others", "window: 5s\n", func(s *Scenario) { s.Window = 5 * time.Second }},
		{"rates instead of concurrency", "rate: [4, 0.5, 1]\n", func(s *Scenario) { s.Rates = []float64{0.5, 1, 4}; s.Concurrency = nil }},
		{"rates as text", "rate: \"2,1/s\"\n", func(s *Scenario) { s.Rates = []float64{1, 2}; s.Concurrency = nil }},
		{"window in minutes", "window: 1m30s\n", func(s *Scenario) { s.Window = 90 * time.Second }},
		{"lists as text", "contexts: \"32k,0\"\nconcurrency: 4\n", func(s *Scenario) {
			s.Contexts = []int{0, 32768}
			s.Concurrency = []int{4}
		}},
		{"block lists, sorted and deduplicated", "concurrency:\n  - 8\n  - 1\n  - 8\n", func(s *Scenario) { s.Concurrency = []int{1, 8} }},
		{"no prefill rows", "prefill: []\n", func(s *Scenario) { s.Prefill = nil }},
		{"no prefill rows, as --prefill none", "prefill: none\n", func(s *Scenario) { s.Prefill = nil }},
		{"no prefill rows, None", "prefill: None\n", func(s *Scenario) { s.Prefill = nil }},
		{"completions API, any case", "api: Completions\n", func(s *Scenario) { s.API = "completions" }},
		{"max output with k", "max_output: 1k\n", func(s *Scenario) { s.MaxOutput = 1024 }},
		{"overrides", "kv_capacity: 96k\nmax_model_len: 262144\nshared_prefix: 4k\n", func(s *Scenario) {
			s.KVCapacity = 98304
			s.MaxModelLen = 262144
			s.SharedPrefix = 4096
		}},
		{"aliases", "x: &l [1, 2]\n", nil}, // unknown key: checked in TestParseErrors
		{"only some sampling", "sampling:\n  temperature: 0\n", func(s *Scenario) { s.Sampling.Temperature = f64(0) }},
		{"extra with lists and numbers", "extra:\n  stop: [\"</s>\"]\n  n: 1\n", func(s *Scenario) {
			s.Extra = map[string]any{"stop": []any{"</s>"}, "n": 1}
		}},
		{"comments only around a setting", "# hi\nmodel: m # the model\n", func(s *Scenario) { s.Model = "m" }},
	}
	for _, tc := range tests {
		if tc.edit == nil {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.yaml), "file")
			if err != nil {
				t.Fatal(err)
			}
			want := Seed()
			want.Name = "file"
			tc.edit(&want)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("Parse(%q) = %+v\nwant %+v", tc.yaml, got, want)
			}
		})
	}
	if !reflect.DeepEqual(seed, Seed()) {
		t.Fatal("Parse changed the seed matrix")
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string // all must appear in the error
	}{
		{"empty file", "", []string{"empty"}},
		{"comments only", "# nothing\n", []string{"empty"}},
		{"null document", "~\n", []string{"no settings"}},
		{"not a mapping", "- 1\n- 2\n", []string{"line 1", "key: value"}},
		{"not YAML", "contexts: [1, 2\n", []string{"not valid YAML"}},
		{"two documents", "window: 1s\n---\nwindow: 2s\n", []string{"second YAML document"}},
		{"unknown setting with suggestion", "window: 30s\ncontxts: [0]\n", []string{"line 2", `unknown setting "contxts"`, `did you mean "contexts"`, "settings: name, model"}},
		{"flag spelling suggested", "max-output: 10\n", []string{`did you mean "max_output"`}},
		{"unknown setting, no suggestion", "colour: red\n", []string{"line 1", `unknown setting "colour"`}},
		{"unknown sampling parameter", "sampling:\n  temprature: 1\n", []string{"line 2", `"sampling.temprature"`, `did you mean "sampling.temperature"`, "sampling parameters:"}},
		{"set twice", "window: 1s\nmodel: a\nwindow: 2s\n", []string{"line 3", "window is set twice (first on line 1)"}},
		{"no value", "contexts:\n", []string{"line 1", "contexts has no value"}},
		{"bad token count", "contexts: [0, 16q]\n", []string{"line 1", "contexts", "item 2", `"16q"`}},
		{"negative context", "contexts: [-1]\n", []string{"contexts", "whole number"}},
		{"zero concurrency", "concurrency: [0, 1]\n", []string{"concurrency", "(0) is below 1"}},
		{"negative concurrency", "concurrency: 1,-2\n", []string{"concurrency", "(-2) is below 1", "concurrency level"}},
		{"window without a unit", "window: 2\n", []string{"line 1", "window", "no unit", "2s"}},
		{"window in plain seconds", "window: 2.5\n", []string{"window", "no unit", "2.5s"}},
		{"zero rate", "rate: [0, 1]\n", []string{"rate", "not a request rate"}},
		{"rate and concurrency", "rate: [1]\nconcurrency: [2]\n", []string{"rate and concurrency are both set"}},
		{"empty contexts", "contexts: []\n", []string{"line 1", "contexts", "empty"}},
		{"empty concurrency text", "concurrency: \"\"\n", []string{"concurrency", "empty list"}},
		{"zero prefill", "prefill: [0]\n", []string{"prefill", "0 is below 1"}},
		{"list as mapping", "contexts: {a: 1}\n", []string{"want a list of token counts"}},
		{"zero window", "window: 0s\n", []string{"line 1", "window", "longer than zero"}},
		{"negative window", "window: -5s\n", []string{"window", "longer than zero"}},
		{"bad window", "window: soon\n", []string{"window", "30s"}},
		{"zero max output", "max_output: 0\n", []string{"max_output", "at least 1"}},
		{"bad api", "api: grpc\n", []string{"line 1", "api", "chat or completions"}},
		{"name as a list", "name: [a]\n", []string{"name", "single value"}},
		{"sampling as a value", "sampling: 1\n", []string{"sampling", "parameters under it"}},
		{"sampling not a number", "sampling:\n  top_p: high\n", []string{"line 2", "sampling.top_p", "want a number"}},
		{"sampling NaN", "sampling:\n  temperature: NaN\n", []string{"sampling.temperature", "want a number"}},
		{"sampling out of range", "sampling:\n  top_p: 1.5\n", []string{"sampling.top_p 1.5", "at most 1"}},
		{"negative temperature", "sampling:\n  temperature: -1\n", []string{"sampling.temperature", "0 or more"}},
		{"top_k not whole", "sampling:\n  top_k: 2.5\n", []string{"sampling.top_k", "whole number"}},
		{"seed not whole", "sampling:\n  seed: x\n", []string{"sampling.seed", "whole number"}},
		{"bad repetition penalty", "sampling:\n  repetition_penalty: 0\n", []string{"repetition_penalty", "above 0"}},
		{"extra reserved", "extra:\n  max_tokens: 5\n", []string{"line 2", "extra.max_tokens", "max_output"}},
		{"extra sampling", "extra:\n  temperature: 1\n", []string{"extra.temperature", "under sampling"}},
		{"extra not a mapping", "extra: [1]\n", []string{"extra", "request fields under it"}},
		{"extra non-text nested keys", "extra:\n  logit_bias: {1: 5}\n", []string{"extra.logit_bias", "JSON"}},
		{"extra twice", "extra:\n  a: 1\n  a: 2\n", []string{"extra.a is set twice"}},
		{"shared prefix too long", "contexts: [0, 1k]\nshared_prefix: 2k\n", []string{"shared_prefix 2048", "largest is 1024"}},
		{"alias to unknown", "x: &l [1, 2]\n", []string{`unknown setting "x"`}},
		{"complex key", "? [a]\n: 1\n", []string{"plain word"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "file")
			if err == nil {
				t.Fatalf("Parse(%q) succeeded", tc.yaml)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Parse(%q) error %q does not say %q", tc.yaml, err, w)
				}
			}
		})
	}
}

func TestAliases(t *testing.T) {
	got, err := Parse([]byte("contexts: &c [0, 1k]\nprefill: *c\n"), "f")
	if err == nil {
		t.Fatalf("prefill 0 accepted through an alias: %+v", got)
	}
	got, err = Parse([]byte("concurrency: &c [1, 2]\nprefill: *c\n"), "f")
	if err != nil || !slices.Equal(got.Prefill, []int{1, 2}) {
		t.Fatalf("alias: %+v, %v", got.Prefill, err)
	}
}

func TestLoadErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "mine.yaml")
	if err := os.WriteFile(p, []byte("window: 1s\nwindw: 2s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("error %v, want the file and line 2", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("missing file: %v", err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, make([]byte, MaxFileSize+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("big file: %v", err)
	}
	// The name defaults to the file's name.
	ok := filepath.Join(dir, "long-context.yml")
	if err := os.WriteFile(ok, []byte("window: 1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Load(ok)
	if err != nil || s.Name != "long-context" {
		t.Fatalf("Load = %q, %v; want name long-context", s.Name, err)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Scenario)
		want string
	}{
		{"ok", func(*Scenario) {}, ""},
		{"unsorted", func(s *Scenario) { s.Contexts = []int{16, 0} }, "not sorted"},
		{"duplicates", func(s *Scenario) { s.Concurrency = []int{1, 1} }, "not sorted"},
		{"empty contexts", func(s *Scenario) { s.Contexts = nil }, "contexts: the list is empty"},
		{"empty concurrency", func(s *Scenario) { s.Concurrency = nil }, "concurrency: the list is empty"},
		{"empty prefill is fine", func(s *Scenario) { s.Prefill = nil }, ""},
		{"prefill repeats default", func(s *Scenario) { s.PrefillRepeats = 0 }, ""},
		{"prefill repeats negative", func(s *Scenario) { s.PrefillRepeats = -1 }, "prefill_repeats -1"},
		{"prefill repeats too many", func(s *Scenario) { s.PrefillRepeats = MaxPrefillRepeats + 1 }, "give 1 to 100"},
		{"zero window", func(s *Scenario) { s.Window = 0 }, "window"},
		{"zero max output", func(s *Scenario) { s.MaxOutput = 0 }, "max_output"},
		{"bad api", func(s *Scenario) { s.API = "" }, "api"},
		{"negative kv", func(s *Scenario) { s.KVCapacity = -1 }, "kv_capacity"},
		{"negative max len", func(s *Scenario) { s.MaxModelLen = -1 }, "max_model_len"},
		{"negative shared prefix", func(s *Scenario) { s.SharedPrefix = -1 }, "shared_prefix"},
		{"reserved extra", func(s *Scenario) { s.Extra = map[string]any{"stream": false} }, "extra.stream"},
		{"bad min_p", func(s *Scenario) { s.Sampling.MinP = f64(2) }, "min_p"},
		{"bad top_k", func(s *Scenario) { s.Sampling.TopK = in(-2) }, "top_k"},
		{"bad presence", func(s *Scenario) { s.Sampling.PresencePenalty = f64(3) }, "presence_penalty"},
		{"bad frequency", func(s *Scenario) { s.Sampling.FrequencyPenalty = f64(-3) }, "frequency_penalty"},
	}
	for _, tc := range tests {
		s := Seed()
		tc.edit(&s)
		err := s.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one about %q", tc.name, err, tc.want)
		}
	}
}

func TestSamplingFieldsEmpty(t *testing.T) {
	if m := Seed().SamplingFields(); len(m) != 0 {
		t.Fatalf("seed sends sampling fields %v", m)
	}
}

func FuzzParseTokenList(f *testing.F) {
	for _, s := range []string{"0,16k,32k", "1,2,4,8", "248K", "", ",", "1,,2", "2147483647", "2097152k", " 8 , 16K "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseTokenList(s)
		if err != nil {
			return
		}
		if len(l) == 0 {
			t.Fatalf("%q: empty list without an error", s)
		}
		for i, v := range l {
			if v < 0 || v > MaxTokens {
				t.Fatalf("%q: %d out of range", s, v)
			}
			if i > 0 && v <= l[i-1] {
				t.Fatalf("%q: %v not sorted and unique", s, l)
			}
		}
		// Every item parses on its own to a member of the list.
		for _, p := range strings.Split(s, ",") {
			n, err := ParseTokens(p)
			if err != nil || !slices.Contains(l, n) {
				t.Fatalf("%q: item %q gives %d, %v; list %v", s, p, n, err, l)
			}
		}
	})
}

func FuzzParse(f *testing.F) {
	example, err := os.ReadFile(filepath.Join("testdata", "example.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(example))
	for _, s := range []string{
		"", "window: 5s\n", "contexts: \"0,16k\"\n", "sampling:\n  top_p: 0.5\n",
		"extra:\n  a: {b: [1, 2]}\n", "x: &a [1]\ny: *a\n", "a: &a [*a]\n", "- 1\n", "---\n---\n",
		"concurrency: [1, 2]\nprefill: []\n", "window: 1e300\n", "prefill_repeats: 5\n", "prefill_repeats: [3]\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sc, err := Parse([]byte(s), "fuzz")
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if err := sc.Validate(); err != nil {
			t.Fatalf("Parse accepted %q but it does not validate: %v", s, err)
		}
		if _, err := json.Marshal(sc.Extra); err != nil {
			t.Fatalf("Parse accepted extra fields JSON cannot encode: %v", err)
		}
	})
}

// TestParseCountList: concurrency levels are counts, not token counts: a
// mistake says which item is wrong and what a level is.
func TestParseCountList(t *testing.T) {
	good := []struct {
		in   string
		want []int
	}{
		{"1,2,4", []int{1, 2, 4}},
		{" 8, 1 ,8", []int{1, 8}},
	}
	for _, tt := range good {
		got, err := ParseCountList(tt.in, "concurrency level", 1)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseCountList(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	bad := []struct{ in, says string }{
		{"1,-2", "item 2 (-2) is below 1; each concurrency level is a whole number of at least 1"},
		{"0", "item 1 (0) is below 1"},
		{"1,,2", "item 2 is empty"},
		{"4k", "item 1 (4k) is not a whole number"},
		{"99999999999999999999", "too large"},
		{"", "empty list"},
	}
	for _, tt := range bad {
		_, err := ParseCountList(tt.in, "concurrency level", 1)
		if err == nil || !strings.Contains(err.Error(), tt.says) || strings.Contains(err.Error(), "token") {
			t.Errorf("ParseCountList(%q): error %v, want one saying %q (and not about tokens)", tt.in, err, tt.says)
		}
	}
}

func TestParseRateList(t *testing.T) {
	got, err := ParseRateList("4, 0.5,1/s,1")
	if err != nil || !reflect.DeepEqual(got, []float64{0.5, 1, 4}) {
		t.Errorf("ParseRateList = %v, %v", got, err)
	}
	for _, in := range []string{"0", "-1", "fast", "NaN", "Inf", "1,,2", "", "20000"} {
		if _, err := ParseRateList(in); err == nil {
			t.Errorf("ParseRateList(%q) accepted", in)
		}
	}
}

// FuzzParseCountList and FuzzParseRateList: any text fails, or gives a
// sorted list of distinct values within bounds.
func FuzzParseCountList(f *testing.F) {
	for _, s := range []string{"1,2,4", "1,-2", "", "99999999999999999999", " 3 ,3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseCountList(s, "level", 1)
		if err != nil {
			return
		}
		for i, n := range l {
			if n < 1 || (i > 0 && n <= l[i-1]) {
				t.Fatalf("%q gave %v", s, l)
			}
		}
	})
}

func FuzzParseRateList(f *testing.F) {
	for _, s := range []string{"1,2,4", "0.5/s", "NaN", "1e4", "-1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseRateList(s)
		if err != nil {
			return
		}
		for i, r := range l {
			if !(r > 0 && r <= MaxRate) || (i > 0 && r <= l[i-1]) {
				t.Fatalf("%q gave %v", s, l)
			}
		}
	})
}

func TestParsePrefillRepeats(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int
		err  bool
	}{
		{"1", 1, false}, {" 5 ", 5, false}, {"100", 100, false},
		{"0", 0, true}, {"-2", 0, true}, {"101", 0, true}, {"3.5", 0, true}, {"", 0, true}, {"three", 0, true},
	} {
		got, err := ParsePrefillRepeats(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParsePrefillRepeats(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.err)
		}
		if err != nil && !strings.Contains(err.Error(), "cold requests per prefill row") {
			t.Errorf("ParsePrefillRepeats(%q): error %q does not say what to give", tt.in, err)
		}
	}
	if got := (Scenario{}).PrefillRepeatsOrDefault(); got != DefaultPrefillRepeats {
		t.Errorf("a zero PrefillRepeats sends %d, want the default %d", got, DefaultPrefillRepeats)
	}
}

func FuzzParsePrefillRepeats(f *testing.F) {
	for _, s := range []string{"3", " 1 ", "0", "-1", "100", "101", "1e2", "", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParsePrefillRepeats(s)
		if err != nil {
			if !strings.Contains(err.Error(), "cold requests per prefill row") {
				t.Fatalf("%q: error %q does not say what to give", s, err)
			}
			return
		}
		if n < 1 || n > MaxPrefillRepeats {
			t.Fatalf("%q gave %d, outside 1–%d", s, n, MaxPrefillRepeats)
		}
	})
}
