//go:build !race

package evloop

const raceSlowdown = 1
