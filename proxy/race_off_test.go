//go:build !race

package proxy

// raceSlowdown widens timing tolerances under the race detector.
const raceSlowdown = 1
