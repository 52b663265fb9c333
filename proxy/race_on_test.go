//go:build race

package proxy

// raceSlowdown widens timing tolerances under the race detector, which
// slows every instrumented memory access several times.
const raceSlowdown = 10
