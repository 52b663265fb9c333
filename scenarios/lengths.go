package scenarios

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Lengths is how a synthetic request's prompt or output length spreads
// around its mean (the row's context; --max-output), named as the peers
// name it. The zero value is a constant: every request the mean.
//
//   - RangeRatio r (vllm bench serve --random-range-ratio, RandomDataset in
//     vllm/benchmarks/datasets.py): uniform over the whole numbers in
//     [⌊L·(1−r)⌋, ⌈L·(1+r)⌉], 0 ≤ r < 1.
//   - Stdev σ (GuideLLM's prompt_tokens_stdev / output_tokens_stdev, its
//     IntegerRangeSampler): normal with mean L and deviation σ, rounded and
//     held within [Min, Max] (unset: L − 5σ, at least 1, and L + 5σ).
//   - Min and Max without Stdev (GuideLLM: no variance, a range): uniform
//     over the whole numbers in [Min, Max].
//
// Min and Max are token counts, the same for every row: each row's mean
// must lie within them.
type Lengths struct {
	Stdev, Min, Max int
	RangeRatio      float64
}

// Varies reports whether lengths are drawn (not every request the mean).
func (l Lengths) Varies() bool { return l != Lengths{} }

// Bounds are the least and most a draw around mean can be.
func (l Lengths) Bounds(mean int) (lo, hi int) {
	switch {
	case l.RangeRatio > 0:
		return int(math.Floor(float64(mean) * (1 - l.RangeRatio))), int(math.Ceil(float64(mean) * (1 + l.RangeRatio)))
	case l.Stdev > 0 || l.Min > 0 || l.Max > 0:
		lo, hi = l.Min, l.Max
		if lo == 0 {
			lo = max(1, mean-5*l.Stdev)
		}
		if hi == 0 {
			hi = mean + 5*l.Stdev
		}
		return lo, hi
	}
	return mean, mean
}

// Draw is the length of the request whose key is key (the run's seed, the
// row and the request's slot, hashed: the same key, the same length, in
// every shard), around mean.
func (l Lengths) Draw(mean int, key uint64) int {
	lo, hi := l.Bounds(mean)
	if lo >= hi {
		return lo
	}
	rng := rand.New(rand.NewPCG(key, key^0x2545f4914f6cdd1d))
	if l.Stdev > 0 {
		v := int(math.Round(float64(mean) + float64(l.Stdev)*rng.NormFloat64()))
		return min(max(v, lo), hi)
	}
	return lo + rng.IntN(hi-lo+1)
}

// String says the spread as a report shows it, around "mean".
func (l Lengths) String() string {
	switch {
	case l.RangeRatio > 0:
		return "uniform within ±" + strconv.FormatFloat(l.RangeRatio*100, 'g', 4, 64) + "% of the mean (--random-range-ratio " + strconv.FormatFloat(l.RangeRatio, 'g', -1, 64) + ")"
	case l.Stdev > 0:
		s := "normal, deviation " + strconv.Itoa(l.Stdev)
		if l.Min > 0 || l.Max > 0 {
			lo, hi := "mean − 5σ", "mean + 5σ"
			if l.Min > 0 {
				lo = strconv.Itoa(l.Min)
			}
			if l.Max > 0 {
				hi = strconv.Itoa(l.Max)
			}
			s += ", held within " + lo + " … " + hi
		}
		return s
	case l.Varies():
		return "uniform within " + strconv.Itoa(l.Min) + " … " + strconv.Itoa(l.Max)
	}
	return "constant"
}

// check says what is wrong with l as the spread of what (e.g. "prompt
// tokens") around each of means.
func (l Lengths) check(what string, means []int) error {
	if l.RangeRatio != 0 {
		if !(l.RangeRatio > 0 && l.RangeRatio < 1) {
			return fmt.Errorf("random_range_ratio %v: give a ratio from 0 up to, not including, 1 (0.25: each length uniform within ±25%% of its mean)", l.RangeRatio)
		}
		if l.Stdev != 0 || l.Min != 0 || l.Max != 0 {
			return fmt.Errorf("%s: random_range_ratio and a deviation, min or max are both set: give one spread (vLLM's ratio or GuideLLM's deviation and bounds)", what)
		}
		return nil
	}
	if l.Stdev < 0 || l.Min < 0 || l.Max < 0 {
		return fmt.Errorf("%s: a negative deviation, min or max (%d, %d, %d)", what, l.Stdev, l.Min, l.Max)
	}
	if l.Max > 0 && l.Min > l.Max {
		return fmt.Errorf("%s: min %d is above max %d", what, l.Min, l.Max)
	}
	if l.Stdev == 0 && (l.Min > 0) != (l.Max > 0) {
		return fmt.Errorf("%s: without a deviation, min and max give a uniform range: give both", what)
	}
	if !l.Varies() {
		return nil
	}
	for _, m := range means {
		if lo, hi := l.Bounds(m); m < lo || m > hi {
			return fmt.Errorf("%s: the mean %d is outside min %d … max %d: give bounds around every mean (each context row; --max-output)", what, m, lo, hi)
		}
	}
	return nil
}

// validateLengths checks the length spreads of s.
func (s Scenario) validateLengths() error {
	if !s.PromptLengths.Varies() && !s.OutputLengths.Varies() {
		return nil
	}
	if s.Dataset != "" {
		return errors.New("a dataset's requests have their own lengths: length spreads (prompt_tokens_*, output_tokens_*, random_range_ratio) are for synthetic prompts")
	}
	var rows []int
	for _, c := range s.Contexts {
		if c > 0 {
			rows = append(rows, c) // context 0 is a minimal prompt, not spread
		}
	}
	if err := s.PromptLengths.check("prompt tokens", rows); err != nil {
		return err
	}
	return s.OutputLengths.check("output tokens", []int{s.MaxOutput})
}

// lengthKey reads one length-spread setting of a scenario file.
func lengthKey(sc *Scenario, key string, v *yaml.Node) error {
	val, err := scalar(v)
	if err != nil {
		return err
	}
	count := func(p *int) error {
		n, perr := ParseTokens(val)
		if perr != nil {
			return perr
		}
		*p = n
		return nil
	}
	switch key {
	case "prompt_tokens_stdev":
		return count(&sc.PromptLengths.Stdev)
	case "prompt_tokens_min":
		return count(&sc.PromptLengths.Min)
	case "prompt_tokens_max":
		return count(&sc.PromptLengths.Max)
	case "output_tokens_stdev":
		return count(&sc.OutputLengths.Stdev)
	case "output_tokens_min":
		return count(&sc.OutputLengths.Min)
	case "output_tokens_max":
		return count(&sc.OutputLengths.Max)
	case "random_range_ratio":
		r, perr := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if perr != nil {
			return fmt.Errorf("%q is not a number", val)
		}
		sc.PromptLengths.RangeRatio, sc.OutputLengths.RangeRatio = r, r
		return nil
	}
	return fmt.Errorf("unknown setting %q", key)
}
