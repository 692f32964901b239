package filter

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/overloads"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/interpreter"

	"herald/internal/regexcost"
)

// Limits of a filter's regular expressions (`matches`). Go's matcher runs
// in time linear in the text times the size of the pattern's program, but
// CEL charges a match by the text's length alone, after it ran, and
// compiles a pattern afresh at each call: `data.s.matches("[ab]{0,1000}c")`
// over 16 KiB took 0.3 s within its cost limit, and an event of 256 KiB
// held the relay's round for seconds. So a pattern must be a string
// literal, its program is estimated before it is compiled (once, with the
// filter), and each match is charged to the evaluation's CEL cost before it
// runs: a byte of text times the pattern's estimated program size is a
// regex unit, and RegexUnitsPerCost of them are one cost unit. A match
// that would take the evaluation over CostLimit fails it (ReasonCost)
// without running, so an evaluation's regular expressions do at most
// CostLimit × RegexUnitsPerCost units, with the rest of its work in the same
// limit, and the relay counts them as work.
const (
	// MaxRegexProgram caps a pattern's estimated program size
	// (regexcost.Estimate: counted repetitions multiply what they repeat).
	MaxRegexProgram = 1000
	// RegexUnitsPerCost is how many regex units (a byte of text times the
	// pattern's estimated program size; one byte more per match) cost one
	// CEL cost unit: an evaluation's matches do at most 2,000,000, enough
	// for a simple pattern over a whole 256 KiB event. Go's matcher spent
	// 14-25 ns a unit on this machine (`[ab]{0,900}c` over 1 KiB,
	// `[ab]{0,1000}c` over 16 KiB, `[ab]{0,100}c` over 200 KiB; manifest's
	// patternUnitsPerStep assumes 40), so that is some 30-80 ms.
	RegexUnitsPerCost = 20
)

// errRegexBudget is an evaluation whose next match would take it over
// CostLimit; it fails as a cost error (ReasonCost).
var errRegexBudget = errors.New("a regular expression over the evaluation's cost limit")

// regexChargeOverload is the overload id under which a match's charge is
// recorded in the evaluation's cost tracker (regexCall.Exec).
const regexChargeOverload = "herald_regex_charge"

// regexCharge is the call a match's charge is recorded as: its one
// argument is the charge (chargeRegex).
type regexCharge struct{}

func (regexCharge) Function() string   { return "matches" }
func (regexCharge) OverloadID() string { return regexChargeOverload }

// chargeRegex is the cost of a regexCharge: its argument.
func chargeRegex(args []ref.Val, _ ref.Val) *uint64 {
	n, _ := args[0].(types.Int)
	c := uint64(max(n, 0))
	return &c
}

// refuseRegexes refuses a `matches` whose pattern is not a string literal,
// does not parse, or is estimated over MaxRegexProgram.
func refuseRegexes(a *cel.Ast) error {
	native := a.NativeRep()
	var err error
	celast.PostOrderVisit(native.Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		if err != nil || e.Kind() != celast.CallKind || e.AsCall().FunctionName() != overloads.Matches {
			return
		}
		loc := native.SourceInfo().GetStartLocation(e.ID())
		at := fmt.Sprintf("line %d, column %d", loc.Line(), loc.Column()+1)
		call := e.AsCall()
		args := call.Args()
		if call.IsMemberFunction() {
			args = append([]celast.Expr{call.Target()}, args...)
		}
		if len(args) != 2 || args[1].Kind() != celast.LiteralKind {
			err = fmt.Errorf("filter's matches at %s takes a pattern that is not a string literal: "+
				"a pattern read from the event could cost anything to compile and run, so it is refused", at)
			return
		}
		p, ok := args[1].AsLiteral().(types.String)
		if !ok {
			return // a type error the checker reported
		}
		if _, _, err = regexProgram(string(p)); err != nil {
			err = fmt.Errorf("filter's matches at %s: %w", at, err)
		}
	}))
	return err
}

// regexProgram compiles a pattern within MaxRegexProgram and gives its
// estimated program size.
func regexProgram(pattern string) (*regexp.Regexp, int64, error) {
	parsed, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil, 0, fmt.Errorf("pattern %q does not parse: %w", pattern, err)
	}
	size := regexcost.Estimate(parsed, MaxRegexProgram)
	if size > MaxRegexProgram {
		return nil, 0, fmt.Errorf("pattern %q is too complex: its program is estimated at more than %d "+
			"(counted repetitions such as {0,1000} multiply what they repeat)", pattern, MaxRegexProgram)
	}
	re, err := regexp.Compile(pattern)
	return re, int64(size), err
}

// budgetedMatches replaces each `matches` call with a literal pattern by a
// regexCall. A call whose pattern is not a literal (refused by Compile,
// left by compile's tests of other bounds) stays CEL's.
func budgetedMatches(i interpreter.InterpretableV2) (interpreter.InterpretableV2, error) {
	call, ok := i.(interpreter.InterpretableCall)
	if !ok || call.Function() != overloads.Matches || len(call.Args()) != 2 {
		return i, nil
	}
	c, ok := call.Args()[1].(interpreter.InterpretableConst)
	if !ok {
		return i, nil
	}
	p, ok := c.Value().(types.String)
	if !ok {
		return i, nil
	}
	re, size, err := regexProgram(string(p))
	if err != nil {
		return nil, fmt.Errorf("filter: %w", err)
	}
	return &regexCall{InterpretableCall: call, re: re, size: size}, nil
}

// regexCall is a `matches` call with a pattern compiled once, charged to
// the evaluation's cost before it runs.
type regexCall struct {
	interpreter.InterpretableCall
	re   *regexp.Regexp
	size int64
}

// Exec matches the text against the pattern when the evaluation's cost
// limit allows it, and fails the evaluation otherwise.
func (c *regexCall) Exec(frame *interpreter.ExecutionFrame) ref.Val {
	text := c.Args()[0].Exec(frame)
	s, ok := text.(types.String)
	if !ok {
		if types.IsUnknownOrError(text) {
			return text
		}
		return types.NoSuchOverloadErr()
	}
	units := (int64(len(s)) + 1) * c.size
	charge := units/RegexUnitsPerCost + 1
	t := frame.CostTracker()
	if t == nil {
		return types.WrapErr(fmt.Errorf("%w: evaluated with no cost limit", errRegexBudget))
	}
	if spent := t.ActualCost(); spent+uint64(charge) > CostLimit {
		return types.WrapErr(fmt.Errorf("%w: a match over %d bytes with a pattern of program size %d costs %d, "+
			"and %d of %d are spent", errRegexBudget, len(s), c.size, charge, spent, CostLimit))
	}
	result := types.Bool(c.re.MatchString(string(s)))
	t.EvalUnary(frame, c.ID(), regexCharge{}, types.Int(charge), result)
	return result
}

// Eval implements interpreter.Interpretable.
func (c *regexCall) Eval(vars interpreter.Activation) ref.Val {
	return interpreter.EvalActivation(vars, c.Exec)
}
