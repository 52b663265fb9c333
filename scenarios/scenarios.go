// Package scenarios holds the settings of a matrix run: the seed pages'
// matrix built in (Seed), the demo (Demo), and YAML files that can set every
// setting (Load; see testdata/example.yaml for a documented file). Token
// counts are written as plain integers or with a K suffix, K = 1,024
// (METHOD.md §1): "16k" = "16K" = 16384.
package scenarios

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Defaults of METHOD.md §3.
const (
	DefaultWindow    = 30 * time.Second
	DefaultMaxOutput = 8192
	DefaultAPI       = "chat"
	// DefaultPrefillRepeats is the cold requests per prefill row: three is
	// the fewest whose median is robust (one slow repeat, a stall or a
	// compile on first use, cannot move it) and whose spread shows, at
	// three times one request's cost (METHOD §3).
	DefaultPrefillRepeats = 3
	// MaxPrefillRepeats bounds --prefill-repeats: more is taken for a typo.
	MaxPrefillRepeats = 100
)

// PrefillRepeatsOrDefault is the cold requests each prefill row sends.
func (s Scenario) PrefillRepeatsOrDefault() int {
	if s.PrefillRepeats == 0 {
		return DefaultPrefillRepeats
	}
	return s.PrefillRepeats
}

// MaxTokens is the largest token count ParseTokens accepts; anything larger
// is taken for a typo.
const MaxTokens = math.MaxInt32

// Scenario is the settings of one matrix run. A zero field means "the
// default" only where its comment says so; Validate says what is wrong.
type Scenario struct {
	// Name labels the run in the result ("seed", "demo", a file's name).
	Name string
	// Contexts are the decode rows: prompt tokens per request (0 = a
	// minimal prompt). Sorted, no duplicates.
	Contexts []int
	// Concurrency are the decode columns: requests in flight, each >= 1.
	// Sorted, no duplicates. Unused when Rates is set.
	Concurrency []int
	// Rates, when set, are the decode columns instead of Concurrency:
	// requests per second arriving at random (Poisson) times, open loop
	// (METHOD.md §3, arrival-rate cells). Sorted, no duplicates, each > 0.
	Rates []float64
	// Prefill are the prefill rows' prompt tokens, each >= 1; empty means no
	// prefill rows. Sorted, no duplicates.
	Prefill []int
	// PrefillRepeats is how many cold requests each prefill row sends
	// (METHOD §3); 0 means DefaultPrefillRepeats (PrefillRepeatsOrDefault).
	PrefillRepeats int
	// Window is how long each decode cell is measured (> 0).
	Window time.Duration
	// MaxOutput is max_tokens of every decode request (>= 1).
	MaxOutput int
	// API is "chat" (/v1/chat/completions) or "completions" (/v1/completions).
	API string
	// Model is the served model name requests use; empty: the one the
	// engine serves (probed).
	Model string
	// Sampling are the sampling parameters sent with every request; unset
	// ones are left to the engine.
	Sampling Sampling
	// SharedPrefix is how many tokens at the start of every prompt of a
	// context row (after the run's salt) all slots share; 0: prompts are
	// distinct from their first token (METHOD §3 warm-up).
	SharedPrefix int
	// Extra are extra JSON fields added to every request body, e.g.
	// {"chat_template_kwargs": {"enable_thinking": false}}.
	Extra map[string]any
	// KVCapacity overrides the engine's KV cache capacity in tokens (0: use
	// what the engine reports); MaxModelLen its max model length (0: probe).
	KVCapacity  int
	MaxModelLen int

	// Workload settings (workload.go). Dataset is a file of the user's
	// prompts (package dataset reads it) sent in place of synthetic ones;
	// Requests, when > 0, ends each cell after that many requests have
	// been sent and have ended (with a Window, whichever comes first;
	// Window 0: the count alone); Burstiness is the gamma shape of a rate
	// cell's gaps (0 or 1: Poisson); Sweep measures, per context, one
	// request at a time, then the throughput, then rates between (Rates
	// and Concurrency then unused but for the throughput cell's N, the
	// largest concurrency); Seed draws the dataset's sample and the
	// arrival schedules.
	Dataset    string
	Requests   int
	Burstiness float64
	Sweep      bool
	Seed       int64
	// PromptLengths and OutputLengths spread each synthetic request's
	// prompt length around its row's context and its max_tokens around
	// MaxOutput (lengths.go); zero: every request the mean.
	PromptLengths, OutputLengths Lengths
}

// Sampling parameters, in the OpenAI / vLLM request field names. A nil field
// is not sent.
type Sampling struct {
	Temperature       *float64 // temperature, >= 0
	TopP              *float64 // top_p, in (0, 1]
	TopK              *int     // top_k, >= -1 (-1 or 0: off, engine-dependent)
	MinP              *float64 // min_p, in [0, 1]
	Seed              *int64   // seed
	PresencePenalty   *float64 // presence_penalty, in [-2, 2]
	FrequencyPenalty  *float64 // frequency_penalty, in [-2, 2]
	RepetitionPenalty *float64 // repetition_penalty, > 0
}

// SamplingFields returns the request fields the scenario's sampling
// parameters set (only the set ones), ready to merge into a request body.
func (s Scenario) SamplingFields() map[string]any {
	m := map[string]any{}
	p := s.Sampling
	if p.Temperature != nil {
		m["temperature"] = *p.Temperature
	}
	if p.TopP != nil {
		m["top_p"] = *p.TopP
	}
	if p.TopK != nil {
		m["top_k"] = *p.TopK
	}
	if p.MinP != nil {
		m["min_p"] = *p.MinP
	}
	if p.Seed != nil {
		m["seed"] = *p.Seed
	}
	if p.PresencePenalty != nil {
		m["presence_penalty"] = *p.PresencePenalty
	}
	if p.FrequencyPenalty != nil {
		m["frequency_penalty"] = *p.FrequencyPenalty
	}
	if p.RepetitionPenalty != nil {
		m["repetition_penalty"] = *p.RepetitionPenalty
	}
	return m
}

// Seed is the matrix of the seed pages (METHOD.md §3 defaults): contexts 0,
// 16K, 32K, 64K, 128K, 248K; concurrency 1 to 128 doubling; prefill at 8K,
// 16K, 32K, 64K, 128K; 30 s windows; 8,192 output tokens; the chat API.
func Seed() Scenario {
	return Scenario{
		Name:        "seed",
		Contexts:    []int{0, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 248 << 10},
		Concurrency: []int{1, 2, 4, 8, 16, 32, 64, 128},
		Prefill:     []int{8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10},
		Window:      DefaultWindow,
		MaxOutput:   DefaultMaxOutput,
		API:         DefaultAPI,
	}
}

// ParseTokens reads a token count: a plain integer ("8192", "0") or one with
// a K suffix meaning × 1,024 ("16k" = "16K" = 16384, "248K"). Spaces around
// it are ignored. Negative counts, fractions and counts above MaxTokens are
// errors.
func ParseTokens(s string) (int, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, errors.New("empty token count: write a number such as 8192 or 16k")
	}
	mul := 1
	num := t
	if last := t[len(t)-1]; last == 'k' || last == 'K' {
		mul = 1024
		num = strings.TrimSpace(t[:len(t)-1])
	}
	if num == "" || strings.IndexFunc(num, func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
		return 0, fmt.Errorf("token count %q: write a whole number of tokens such as 8192 or 16k (k = 1,024)", s)
	}
	n, err := strconv.Atoi(num)
	if err != nil || n > MaxTokens/mul {
		return 0, fmt.Errorf("token count %q is too large (at most %d)", s, MaxTokens)
	}
	return n * mul, nil
}

// ParseTokenList reads a comma-separated list of token counts ("0,16k,32k")
// and returns it sorted, without duplicates.
func ParseTokenList(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("empty list: write token counts separated by commas, such as 0,16k,32k")
	}
	parts := strings.Split(s, ",")
	out := make([]int, 0, len(parts))
	for i, p := range parts {
		if strings.TrimSpace(p) == "" {
			return nil, fmt.Errorf("list %q: item %d is empty", s, i+1)
		}
		n, err := ParseTokens(p)
		if err != nil {
			return nil, fmt.Errorf("list %q: item %d: %w", s, i+1, err)
		}
		out = append(out, n)
	}
	return normalize(out), nil
}

// ParseCountList reads a comma-separated list of whole numbers of at least
// least, such as concurrency levels ("1,2,4,8"), and returns it sorted,
// without duplicates. what names the items in messages ("concurrency
// level").
func ParseCountList(s, what string, least int) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("empty list: write %ss separated by commas, such as 1,2,4,8", what)
	}
	parts := strings.Split(s, ",")
	out := make([]int, 0, len(parts))
	for i, p := range parts {
		t := strings.TrimSpace(p)
		n, err := strconv.Atoi(t)
		switch {
		case t == "":
			return nil, fmt.Errorf("list %q: item %d is empty", s, i+1)
		case err != nil && strings.IndexFunc(strings.TrimPrefix(t, "-"), func(r rune) bool { return r < '0' || r > '9' }) < 0:
			return nil, fmt.Errorf("list %q: item %d (%s) is too large", s, i+1, t)
		case err != nil:
			return nil, fmt.Errorf("list %q: item %d (%s) is not a whole number; each %s is a whole number of at least %d", s, i+1, t, what, least)
		case n < least:
			return nil, fmt.Errorf("list %q: item %d (%d) is below %d; each %s is a whole number of at least %d", s, i+1, n, least, what, least)
		}
		out = append(out, n)
	}
	return normalize(out), nil
}

// MaxRate is the highest request rate a rate list takes (requests/s);
// more is taken for a typo.
const MaxRate = 10000

// ParseRateList reads request rates in requests per second ("1,2,4",
// "0.5, 8"), each above 0, returned sorted without duplicates.
func ParseRateList(s string) ([]float64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("empty list: write request rates per second separated by commas, such as 1,2,4")
	}
	var out []float64
	for i, p := range strings.Split(s, ",") {
		t := strings.TrimSuffix(strings.TrimSpace(p), "/s")
		v, err := strconv.ParseFloat(t, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 || v > MaxRate {
			return nil, fmt.Errorf("list %q: item %d (%s) is not a request rate: give requests per second above 0 and at most %d, such as 0.5 or 4", s, i+1, strings.TrimSpace(p), MaxRate)
		}
		out = append(out, v)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// ParsePrefillList reads the prefill contexts: a token list as
// ParseTokenList reads it, or "none" (or nothing) for no prefill rows.
func ParsePrefillList(s string) ([]int, error) {
	if t := strings.TrimSpace(s); t == "" || strings.EqualFold(t, "none") {
		return nil, nil
	}
	return ParseTokenList(s)
}

// normalize sorts l and drops duplicates, in place.
func normalize(l []int) []int {
	slices.Sort(l)
	return slices.Compact(l)
}

// Validate reports the first setting that cannot run, saying which and what
// to write instead. Lists must be sorted without duplicates (ParseTokenList
// and Load make them so).
func (s Scenario) Validate() error {
	if err := checkList("contexts", s.Contexts, 0, false); err != nil {
		return err
	}
	if len(s.Rates) > 0 {
		for i, r := range s.Rates {
			if !(r > 0) || r > MaxRate {
				return fmt.Errorf("rate: %v is not a request rate above 0 and at most %d per second", r, MaxRate)
			}
			if s.Window > 0 && s.Requests == 0 && math.Round(r*s.Window.Seconds()) < 1 {
				return fmt.Errorf("rate: %v requests/s over a %v window is no request at all: raise the rate or the window", r, s.Window)
			}
			if i > 0 && r <= s.Rates[i-1] {
				return fmt.Errorf("rate: %v is not sorted without duplicates", s.Rates)
			}
		}
	} else if err := checkList("concurrency", s.Concurrency, 1, false); err != nil {
		return err
	}
	if err := checkList("prefill", s.Prefill, 1, true); err != nil {
		return err
	}
	if s.PrefillRepeats < 0 || s.PrefillRepeats > MaxPrefillRepeats {
		return fmt.Errorf("prefill_repeats %d: give 1 to %d cold requests per prefill row (the default is %d)", s.PrefillRepeats, MaxPrefillRepeats, DefaultPrefillRepeats)
	}
	if err := s.validateLengths(); err != nil {
		return err
	}
	if err := s.validateWorkload(); err != nil {
		return err
	}
	if s.MaxOutput < 1 {
		return fmt.Errorf("max_output %d: give at least 1 token (the default is %d)", s.MaxOutput, DefaultMaxOutput)
	}
	if s.API != "chat" && s.API != "completions" {
		return fmt.Errorf("api %q: use chat or completions", s.API)
	}
	if s.SharedPrefix < 0 {
		return fmt.Errorf("shared_prefix %d: give 0 (no shared prefix) or a positive number of tokens", s.SharedPrefix)
	}
	if s.SharedPrefix > 0 && s.SharedPrefix > s.Contexts[len(s.Contexts)-1] {
		return fmt.Errorf("shared_prefix %d is longer than every context (the largest is %d)",
			s.SharedPrefix, s.Contexts[len(s.Contexts)-1])
	}
	if s.KVCapacity < 0 {
		return fmt.Errorf("kv_capacity %d: give 0 (ask the engine) or a positive number of tokens", s.KVCapacity)
	}
	if s.MaxModelLen < 0 {
		return fmt.Errorf("max_model_len %d: give 0 (ask the engine) or a positive number of tokens", s.MaxModelLen)
	}
	if err := s.Sampling.validate(); err != nil {
		return err
	}
	for k := range s.Extra {
		if err := checkExtraKey(k); err != nil {
			return err
		}
	}
	return nil
}

func checkList(name string, l []int, least int, mayBeEmpty bool) error {
	if len(l) == 0 {
		if mayBeEmpty {
			return nil
		}
		return fmt.Errorf("%s: the list is empty; give at least one value", name)
	}
	for i, v := range l {
		if v < least {
			return fmt.Errorf("%s: %d is below %d", name, v, least)
		}
		if i > 0 && v <= l[i-1] {
			return fmt.Errorf("%s: %v is not sorted without duplicates", name, l)
		}
	}
	return nil
}

func (p Sampling) validate() error {
	bad := func(name string, v any, want string) error {
		return fmt.Errorf("sampling.%s %v: %s", name, v, want)
	}
	switch {
	case p.Temperature != nil && !(*p.Temperature >= 0 && !math.IsInf(*p.Temperature, 0)):
		return bad("temperature", *p.Temperature, "give 0 or more")
	case p.TopP != nil && !(*p.TopP > 0 && *p.TopP <= 1):
		return bad("top_p", *p.TopP, "give a value above 0 and at most 1")
	case p.TopK != nil && *p.TopK < -1:
		return bad("top_k", *p.TopK, "give -1 (off) or more")
	case p.MinP != nil && !(*p.MinP >= 0 && *p.MinP <= 1):
		return bad("min_p", *p.MinP, "give a value from 0 to 1")
	case p.PresencePenalty != nil && !(*p.PresencePenalty >= -2 && *p.PresencePenalty <= 2):
		return bad("presence_penalty", *p.PresencePenalty, "give a value from -2 to 2")
	case p.FrequencyPenalty != nil && !(*p.FrequencyPenalty >= -2 && *p.FrequencyPenalty <= 2):
		return bad("frequency_penalty", *p.FrequencyPenalty, "give a value from -2 to 2")
	case p.RepetitionPenalty != nil && !(*p.RepetitionPenalty > 0 && !math.IsInf(*p.RepetitionPenalty, 0)):
		return bad("repetition_penalty", *p.RepetitionPenalty, "give a value above 0 (1 is off)")
	}
	return nil
}

// reservedExtra are request fields tokentap sets itself, with the setting
// to use instead.
var reservedExtra = map[string]string{
	"model":                 "set model",
	"messages":              "tokentap builds the prompt from contexts",
	"prompt":                "tokentap builds the prompt from contexts",
	"max_tokens":            "set max_output",
	"max_completion_tokens": "set max_output",
	"stream":                "tokentap always streams",
	"stream_options":        "tokentap asks for usage itself",
	"ignore_eos":            "METHOD.md requires ignore_eos so output is never cut short",
	"min_tokens":            "METHOD.md sets min_tokens to max_output where the engine accepts it",
	"temperature":           "set it under sampling",
	"top_p":                 "set it under sampling",
	"top_k":                 "set it under sampling",
	"min_p":                 "set it under sampling",
	"seed":                  "set it under sampling",
	"presence_penalty":      "set it under sampling",
	"frequency_penalty":     "set it under sampling",
	"repetition_penalty":    "set it under sampling",
}

func checkExtraKey(k string) error {
	if why, ok := reservedExtra[k]; ok {
		return fmt.Errorf("extra.%s: tokentap sets this field itself; %s", k, why)
	}
	if k == "" {
		return errors.New("extra: a field name is empty")
	}
	return nil
}

// ParsePrefillRepeats reads a count of cold requests per prefill row
// (--prefill-repeats, prefill_repeats): a whole number from 1 to
// MaxPrefillRepeats.
func ParsePrefillRepeats(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 || n > MaxPrefillRepeats {
		return 0, fmt.Errorf("%q: give a whole number of cold requests per prefill row, 1 to %d (the default is %d)", s, MaxPrefillRepeats, DefaultPrefillRepeats)
	}
	return n, nil
}
