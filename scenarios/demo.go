package scenarios

import "time"

// Demo is the matrix `tokentap matrix` runs without --target, against the
// built-in fake engine: the seed matrix scaled down (contexts 0–16K,
// concurrency 1–16, 2 s windows, 512 output tokens) so it finishes in well
// under a minute and, on the demo's fake 12 GB GPU, shows every cell status.
func Demo() Scenario {
	return Scenario{
		Name:        "demo",
		Contexts:    []int{0, 1024, 2048, 4096, 8192, 16384},
		Concurrency: []int{1, 2, 4, 8, 16},
		Prefill:     []int{1024, 2048, 4096},
		Window:      2 * time.Second,
		MaxOutput:   512,
		API:         "chat",
	}
}
