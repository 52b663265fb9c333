// Package benchcpu reports CPU time per operation in benchmarks and pins
// benchmark processes to CPUs. The machines tokentap is built and measured
// on are often shared: wall time per op then measures the neighbours, CPU
// time per op still measures the code.
package benchcpu

import (
	"testing"
	"time"
)

// Report adds cpu-ns/op and cpu-events/s (one op = one event) to b, from
// the CPU time used since start (a value of Now taken before the loop).
func Report(b *testing.B, start time.Duration) {
	d := Now() - start
	if d <= 0 || b.N == 0 {
		return
	}
	b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(b.N)/d.Seconds(), "cpu-events/s")
}
