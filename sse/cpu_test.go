package sse

import (
	"syscall"
	"testing"
	"time"
)

// cpuTime is the CPU time this process has used. Benchmarks report CPU
// nanoseconds per op next to wall time, because the machines tokentap is
// built on are often shared: wall time per op then measures the neighbours,
// CPU time per op still measures the code.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds cpu-ns/op and cpu-events/s (one op = one event) metrics.
func reportCPU(b *testing.B, start time.Duration) {
	d := cpuTime() - start
	if d <= 0 || b.N == 0 {
		return
	}
	b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(b.N)/d.Seconds(), "cpu-events/s")
}
