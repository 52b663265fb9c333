package result

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// compileSchema compiles result/schema.json as the JSON Schema it says it
// is (draft 2020-12, formats asserted).
func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(JSONSchema))
	if err != nil {
		t.Fatalf("schema.json is not JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("schema.json")
	if err != nil {
		t.Fatalf("schema.json is not a valid JSON Schema: %v", err)
	}
	return s
}

func validate(t *testing.T, s *jsonschema.Schema, doc []byte) error {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	return s.Validate(v)
}

// TestSchemaHoldsEveryDocument: what tokentap writes is what the schema
// says — a document with every optional field set (so a field added to
// the Go types but not to schema.json fails here: every object is closed
// with additionalProperties false), and the documents the reports are
// tested on.
func TestSchemaHoldsEveryDocument(t *testing.T) {
	s := compileSchema(t)
	full := sample()
	full.Probes = []Fact{{Name: "engine", Value: "vllm", Source: "GET /metrics"}}
	full.Notes = []string{"a note"}
	full.Interrupted = true
	full.StoppedEarly = "the engine went away"
	full.Hardware = Hardware{Type: "Discrete GPU", GPU: "RTX 3060", VRAM: "12 GB", Driver: "580", CPU: "x", RAM: "32 GB", OS: "Linux", Source: "detected+given"}
	full.Engine = Engine{Name: "vllm", Version: "0.32.0", Quantization: "FP8", Backend: "cuda", Build: "img", LaunchCommand: "vllm serve m", URL: "http://h:8000"}
	full.Model = Model{Name: "M", Served: "m", Revision: "main"}
	full.Tool.Commit = "abc"
	st := &full.Settings
	st.PrefillMode, st.PrefillAt, st.API, st.Dropped = "Measured during decode warm-up", []int{8192}, "chat", []int{262144}
	st.KVCapacity, st.KVCapacityMin, st.KVCapacityMax, st.MaxModelLen = 81920, 1, 2, 90112
	st.Scenario, st.By, st.Extra, st.Rates = "seed", "@me", []string{"top_k=20"}, []float64{0.5, 2}
	full.Prefill[0].Error, full.Prefill[0].DuringWarmup = "x", true
	cached := 16
	st.PrefillRepeats = 3
	full.Prefill[0].Repeats, full.Prefill[0].Measured, full.Prefill[0].TokPerSecMin, full.Prefill[0].TokPerSecMax = 3, 2, 9801, 10020
	full.Prefill[0].Each = []PrefillRepeat{{PromptTokens: 8190, TTFTms: 817, TokPerSec: 10020, CachedTokens: &cached},
		{PromptTokens: 8190, Error: "http_error (HTTP 500)"}, {PromptTokens: 8190, TTFTms: 836, TokPerSec: 9801}}
	c := &full.Decode[0]
	c.Reason, c.PerRequestTokPerSec, c.AvgActive, c.AvgActiveSource, c.PeakDecoding = "r", 160, 1, ActiveEngine, 1
	c.Completed, c.OutputTokens, c.MeasuredForSeconds, c.PromptTokens, c.Sent, c.FailedReqs = 1, 4684, 30, 11, 2, 0
	c.Cache = &Cache{HitRate: 0.99, Requests: 2, Misses: 0, Source: CacheUsage}
	c.TTFTKind = TTFTWarm
	c.Histograms.RecordE2E(1)
	c.Histograms.RecordRate(150)
	c.Histograms.Clamped = 1
	full.Decode = append(full.Decode, Cell{Context: 0, Rate: 2, Status: Valid, Measured: true, AchievedRate: 1.9,
		PeakInFlight: 3, AvgInFlight: 1.4, TTFTKind: TTFTCold, MaxWaiting: 0})
	full.SetPercentiles([]float64{50, 99.9})

	// Every field of the Go document is set: the schema must hold them all.
	var generic map[string]any
	b, _ := json.Marshal(full)
	_ = json.Unmarshal(b, &generic)
	for _, k := range []string{"probes", "notes", "interrupted", "stopped_early"} {
		if _, ok := generic[k]; !ok {
			t.Fatalf("the full document lacks %q: set it in the test", k)
		}
	}
	var buf bytes.Buffer
	if err := full.Write(&buf); err != nil {
		t.Fatal(err)
	}
	if err := validate(t, s, buf.Bytes()); err != nil {
		t.Errorf("a document with every field does not match schema.json:\n%v", err)
	}

	files, _ := filepath.Glob(filepath.Join("..", "report", "testdata", "*.json"))
	if len(files) < 4 {
		t.Fatalf("found %d report test documents", len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := validate(t, s, b); err != nil {
			t.Errorf("%s does not match schema.json:\n%v", f, err)
		}
	}
}

// TestSchemaRefuses: the schema is no rubber stamp.
func TestSchemaRefuses(t *testing.T) {
	s := compileSchema(t)
	var buf bytes.Buffer
	if err := sample().Write(&buf); err != nil {
		t.Fatal(err)
	}
	good := buf.String()
	for name, bad := range map[string]string{
		"newer schema":         strings.Replace(good, `"schema": 1`, `"schema": 2`, 1),
		"unknown field":        strings.Replace(good, `"schema": 1`, `"schema": 1, "speed": 3`, 1),
		"unknown status":       strings.Replace(good, `"status": "valid"`, `"status": "fine"`, 1),
		"tok/s as text":        strings.Replace(good, `"total_tok_s": 156.2`, `"total_tok_s": "156.2"`, 1),
		"percentile not p…":    strings.Replace(good, `"decode": [`, `"decode": [{"context":0,"concurrency":1,"status":"valid","measured":true,"completed":0,"output_tokens":0,"max_waiting":0,"percentiles":{"ttft_ms":{"n":1,"median":3}}},`, 1),
		"no decode":            strings.Replace(good, `"decode"`, `"decoded"`, 1),
		"bad start time":       strings.Replace(good, `"started": "2026-11-30T10:00:00Z"`, `"started": "yesterday"`, 1),
		"zero repeats":         strings.Replace(good, `"requests": 1`, `"requests": 1, "repeats": 0`, 1),
		"unknown repeat field": strings.Replace(good, `"requests": 1`, `"requests": 1, "each": [{"tok_s": 1, "speed": 2}]`, 1),
		"negative cached":      strings.Replace(good, `"requests": 1`, `"requests": 1, "each": [{"cached_tokens": -1}]`, 1),
	} {
		if bad == good {
			t.Fatalf("%s: the replacement did not apply", name)
		}
		if err := validate(t, s, []byte(bad)); err == nil {
			t.Errorf("%s: schema.json accepted it", name)
		}
	}
}

// A document from before prefill repeats (no repeats, measured, each)
// still reads, its row one request measured where it shows figures.
func TestPrefillBeforeRepeatsReads(t *testing.T) {
	var buf bytes.Buffer
	if err := sample().Write(&buf); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), `"repeats"`) || strings.Contains(buf.String(), `"each"`) {
		t.Fatal("the sample already has repeats")
	}
	r, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	p := r.Prefill[0]
	if p.RepeatsAsked() != 1 || p.RepeatsMeasured() != 1 || len(p.RepeatTokS()) != 1 || p.RepeatTokS()[0] != 9918 {
		t.Errorf("an old row reads as %d asked, %d measured, tok/s %v; want one request of 9,918", p.RepeatsAsked(), p.RepeatsMeasured(), p.RepeatTokS())
	}
	failed := Prefill{Status: Failed, Requests: 1}
	if failed.RepeatsAsked() != 1 || failed.RepeatsMeasured() != 0 || failed.RepeatTokS() != nil {
		t.Errorf("an old failed row reads as %d asked, %d measured, %v", failed.RepeatsAsked(), failed.RepeatsMeasured(), failed.RepeatTokS())
	}
}
