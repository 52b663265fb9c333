package scenarios

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Workload settings beyond the grid of contexts × columns (issue
// "workloads as users bring them"): a dataset of the user's prompts, a
// request count, bursty arrivals, and a sweep. They are Scenario fields;
// this file holds their parsing and checks.

// SweepSize is how many cells a sweep measures per context row, as
// GuideLLM's sweep profile by default (sweep_size 10): one request at a
// time, the engine's throughput, then eight rates spread between them.
const SweepSize = 10

// MaxBurstiness is the largest burstiness taken; more is taken for a typo
// (gaps' coefficient of variation 1/√B: B = 100 is already all but
// evenly spaced).
const MaxBurstiness = 1000

// MinBurstiness is the smallest burstiness taken (gaps' coefficient of
// variation 10): the gamma draws of a smaller shape underflow to 0 (a
// draw for shape B < 1 is a draw for B + 1 times U^(1/B)), and with every
// gap 0 a schedule has no times at all.
const MinBurstiness = 0.01

// validateWorkload checks the workload settings of s.
func (s Scenario) validateWorkload() error {
	if s.Requests < 0 {
		return fmt.Errorf("requests %d: give 0 (the window alone ends a cell) or a positive count", s.Requests)
	}
	if s.Window <= 0 && s.Requests == 0 {
		return fmt.Errorf("window %v: give a positive duration such as 30s, or a request count (requests)", s.Window)
	}
	if s.Burstiness != 0 {
		if !(s.Burstiness >= MinBurstiness) || s.Burstiness > MaxBurstiness {
			return fmt.Errorf("burstiness %v: give a gamma shape from %g to %d (1: Poisson arrivals; below 1 burstier)", s.Burstiness, MinBurstiness, MaxBurstiness)
		}
		if len(s.Rates) == 0 && !s.Sweep {
			return errors.New("burstiness shapes the arrivals of request-rate cells: give rates (--rate) or a sweep as well")
		}
	}
	if s.Sweep && len(s.Rates) > 0 {
		return errors.New("sweep and rate are both set: a sweep finds its rates itself (from one request at a time up to the engine's throughput)")
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
		if t, serr := scalar(v); serr == nil && KShorthand(t) {
			return fmt.Errorf("%q: %s", t, RequestsInFull)
		}
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
	default:
		err = fmt.Errorf("unknown setting %q", key)
	}
	return err
}

// RequestsInFull is what a request count written as "1k" is told: a k is
// 1,024 in token counts (--contexts 16k) and 1,000 to most people counting
// requests, so it is no guess either way.
const RequestsInFull = "write the count in full (such as 1000): a k means 1,024 in token counts and would be a guess for requests"

// KShorthand reports whether s is a whole number of at least 1 with a k
// after it ("1k", "16K"): a token count's shorthand.
func KShorthand(s string) bool {
	t := strings.TrimSpace(s)
	if len(t) < 2 || (t[len(t)-1] != 'k' && t[len(t)-1] != 'K') {
		return false
	}
	n, err := strconv.Atoi(t[:len(t)-1])
	return err == nil && n >= 1
}
