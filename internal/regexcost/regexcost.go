// Package regexcost estimates what a regular expression costs before it is
// compiled: Go's regular expressions run in time linear in the text, times
// the size of their compiled program, and compiling a large counted
// repetition such as (?:a{1,1000}){1000} allocates that program whole.
package regexcost

import "regexp/syntax"

// Estimate is the estimated program size of re: repetitions multiply the
// size of what they repeat. It saturates just above limit, so a nested
// repetition cannot overflow it.
func Estimate(re *syntax.Regexp, limit int) int {
	cost := 1
	switch re.Op {
	case syntax.OpLiteral:
		cost = max(1, len(re.Rune))
	case syntax.OpRepeat:
		n := re.Max
		if n < 0 {
			n = re.Min + 1
		}
		cost = max(1, n) * Estimate(re.Sub[0], limit)
	default:
		for _, sub := range re.Sub {
			cost += Estimate(sub, limit)
		}
	}
	return min(cost, limit+1)
}
