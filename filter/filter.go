// Package filter holds subscription content filters: CEL expressions over a
// CloudEvent that decide whether an event is delivered to a subscription,
// such as `data.total > 1000 && subject.startsWith("eu-")`.
//
// An expression sees the event's attributes as variables: data (the event
// data, any JSON), subject, type, id, source, specversion, datacontenttype
// (strings), dataversion (int) and time (a timestamp). Extensions are in
// ext, a map of string to any value. It must yield a bool.
//
// One evaluation is bounded four ways (docs/design.md, "Content filters"):
// CEL's cost limit, with list concatenation charged by the size it adds;
// a wall-clock Deadline checked inside comprehensions; regular expressions
// charged to the same cost before each match runs (regex.go); and, at Compile,
// the refusal of what cannot be charged before it runs (a comparison of two
// values that may be lists or maps, a pattern that is not a literal or is
// too large) and of filters whose estimated cost is above CostLimit
// whatever the event.
package filter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/overloads"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/interpreter"

	"herald/internal/jsonvalue"
)

// Limits of one filter.
const (
	// MaxLength caps an expression's text.
	MaxLength = 2000
	// CostLimit caps the work of one evaluation (CEL cost units, about one
	// per operation), so a filter over a large event cannot hold the relay.
	CostLimit = 100_000
	// Deadline caps the wall time of one evaluation. CEL checks it every
	// interruptEvery comprehension iterations; everything between two
	// checks is bounded by the cost limit. A filter within the cost limit
	// takes well under a millisecond to a few milliseconds, so the deadline
	// only ends evaluations that something else failed to bound.
	Deadline = 100 * time.Millisecond
)

// interruptEvery is how many comprehension iterations CEL runs between two
// looks at the evaluation's deadline.
const interruptEvery = 4

// Filter is a compiled content filter; it is safe for concurrent use.
type Filter struct {
	text string
	prg  cel.Program
}

var env = func() *cel.Env {
	e, err := cel.NewEnv(
		cel.Variable("data", cel.DynType),
		cel.Variable("subject", cel.StringType),
		cel.Variable("type", cel.StringType),
		cel.Variable("id", cel.StringType),
		cel.Variable("source", cel.StringType),
		cel.Variable("specversion", cel.StringType),
		cel.Variable("datacontenttype", cel.StringType),
		cel.Variable("dataversion", cel.IntType),
		cel.Variable("time", cel.TimestampType),
		cel.Variable("ext", cel.MapType(cel.StringType, cel.DynType)),
	)
	if err != nil {
		panic(fmt.Sprintf("filter: CEL environment: %v", err)) // fixed declarations: a programming error
	}
	return e
}()

// Compile checks and compiles an expression. The error says what is wrong
// and where, for a manifest's author: a syntax or type error, a comparison
// whose cost cannot be bounded, or an estimated cost above CostLimit on an
// event with no items.
func Compile(text string) (*Filter, error) { return compile(text, true) }

// compile is Compile; with checks false it skips the refusals that only
// guard apply (the uncharged comparisons and the cost estimate), for tests
// of the run-time bounds alone.
func compile(text string, checks bool) (*Filter, error) {
	if text == "" {
		return nil, errors.New("empty filter")
	}
	if len(text) > MaxLength {
		return nil, fmt.Errorf("filter is %d characters long, at most %d", len(text), MaxLength)
	}
	ast, iss := env.Compile(text)
	if iss != nil && iss.Err() != nil {
		return nil, fmt.Errorf("filter does not compile: %v", iss.Err())
	}
	if t := ast.OutputType(); !t.IsExactType(types.BoolType) && !t.IsExactType(types.DynType) {
		return nil, fmt.Errorf("filter yields %s, want a bool", t)
	}
	if checks {
		if err := refuseExpensive(ast); err != nil {
			return nil, err
		}
		if err := refuseRegexes(ast); err != nil {
			return nil, err
		}
	}
	prg, err := env.Program(ast,
		cel.CostLimit(CostLimit),
		cel.CostTracking(dynamicCalls{}),
		cel.CostTrackerOptions(cost.OverloadTracker(overloads.AddList, chargeConcat),
			cost.OverloadTracker(regexChargeOverload, chargeRegex)),
		cel.InterruptCheckFrequency(interruptEvery),
		cel.CustomDecoratorV2(budgetedMatches))
	if err != nil {
		return nil, fmt.Errorf("filter: %w", err)
	}
	return &Filter{text: text, prg: prg}, nil
}

// chargeConcat charges a list concatenation the size of its smaller
// operand. CEL builds the result lazily in constant time and charges 1, so
// a list doubled in a loop grew without cost until a later pass over it
// (`in`, a comprehension) ran for hours; charged so, a list is never longer
// than the event's lists plus the cost already spent, while appending one
// item (how `map` and `filter` build their results) still costs 1.
func chargeConcat(args []ref.Val, _ ref.Val) *uint64 {
	n := uint64(1)
	if len(args) == 2 {
		a, aok := args[0].(traits.Sizer)
		b, bok := args[1].(traits.Sizer)
		if aok && bok {
			sa, _ := a.Size().(types.Int)
			sb, _ := b.Size().(types.Int)
			if m := min(sa, sb); m > 1 {
				n = uint64(m)
			}
		}
	}
	return &n
}

// units writes a cost for a person: 50,000,000 or 1.2e+12.
func units(n uint64) string {
	if n >= 1e12 {
		return fmt.Sprintf("%.1e", float64(n))
	}
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// String returns the expression.
func (f *Filter) String() string { return f.text }

// Match evaluates the filter against a CloudEvent in its JSON form, under
// Deadline. An evaluation error (a missing field, a wrong type, the cost
// limit, the deadline, an envelope that is not JSON) is returned with false
// as an *Error; the caller decides what it means (the relay delivers).
func (f *Filter) Match(ctx context.Context, envelope []byte) (bool, error) {
	vars, err := Variables(envelope)
	if err != nil {
		return false, &Error{Reason: ReasonEvent, Err: err}
	}
	return f.MatchVars(ctx, vars)
}

// MatchVars is Match over variables made by Variables, so an event read
// once can be matched against several filters, concurrently too.
func (f *Filter) MatchVars(ctx context.Context, vars map[string]any) (bool, error) {
	ok, _, err := f.MatchCost(ctx, vars)
	return ok, err
}

// MatchCost is MatchVars that also returns the CEL cost the evaluation
// spent, failed ones included: a caller that budgets time can tell a filter
// that worked from one that waited for a CPU.
func (f *Filter) MatchCost(ctx context.Context, vars map[string]any) (bool, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, Deadline)
	defer cancel()
	out, det, err := f.prg.ContextEval(ctx, vars)
	var spent uint64
	if det != nil {
		if c := det.ActualCost(); c != nil {
			spent = *c
		}
	}
	if err != nil {
		return false, spent, &Error{Reason: reason(err), Err: err}
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, spent, &Error{Reason: ReasonEval, Err: fmt.Errorf("yielded a %s, not a bool", out.Type().TypeName())}
	}
	return b, spent, nil
}

// Reasons of an evaluation error, as the relay logs, counts and audits them.
const (
	// ReasonEval: the expression failed on this event (a missing field, a
	// wrong type, a division by zero).
	ReasonEval = "eval_error"
	// ReasonCost: the evaluation reached CostLimit.
	ReasonCost = "cost_limit"
	// ReasonTimeout: the evaluation reached Deadline, or the relay's own
	// budget for the subscription in a round ran out before it started.
	ReasonTimeout = "timeout"
	// ReasonEvent: the event's envelope is not a JSON object.
	ReasonEvent = "bad_event"
	// ReasonRefused: the stored filter does not compile under this
	// version's rules (it was applied by an older Herald); it is not run.
	ReasonRefused = "refused"
)

// Error is a failed evaluation.
type Error struct {
	Reason string // one of the Reason constants
	Err    error
}

func (e *Error) Error() string { return fmt.Sprintf("filter %s: %v", e.Reason, e.Err) }

func (e *Error) Unwrap() error { return e.Err }

// ReasonOf returns the reason of an evaluation error: err's Reason when it
// is an *Error, ReasonEval otherwise.
func ReasonOf(err error) string {
	var fe *Error
	if errors.As(err, &fe) {
		return fe.Reason
	}
	return ReasonEval
}

func reason(err error) string {
	var cancelled interpreter.EvalCancelledError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, interpreter.InterruptError{}):
		return ReasonTimeout
	case errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded,
		errors.Is(err, errRegexBudget):
		return ReasonCost
	}
	return ReasonEval
}

// known are the CloudEvent attributes that are variables of their own.
var known = map[string]bool{"data": true, "subject": true, "type": true, "id": true, "source": true,
	"specversion": true, "datacontenttype": true, "dataversion": true, "time": true}

// Variables reads a CloudEvent's JSON into a filter's variables. The result
// is only read by evaluations, so several may share it.
func Variables(envelope []byte) (map[string]any, error) {
	doc, err := jsonvalue.Decode(envelope)
	if err != nil {
		return nil, fmt.Errorf("filter: event is not a JSON object: %w", err)
	}
	raw, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("filter: event is not a JSON object but %T", doc)
	}
	vars := map[string]any{"data": nil, "subject": "", "type": "", "id": "", "source": "",
		"specversion": "", "datacontenttype": "", "dataversion": int64(0), "time": time.Time{}}
	ext := map[string]any{}
	for k, v := range raw {
		if !known[k] {
			ext[k] = numbers(v)
			continue
		}
		switch k {
		case "data":
			vars[k] = numbers(v)
		case "dataversion":
			if n, ok := v.(json.Number); ok {
				if i, err := n.Int64(); err == nil {
					vars[k] = i
				}
			}
		case "time":
			if s, ok := v.(string); ok {
				if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
					vars[k] = t
				}
			}
		default:
			if s, ok := v.(string); ok {
				vars[k] = s
			}
		}
	}
	vars["ext"] = ext
	return vars, nil
}

// numbers turns JSON numbers into int64 where they are whole and fit, and
// float64 otherwise, so `data.total > 1000` compares as a CEL user expects.
func numbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		f, _ := v.Float64()
		return f
	case map[string]any:
		for k, e := range v {
			v[k] = numbers(e)
		}
		return v
	case []any:
		for i, e := range v {
			v[i] = numbers(e)
		}
		return v
	}
	return v
}
