package prompts

import (
	"context"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the user+system CPU time this process has used: on a shared
// machine it says what building cost better than wall time does.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkBuild128x248K builds the 128 prompts of a 248K row (one per
// slot, chat), each within tolerance: the target is under 5 s for all
// 128. Counting goes through a local tokenizer (the fake engine's rule,
// fixtures.Tokenize, scanning the whole text on every count), not HTTP, so
// the figure is tokentap's own cost; an engine's /tokenize adds its own
// time per count (1–2 counts per prompt after the builder's calibration).
// One op = 128 prompts. Each prompt is dropped once built, as the matrix
// keeps only one prompt per slot.
func BenchmarkBuild128x248K(b *testing.B) {
	const slots, target = 128, 253952
	ctx := context.Background()
	var bytes, counts int64
	cpu0 := cpuTime()
	for b.Loop() {
		bld := NewBuilder(NewSalt(), CounterFunc(fakeCount))
		for slot := 0; slot < slots; slot++ {
			p, err := bld.Prompt(ctx, target, slot)
			if err != nil {
				b.Fatal(err)
			}
			if d := p.Tokens - target; d > Tolerance(target) || -d > Tolerance(target) {
				b.Fatalf("%d tokens", p.Tokens)
			}
			bytes += int64(len(p.Text))
			counts += int64(p.Counts)
		}
	}
	b.ReportMetric((cpuTime()-cpu0).Seconds()/float64(b.N), "cpu-s/op")
	b.ReportMetric(float64(bytes)/float64(b.N)/1e6, "MB-text/op")
	b.ReportMetric(float64(counts)/float64(b.N)/slots, "counts/prompt")
}

// BenchmarkPrompts128x248K is the same row built with Prompts, on
// GOMAXPROCS goroutines, all 128 prompts held at the end (as a row needs).
func BenchmarkPrompts128x248K(b *testing.B) {
	const slots, target = 128, 253952
	ctx := context.Background()
	cpu0 := cpuTime()
	for b.Loop() {
		ps, err := NewBuilder(NewSalt(), CounterFunc(fakeCount)).Prompts(ctx, target, slots)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range ps {
			if d := p.Tokens - target; d > Tolerance(target) || -d > Tolerance(target) {
				b.Fatalf("%d tokens", p.Tokens)
			}
		}
	}
	b.ReportMetric((cpuTime()-cpu0).Seconds()/float64(b.N), "cpu-s/op")
}

// BenchmarkBuild248K is one 248K prompt with the BPE-like counter, and the
// heap it holds once built, per byte of text: one copy is 1.0.
func BenchmarkBuild248K(b *testing.B) {
	ctx := context.Background()
	bld := NewBuilder("bench", CounterFunc(merging))
	if _, err := bld.Prompt(ctx, 1000, 0); err != nil { // calibrate outside the loop
		b.Fatal(err)
	}
	var held float64
	var ms0, ms1 runtime.MemStats
	for b.Loop() {
		runtime.GC()
		runtime.ReadMemStats(&ms0)
		p, err := bld.Prompt(ctx, 253952, 1)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&ms1)
		held = float64(int64(ms1.HeapAlloc)-int64(ms0.HeapAlloc)) / float64(len(p.Text))
		runtime.KeepAlive(p)
	}
	b.ReportMetric(float64(held), "heap-held/text-bytes")
}
