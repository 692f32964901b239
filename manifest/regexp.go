package manifest

import (
	"fmt"
	"regexp"
	"regexp/syntax"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// maxRegexpCost bounds the regular expressions ("pattern",
// "patternProperties") of one dataSchema, in estimated program size. Go's
// regular expressions run in linear time, but compiling a large counted
// repetition such as c{1,1000} costs about a millisecond, so without a bound a
// 64 KiB schema full of them would take seconds to compile.
const maxRegexpCost = 50_000

// budgetedRegexp returns a regular expression engine for one schema
// compilation that refuses expressions once their total cost exceeds
// maxRegexpCost.
func budgetedRegexp() jsonschema.RegexpEngine {
	spent := 0
	tooComplex := fmt.Errorf("the schema's regular expressions are too complex (counted repetitions such as {1,1000} add up to more than %d)", maxRegexpCost)
	return func(s string) (jsonschema.Regexp, error) {
		if spent > maxRegexpCost {
			return nil, tooComplex
		}
		re, err := syntax.Parse(s, syntax.Perl)
		if err != nil {
			return nil, err
		}
		spent += regexpCost(re)
		if spent > maxRegexpCost {
			return nil, tooComplex
		}
		return regexp.Compile(s)
	}
}

// regexpCost estimates the compiled size of re: repetitions multiply the size
// of what they repeat. The result saturates just above maxRegexpCost.
func regexpCost(re *syntax.Regexp) int {
	cost := 1
	switch re.Op {
	case syntax.OpLiteral:
		cost = max(1, len(re.Rune))
	case syntax.OpRepeat:
		n := re.Max
		if n < 0 {
			n = re.Min + 1
		}
		cost = max(1, n) * regexpCost(re.Sub[0])
	default:
		for _, sub := range re.Sub {
			cost += regexpCost(sub)
		}
	}
	return min(cost, maxRegexpCost+1)
}
