package manifest

import (
	"fmt"
	"regexp"
	"regexp/syntax"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"herald/internal/regexcost"
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
		spent += regexcost.Estimate(re, maxRegexpCost)
		if spent > maxRegexpCost {
			return nil, tooComplex
		}
		return regexp.Compile(s)
	}
}
