package filter

import (
	"fmt"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/overloads"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

// refuseExpensive refuses what Compile refuses beyond syntax and types:
// the comparisons refuseUncharged names, and an estimated cost above
// CostLimit on an event with no items (emptyEvent).
func refuseExpensive(a *cel.Ast) error {
	if err := refuseUncharged(a); err != nil {
		return err
	}
	est, err := env.EstimateCost(a, emptyEvent{})
	if err != nil {
		return fmt.Errorf("filter: estimate its cost: %w", err)
	}
	if est.Max > CostLimit {
		return fmt.Errorf("filter is too costly: even on an event with no items it may take %s cost units, "+
			"and an evaluation stops at %s (comprehensions nested over literal lists, or lists built up in a loop)",
			units(est.Max), units(CostLimit))
	}
	return nil
}

// refuseUncharged refuses the comparisons CEL cannot charge before running
// them. CEL compares two lists or maps element by element, deeply, inside
// one operation that no deadline interrupts, and charges it by the top-level
// size afterwards; a list holding itself twice, nested in a loop
// (`[[l, l]].exists(l2, ...)`), doubles the work per level while its size
// stays 2, and a 1,000-character filter ran for days on an empty event. A
// comparison with one side of a scalar type (string, int, bool, timestamp,
// null, ...) ends at the first element, so `==` and `!=` need one scalar
// side, and `x in list` a scalar x or a list of scalars (or a map, whose
// keys are scalars).
func refuseUncharged(a *cel.Ast) error {
	native := a.NativeRep()
	var refused celast.Expr
	celast.PostOrderVisit(native.Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		if refused != nil || e.Kind() != celast.CallKind {
			return
		}
		call := e.AsCall()
		args := call.Args()
		if len(args) != 2 {
			return
		}
		l, r := native.GetType(args[0].ID()), native.GetType(args[1].ID())
		switch call.FunctionName() {
		case operators.Equals, operators.NotEquals:
			if !scalar(l) && !scalar(r) {
				refused = e
			}
		case operators.In:
			if !scalar(l) && !scalarList(r) {
				refused = e
			}
		}
	}))
	if refused == nil {
		return nil
	}
	loc := native.SourceInfo().GetStartLocation(refused.ID())
	op := map[string]string{operators.Equals: "==", operators.NotEquals: "!=", operators.In: "in"}[refused.AsCall().FunctionName()]
	return fmt.Errorf("filter compares two values that may be lists or maps (%q at line %d, column %d): "+
		"the cost of such a comparison cannot be bounded, so it is refused; compare a field with a constant "+
		"or a scalar (string(x), int(x)), or test `x in` a list of scalars", op, loc.Line(), loc.Column()+1)
}

// scalar reports whether values of type t compare in time bounded by their
// own size: every type but lists, maps, dyn and type parameters.
func scalar(t *types.Type) bool {
	if t == nil {
		return false
	}
	switch t.Kind() {
	case types.BoolKind, types.BytesKind, types.DoubleKind, types.DurationKind, types.IntKind,
		types.NullTypeKind, types.StringKind, types.TimestampKind, types.UintKind, types.TypeKind:
		return true
	}
	return false
}

// scalarList reports whether `x in` a value of type t compares x with
// scalars only: a list of scalars, or a map (keys are scalars).
func scalarList(t *types.Type) bool {
	if t == nil {
		return false
	}
	switch t.Kind() {
	case types.MapKind:
		return true
	case types.ListKind:
		return len(t.Parameters()) == 1 && scalar(t.Parameters()[0])
	}
	return false
}

// emptyEvent is the cost estimator's view of an event whose strings,
// lists and maps are all empty, so that an estimate counts only the work a
// filter does whatever the event: loops over its own literal lists and
// lists built up in a loop. Work that grows with the event is bounded at
// run time by CostLimit and Deadline instead: an estimate over a 256 KiB
// event cannot tell a pass over each line's own tags (bounded by the
// event's size in total) from a pass over all lines for each line, and
// would refuse ordinary nested filters with the quadratic ones.
type emptyEvent struct{}

func (emptyEvent) EstimateSize(n cost.AstNode) *cost.SizeEstimate {
	if len(n.Path()) == 0 {
		return nil
	}
	return &cost.SizeEstimate{Min: 0, Max: 0}
}

func (emptyEvent) EstimateCallCost(string, string, *cost.AstNode, []cost.AstNode) *cost.CallEstimate {
	return nil
}

// dynamicCalls charges the calls CEL dispatches at run time. A call on a
// dyn value (anything read from data or ext) may match several overloads;
// CEL then plans it without an overload id and its standard cost model
// charges 1 whatever the sizes, so `s + s` on strings of the event doubled
// a string per loop level for the price of one step. Such a call is
// charged like its typed overload: the items of the lists it is given (a
// concatenation, `in`) and a tenth of the characters of its strings and
// bytes, result included; `size` stays 1.
type dynamicCalls struct{}

func (dynamicCalls) CallCost(function, overloadID string, args []ref.Val, result ref.Val) *uint64 {
	if overloadID != "" || function == overloads.Size {
		return nil // the standard model, or chargeConcat
	}
	n := uint64(1)
	for _, v := range append(args, result) {
		switch v := v.(type) {
		case types.String:
			n += uint64(len(v)) / 10
		case types.Bytes:
			n += uint64(len(v)) / 10
		case traits.Lister:
			if s, ok := v.Size().(types.Int); ok && s > 0 {
				n += uint64(s)
			}
		}
	}
	return &n
}
