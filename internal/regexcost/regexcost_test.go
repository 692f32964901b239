package regexcost

import (
	"regexp/syntax"
	"strings"
	"testing"
)

const limit = 50_000

func TestEstimate(t *testing.T) {
	tests := []struct {
		pattern  string
		min, max int
	}{
		{`^[A-Z]{3}$`, 3, 10},
		{`abc`, 3, 5},
		{`^(a|b)*c$`, 3, 10},
		{`c{1,1000}`, 1000, 1001},
		{`(ab){2,10}`, 20, 40},
		{`c{5,}`, 6, 8},
		{`a{1000}b{1000}c{1000}a{1000}b{1000}c{1000}` + strings.Repeat(`d{1000}`, 50), limit + 1, limit + 1}, // saturates
	}
	for _, tt := range tests {
		re, err := syntax.Parse(tt.pattern, syntax.Perl)
		if err != nil {
			t.Fatalf("%q: %v", tt.pattern, err)
		}
		if got := Estimate(re, limit); got < tt.min || got > tt.max {
			t.Errorf("Estimate(%q) = %d, want %d..%d", tt.pattern, got, tt.min, tt.max)
		}
	}
}
