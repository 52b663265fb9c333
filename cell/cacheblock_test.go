package cell

import "testing"

// An engine that caches whole blocks finds a fully cached prompt's whole
// blocks before its last token, no more: on vLLM's CPU build (blocks of
// 128, seen in the live tier) a 1,024-token prompt finds 896, 87.5%. The
// 95% rule alone called that a miss; with the block it is a hit, and less
// than those blocks is still a miss.
func TestCacheMissedWholeBlocks(t *testing.T) {
	for _, tc := range []struct {
		prompt, cached, block int
		missed                bool
	}{
		{1024, 896, 128, false},  // all it can: 7 blocks before the last token
		{1024, 768, 128, true},   // a block short
		{1024, 896, 0, true},     // block not known: the 95% rule
		{1024, 1008, 16, false},  // vLLM's GPU blocks: 98.4%
		{1024, 992, 16, false},   // 96.9%: the 95% rule passes it
		{1024, 960, 16, true},    // 93.75% and short of 1,008
		{2048, 1920, 128, false}, // 93.75%, all it can
		{2049, 2048, 128, false},
		{2049, 1920, 128, true}, // 93.7%, and short of the 2,048 it could find
		{100, 0, 128, false},    // less than a block: nothing cacheable
		{100, 0, 0, true},
	} {
		if got := CacheMissed(tc.prompt, tc.cached, tc.block); got != tc.missed {
			t.Errorf("CacheMissed(%d, %d, %d) = %v, want %v", tc.prompt, tc.cached, tc.block, got, tc.missed)
		}
	}
}
