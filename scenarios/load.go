package scenarios

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// MaxFileSize is the largest scenario file Load reads; a real one is a few
// hundred bytes.
const MaxFileSize = 1 << 20

// Settings a scenario file may set, in the order the example documents them.
var settings = []string{
	"name", "model", "api", "contexts", "concurrency", "rate", "prefill", "prefill_repeats", "window", "max_output",
	"shared_prefix", "kv_capacity", "max_model_len", "sampling", "extra",
	"dataset", "requests", "burstiness", "sweep", "seed",
	"prompt_tokens_stdev", "prompt_tokens_min", "prompt_tokens_max",
	"output_tokens_stdev", "output_tokens_min", "output_tokens_max", "random_range_ratio",
}

var samplingKeys = []string{
	"temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty", "frequency_penalty", "repetition_penalty",
}

// Load reads a scenario from a YAML file (see testdata/example.yaml). What
// the file does not set keeps the seed matrix's value (Seed); the name
// defaults to the file's name without its extension. Unknown settings,
// settings given twice and values that cannot run are errors naming the
// file and line.
func Load(path string) (Scenario, error) {
	f, err := os.Open(path)
	if err != nil {
		return Scenario{}, fmt.Errorf("scenario: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return Scenario{}, fmt.Errorf("scenario %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return Scenario{}, fmt.Errorf("scenario %s: larger than %d bytes; is it the right file?", path, MaxFileSize)
	}
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	sc, err := Parse(data, name)
	if err != nil {
		return Scenario{}, fmt.Errorf("scenario %s: %w", path, err)
	}
	if sc.Dataset != "" && !filepath.IsAbs(sc.Dataset) {
		sc.Dataset = filepath.Join(filepath.Dir(path), sc.Dataset) // beside the scenario file
	}
	return sc, nil
}

// Parse reads a scenario from YAML text as Load does; name is used when the
// text sets none.
func Parse(data []byte, name string) (Scenario, error) {
	sc := Seed()
	sc.Name = name
	if len(data) > MaxFileSize {
		return Scenario{}, fmt.Errorf("larger than %d bytes", MaxFileSize)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return Scenario{}, errors.New("the file is empty; write settings as `key: value` lines (see the README's example)")
		}
		return Scenario{}, fmt.Errorf("not valid YAML: %w", err)
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return Scenario{}, fmt.Errorf("line %d: a second YAML document (---); a scenario file holds one", more.Line)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return Scenario{}, errors.New("the file is empty; write settings as `key: value` lines")
		}
		root = root.Content[0]
	}
	root = deref(root)
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return Scenario{}, errors.New("the file has no settings; write them as `key: value` lines")
	}
	if root.Kind != yaml.MappingNode {
		return Scenario{}, fmt.Errorf("line %d: want settings as `key: value` lines, found %s", root.Line, kindName(root))
	}
	err := eachPair(root, "", settings, func(key string, v *yaml.Node) error {
		var err error
		switch key {
		case "name":
			sc.Name, err = str(v)
		case "model":
			sc.Model, err = str(v)
		case "api":
			if sc.API, err = str(v); err == nil {
				sc.API = strings.ToLower(sc.API)
				if sc.API != "chat" && sc.API != "completions" {
					err = fmt.Errorf("%q: use chat or completions", sc.API)
				}
			}
		case "contexts":
			sc.Contexts, err = tokenList(v, 0, false)
		case "concurrency":
			sc.Concurrency, err = countList(v, "concurrency level", 1)
		case "rate":
			sc.Rates, err = rateList(v)
		case "prefill":
			if v.Kind == yaml.ScalarNode && strings.EqualFold(strings.TrimSpace(v.Value), "none") {
				sc.Prefill = nil // prefill: none, as --prefill none
				break
			}
			sc.Prefill, err = tokenList(v, 1, true) // prefill: [] means no prefill rows
		case "prefill_repeats":
			sc.PrefillRepeats, err = prefillRepeats(v)
		case "window":
			sc.Window, err = duration(v)
		case "max_output":
			if sc.MaxOutput, err = tokens(v); err == nil && sc.MaxOutput < 1 {
				err = errors.New("give at least 1 token")
			}
		case "shared_prefix":
			sc.SharedPrefix, err = tokens(v)
		case "kv_capacity":
			sc.KVCapacity, err = tokens(v)
		case "max_model_len":
			sc.MaxModelLen, err = tokens(v)
		case "sampling":
			sc.Sampling, err = sampling(v)
		case "extra":
			sc.Extra, err = extra(v)
		default:
			if strings.HasPrefix(key, "prompt_tokens_") || strings.HasPrefix(key, "output_tokens_") || key == "random_range_ratio" {
				err = lengthKey(&sc, key, v)
			} else {
				err = workloadKey(&sc, key, v)
			}
		}
		return err
	})
	if err != nil {
		return Scenario{}, err
	}
	if sc.Requests > 0 && !hasKey(root, "window") {
		sc.Window = 0 // a count without a window: the count alone ends a cell
	}
	if len(sc.Rates) > 0 {
		if hasKey(root, "concurrency") {
			return Scenario{}, errors.New("rate and concurrency are both set: a matrix's columns are request rates (open loop) or concurrency levels (closed loop), not both")
		}
		sc.Concurrency = nil
	}
	if err := sc.Validate(); err != nil {
		return Scenario{}, err
	}
	return sc, nil
}

// hasKey reports whether mapping m sets key.
func hasKey(m *yaml.Node, key string) bool {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return true
		}
	}
	return false
}

// eachPair calls fn for every key of mapping m, refusing non-scalar keys,
// keys outside known (with a suggestion) and keys given twice. Errors from fn
// are prefixed with the value's line and the key (under prefix).
func eachPair(m *yaml.Node, prefix string, known []string, fn func(key string, v *yaml.Node) error) error {
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], deref(m.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			return &lineError{line: k.Line, msg: "a setting's name must be a plain word, found " + kindName(k), named: true}
		}
		full := prefix + k.Value
		if !contains(known, k.Value) {
			msg := fmt.Sprintf("unknown setting %q", full)
			if s := suggest(k.Value, known); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", prefix+s)
			}
			where := "settings"
			if prefix != "" {
				where = strings.TrimSuffix(prefix, ".") + " parameters"
			}
			return &lineError{line: k.Line, msg: fmt.Sprintf("%s (%s: %s)", msg, where, strings.Join(known, ", ")), named: true}
		}
		if first, dup := seen[k.Value]; dup {
			return &lineError{line: k.Line, msg: fmt.Sprintf("%s is set twice (first on line %d)", full, first), named: true}
		}
		seen[k.Value] = k.Line
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			return &lineError{line: k.Line, msg: full + " has no value", named: true}
		}
		if err := fn(k.Value, v); err != nil {
			var le *lineError
			switch {
			case errors.As(err, &le) && le.named:
				return err
			case errors.As(err, &le):
				return &lineError{line: le.line, msg: full + ": " + le.msg, named: true}
			}
			return &lineError{line: v.Line, msg: full + ": " + err.Error(), named: true}
		}
	}
	return nil
}

// lineError is an error at a line of the file; named says whether its
// message already names the setting.
type lineError struct {
	line  int
	msg   string
	named bool
}

func (e *lineError) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.msg) }

// deref follows aliases (*name) to the node they name.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; i < 16 && n.Kind == yaml.AliasNode && n.Alias != nil; i++ {
		n = n.Alias
	}
	return n
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("the value %q", n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "a document"
}

func scalar(v *yaml.Node) (string, error) {
	if v.Kind != yaml.ScalarNode {
		return "", fmt.Errorf("want a single value, found %s", kindName(v))
	}
	return v.Value, nil
}

func str(v *yaml.Node) (string, error) {
	s, err := scalar(v)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(s), nil
}

func tokens(v *yaml.Node) (int, error) {
	s, err := scalar(v)
	if err != nil {
		return 0, err
	}
	return ParseTokens(s)
}

// tokenList reads a list of token counts, each at least least: a YAML list
// ([0, 16k] or one item per line), a comma-separated string ("0,16k") or a
// single value. Only an allowEmpty list may be [].
func tokenList(v *yaml.Node, least int, allowEmpty bool) ([]int, error) {
	var out []int
	switch v.Kind {
	case yaml.SequenceNode:
		if len(v.Content) == 0 {
			if allowEmpty {
				return nil, nil
			}
			return nil, errors.New("the list is empty; give at least one value")
		}
		for i, it := range v.Content {
			it = deref(it)
			n, err := tokens(it)
			if err != nil {
				return nil, &lineError{line: it.Line, msg: fmt.Sprintf("item %d: %v", i+1, err)}
			}
			out = append(out, n)
		}
	case yaml.ScalarNode:
		l, err := ParseTokenList(v.Value)
		if err != nil {
			return nil, err
		}
		out = l
	default:
		return nil, fmt.Errorf("want a list of token counts such as [0, 16k, 32k], found %s", kindName(v))
	}
	for _, n := range out {
		if n < least {
			return nil, fmt.Errorf("%d is below %d", n, least)
		}
	}
	return normalize(out), nil
}

// countList reads a list of whole numbers of at least least (concurrency
// levels), written as tokenList's lists are.
func countList(v *yaml.Node, what string, least int) ([]int, error) {
	switch v.Kind {
	case yaml.SequenceNode:
		if len(v.Content) == 0 {
			return nil, errors.New("the list is empty; give at least one value")
		}
		var parts []string
		for _, it := range v.Content {
			it = deref(it)
			if it.Kind != yaml.ScalarNode {
				return nil, &lineError{line: it.Line, msg: fmt.Sprintf("want a %s, found %s", what, kindName(it))}
			}
			parts = append(parts, it.Value)
		}
		return ParseCountList(strings.Join(parts, ","), what, least)
	case yaml.ScalarNode:
		return ParseCountList(v.Value, what, least)
	}
	return nil, fmt.Errorf("want a list of %ss such as [1, 2, 4, 8], found %s", what, kindName(v))
}

// rateList reads request rates per second: [1, 2, 4] or "0.5,1".
func rateList(v *yaml.Node) ([]float64, error) {
	switch v.Kind {
	case yaml.SequenceNode:
		if len(v.Content) == 0 {
			return nil, errors.New("the list is empty; give at least one rate")
		}
		var parts []string
		for _, it := range v.Content {
			it = deref(it)
			if it.Kind != yaml.ScalarNode {
				return nil, &lineError{line: it.Line, msg: fmt.Sprintf("want a request rate, found %s", kindName(it))}
			}
			parts = append(parts, it.Value)
		}
		return ParseRateList(strings.Join(parts, ","))
	case yaml.ScalarNode:
		return ParseRateList(v.Value)
	}
	return nil, fmt.Errorf("want a list of request rates such as [1, 2, 4], found %s", kindName(v))
}

// duration reads a Go duration with its unit ("30s", "2m", "1m30s"), as
// --window does; it must be positive. A bare number is an error here as
// there: "2" could be seconds or minutes, and a window taken in the wrong
// unit wastes a run.
func duration(v *yaml.Node) (time.Duration, error) {
	s, err := scalar(v)
	if err != nil {
		return 0, err
	}
	s = strings.TrimSpace(s)
	d, err := time.ParseDuration(s)
	if err != nil {
		if _, ferr := strconv.ParseFloat(s, 64); ferr == nil {
			return 0, fmt.Errorf("%q has no unit: write %ss for seconds or %sm for minutes (a duration such as 30s, 2m or 1m30s)", s, s, s)
		}
		return 0, fmt.Errorf("%q: write a duration such as 30s, 2m or 1m30s", s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q: the window must be longer than zero", s)
	}
	return d, nil
}

func sampling(v *yaml.Node) (Sampling, error) {
	var p Sampling
	if v.Kind != yaml.MappingNode {
		return p, fmt.Errorf("want parameters under it, one per line (%s), found %s", strings.Join(samplingKeys, ", "), kindName(v))
	}
	err := eachPair(v, "sampling.", samplingKeys, func(key string, n *yaml.Node) error {
		s, err := scalar(n)
		if err != nil {
			return err
		}
		s = strings.TrimSpace(s)
		switch key {
		case "top_k":
			k, err := strconv.Atoi(s)
			if err != nil {
				return fmt.Errorf("%q: want a whole number", s)
			}
			p.TopK = &k
		case "seed":
			x, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return fmt.Errorf("%q: want a whole number", s)
			}
			p.Seed = &x
		default:
			f, err := strconv.ParseFloat(s, 64)
			if err != nil || f != f {
				return fmt.Errorf("%q: want a number", s)
			}
			switch key {
			case "temperature":
				p.Temperature = &f
			case "top_p":
				p.TopP = &f
			case "min_p":
				p.MinP = &f
			case "presence_penalty":
				p.PresencePenalty = &f
			case "frequency_penalty":
				p.FrequencyPenalty = &f
			case "repetition_penalty":
				p.RepetitionPenalty = &f
			}
		}
		return nil
	})
	if err != nil {
		return p, err
	}
	if err := p.validate(); err != nil {
		return p, &lineError{line: v.Line, msg: err.Error(), named: true}
	}
	return p, nil
}

func extra(v *yaml.Node) (map[string]any, error) {
	if v.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("want request fields under it, one per line, found %s", kindName(v))
	}
	out := map[string]any{}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, val := v.Content[i], v.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, &lineError{line: k.Line, msg: "extra: a field name must be a plain word, found " + kindName(k), named: true}
		}
		if err := checkExtraKey(k.Value); err != nil {
			return nil, &lineError{line: k.Line, msg: err.Error(), named: true}
		}
		if _, dup := out[k.Value]; dup {
			return nil, &lineError{line: k.Line, msg: fmt.Sprintf("extra.%s is set twice", k.Value), named: true}
		}
		var x any
		if err := val.Decode(&x); err != nil {
			return nil, &lineError{line: val.Line, msg: fmt.Sprintf("extra.%s: %v", k.Value, err), named: true}
		}
		if _, err := json.Marshal(x); err != nil {
			return nil, &lineError{line: val.Line, msg: fmt.Sprintf("extra.%s cannot be sent as JSON (use text keys in nested mappings): %v", k.Value, err), named: true}
		}
		out[k.Value] = x
	}
	return out, nil
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// suggest returns the known word closest to s (edit distance at most 2, or
// equal after mapping '-' to '_' and case), or "".
func suggest(s string, known []string) string {
	norm := strings.ToLower(strings.ReplaceAll(s, "-", "_"))
	type cand struct {
		w string
		d int
	}
	var cs []cand
	for _, k := range known {
		if k == norm {
			return k
		}
		if d := Distance(norm, k); d <= 2 {
			cs = append(cs, cand{k, d})
		}
	}
	if len(cs) == 0 {
		return ""
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].d < cs[j].d })
	return cs[0].w
}

// Distance is the Levenshtein distance of a and b (bytes), capped at 99
// for long inputs: how far a typo is from a known name.
func Distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// prefillRepeats reads prefill_repeats: a whole number from 1 to
// MaxPrefillRepeats.
func prefillRepeats(v *yaml.Node) (int, error) {
	t, err := scalar(v)
	if err != nil {
		return 0, err
	}
	return ParsePrefillRepeats(t)
}
