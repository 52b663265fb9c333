package scenarios

import (
	"errors"

	"fmt"
	"gopkg.in/yaml.v3"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Workload settings beyond the grid of contexts × columns (issue
// "workloads as users bring them"): a dataset of the user's prompts, a
// request count, bursty arrivals, a sweep, and lengths that vary around
// their mean. They are Scenario fields; this file holds their types,
// parsing and checks.

// SweepSize is how many cells a sweep measures per context row, as
// GuideLLM's sweep profile by default (sweep_size 10): one request at a
// time, the engine's throughput, then eight rates spread between them.
const SweepSize = 10

// MaxBurstiness is the largest burstiness taken; more is taken for a typo
// (gaps' coefficient of variation 1/√B: B = 100 is already all but
// evenly spaced).
const MaxBurstiness = 1000

// Lengths is how the lengths of synthetic prompts (or outputs) vary
// around their mean (the row's context, or max output): the zero value is
// a constant. RangeRatio draws uniformly from [mean × (1 − r), mean × (1 +
// r)] as vllm bench serve's --random-range-ratio does; Stdev draws from a
// normal distribution with that deviation, clipped to [Min, Max], as
// GuideLLM's prompt_tokens_stdev / _min / _max do. Min and Max clip a
// range too.
type Lengths struct {
	RangeRatio float64 `json:"range_ratio,omitempty"`
	Stdev      int     `json:"stdev,omitempty"`
	Min        int     `json:"min,omitempty"`
	Max        int     `json:"max,omitempty"`
}

// IsZero reports a constant length.
func (l Lengths) IsZero() bool { return l == Lengths{} }

// Draw returns one length around mean (at least least).
func (l Lengths) Draw(mean, least int, rng *rand.Rand) int {
	v := float64(mean)
	switch {
	case l.RangeRatio > 0:
		lo := math.Floor(float64(mean) * (1 - l.RangeRatio))
		hi := math.Ceil(float64(mean) * (1 + l.RangeRatio))
		v = lo + math.Floor(rng.Float64()*(hi-lo+1))
	case l.Stdev > 0:
		v = math.Round(float64(mean) + rng.NormFloat64()*float64(l.Stdev))
	}
	if l.Min > 0 {
		v = math.Max(v, float64(l.Min))
	}
	if l.Max > 0 {
		v = math.Min(v, float64(l.Max))
	}
	return max(int(v), least)
}

// String says how lengths vary, for reports: "uniform ±10%",
// "normal σ 128, 256–1024".
func (l Lengths) String() string {
	var parts []string
	switch {
	case l.RangeRatio > 0:
		parts = append(parts, "uniform ±"+strconv.FormatFloat(100*l.RangeRatio, 'f', -1, 64)+"%")
	case l.Stdev > 0:
		parts = append(parts, "normal σ "+strconv.Itoa(l.Stdev))
	}
	switch {
	case l.Min > 0 && l.Max > 0:
		parts = append(parts, fmt.Sprintf("%d–%d", l.Min, l.Max))
	case l.Min > 0:
		parts = append(parts, fmt.Sprintf("at least %d", l.Min))
	case l.Max > 0:
		parts = append(parts, fmt.Sprintf("at most %d", l.Max))
	}
	if len(parts) == 0 {
		return "constant"
	}
	return strings.Join(parts, ", ")
}

// validate says what is wrong with l; what names it ("prompt tokens").
func (l Lengths) validate(what, key string) error {
	switch {
	case l.RangeRatio < 0 || l.RangeRatio >= 1 || math.IsNaN(l.RangeRatio):
		return fmt.Errorf("%s range ratio %v: give a ratio from 0 to below 1, as vLLM's --random-range-ratio (0.1: ±10%%)", what, l.RangeRatio)
	case l.RangeRatio > 0 && l.Stdev > 0:
		return fmt.Errorf("%s: a range ratio and a deviation (%s_stdev) are both given: lengths are drawn from one or the other", what, key)
	case l.Stdev < 0 || l.Min < 0 || l.Max < 0:
		return fmt.Errorf("%s: a deviation, minimum or maximum below 0", what)
	case l.Min > 0 && l.Max > 0 && l.Min > l.Max:
		return fmt.Errorf("%s: minimum %d above maximum %d", what, l.Min, l.Max)
	}
	return nil
}

// validateWorkload checks the workload settings of s.
func (s Scenario) validateWorkload() error {
	if s.Requests < 0 {
		return fmt.Errorf("requests %d: give 0 (the window alone ends a cell) or a positive count", s.Requests)
	}
	if s.Window <= 0 && s.Requests == 0 {
		return fmt.Errorf("window %v: give a positive duration such as 30s, or a request count (requests)", s.Window)
	}
	if s.Burstiness != 0 {
		if !(s.Burstiness > 0) || s.Burstiness > MaxBurstiness {
			return fmt.Errorf("burstiness %v: give a gamma shape above 0 and at most %d (1: Poisson arrivals; below 1 burstier)", s.Burstiness, MaxBurstiness)
		}
		if len(s.Rates) == 0 && !s.Sweep {
			return errors.New("burstiness shapes the arrivals of request-rate cells: give rates (--rate) or a sweep as well")
		}
	}
	if s.Sweep && len(s.Rates) > 0 {
		return errors.New("sweep and rate are both set: a sweep finds its rates itself (from one request at a time up to the engine's throughput)")
	}
	if err := s.PromptLengths.validate("prompt tokens", "prompt_tokens"); err != nil {
		return err
	}
	if err := s.OutputLengths.validate("output tokens", "output_tokens"); err != nil {
		return err
	}
	if s.Dataset != "" && !s.PromptLengths.IsZero() {
		return errors.New("a dataset's prompts have their own lengths: prompt length settings (range ratio, prompt_tokens_*) are for synthetic prompts")
	}
	return nil
}

// workloadKey reads one workload setting of a scenario file.
func workloadKey(sc *Scenario, key string, v *yaml.Node) error {
	var err error
	num := func() (float64, error) {
		t, err := scalar(v)
		if err != nil {
			return 0, err
		}
		f, perr := strconv.ParseFloat(strings.TrimSpace(t), 64)
		if perr != nil {
			return 0, fmt.Errorf("%q is not a number", t)
		}
		return f, nil
	}
	count := func() (int, error) {
		t, err := scalar(v)
		if err != nil {
			return 0, err
		}
		n, perr := strconv.Atoi(strings.TrimSpace(t))
		if perr != nil || n < 0 {
			return 0, fmt.Errorf("%q: give a whole number, 0 or more", t)
		}
		return n, nil
	}
	switch key {
	case "dataset":
		sc.Dataset, err = str(v)
	case "requests":
		sc.Requests, err = count()
	case "burstiness":
		sc.Burstiness, err = num()
	case "sweep":
		t, serr := scalar(v)
		if serr != nil {
			return serr
		}
		sc.Sweep, err = strconv.ParseBool(strings.TrimSpace(t))
		if err != nil {
			err = fmt.Errorf("%q: give true or false", t)
		}
	case "seed":
		var n int
		n, err = count()
		sc.Seed = int64(n)
	case "random_range_ratio":
		sc.PromptLengths.RangeRatio, err = num()
		sc.OutputLengths.RangeRatio = sc.PromptLengths.RangeRatio // as vLLM's: both
	case "prompt_tokens_stdev":
		sc.PromptLengths.Stdev, err = tokens(v)
	case "prompt_tokens_min":
		sc.PromptLengths.Min, err = tokens(v)
	case "prompt_tokens_max":
		sc.PromptLengths.Max, err = tokens(v)
	case "output_tokens_stdev":
		sc.OutputLengths.Stdev, err = tokens(v)
	case "output_tokens_min":
		sc.OutputLengths.Min, err = tokens(v)
	case "output_tokens_max":
		sc.OutputLengths.Max, err = tokens(v)
	default:
		err = fmt.Errorf("unknown setting %q", key)
	}
	return err
}
