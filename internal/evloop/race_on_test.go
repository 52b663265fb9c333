//go:build race

package evloop

// raceSlowdown widens wall-clock bounds under the race detector, which
// slows every instrumented memory access several times.
const raceSlowdown = 3
