//go:build !race

package relay_test

// slowdown is how much slower CEL and JSON decoding run under the race
// detector, for bounds on wall time.
const slowdown = 1
