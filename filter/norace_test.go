//go:build !race

package filter

// slowdown is how much slower CEL runs under the race detector.
const slowdown = 1
