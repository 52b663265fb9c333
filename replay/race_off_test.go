//go:build !race

package replay

const raceSlowdown = 1
