package manifest

import (
	"errors"
	"fmt"
	"math"
	"regexp/syntax"
	"sync"
	"sync/atomic"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"herald/internal/regexcost"
)

// The validation budget (docs/design.md#publishing). The compile budget
// bounds one pass over a schema, not the validation of one event: a schema
// under a kilobyte can apply thousands of subschemas to each item of an
// array, or double its checks at each level of nested data, and the
// validator has no way to be stopped once started. So the work is counted
// before validating, by a pass over the data that charges what the validator
// may do at most, and data over budget is refused without being validated.
const (
	// MaxValidationSteps bounds the validation of one event: one step is one
	// subschema applied to one value of the data, plus the work of keywords
	// that grow with the value (enum, uniqueItems, pattern, ...).
	MaxValidationSteps = 500_000
	// MaxRequestValidationSteps bounds the validation of all the events of
	// one request (a POST /v1/events batch, one PublishTx call, one batch of
	// an NDJSON stream).
	MaxRequestValidationSteps = 2_000_000
)

// ErrValidationBudget marks data refused because validating it would take
// more steps than the event's or the request's budget allows.
var ErrValidationBudget = errors.New("validation budget exceeded")

// budgetError says which budget data exceeds; it matches ErrValidationBudget.
type budgetError string

func (e budgetError) Error() string        { return string(e) }
func (e budgetError) Is(target error) bool { return target == ErrValidationBudget }

// Budget is what the validation of the events of one request may still
// spend, in steps. It is not safe for concurrent use.
type Budget struct {
	size, left int64
}

// NewBudget returns a request budget of steps.
func NewBudget(steps int64) *Budget { return &Budget{size: steps, left: steps} }

// Left returns the steps left.
func (b *Budget) Left() int64 { return b.left }

// weighted is a schema applied n times to the same value.
type weighted struct {
	s *jsonschema.Schema
	n int64
}

// costWalk bounds the work of validating one document against one schema.
// It follows the data, carrying for each value the schemas applied to it and
// how many times, so a schema applied 2^40 times is one entry, not 2^40. It
// never counts less than the validator does: every branch of anyOf, oneOf,
// if/then/else counts as taken, every patternProperties and
// unevaluatedProperties schema as applied. Its own work is at most a small
// multiple of what it counts, so it stops early on data over budget.
type costWalk struct {
	root     *jsonschema.Schema
	limit    int64
	total    int64
	closures map[*jsonschema.Schema][]weighted
	// anchors lists, once a dynamic or recursive reference is met, the
	// schemas it may resolve to at run time besides its static target.
	anchors   map[string][]*jsonschema.Schema
	recursive []*jsonschema.Schema
	stack     []weighted
}

// validationSteps returns the bound on the steps of validating doc against
// sch, or a number over limit when it exceeds limit (counting stops there).
func validationSteps(sch *jsonschema.Schema, doc any, limit int64) int64 {
	w := costWalk{root: sch, limit: limit, stack: make([]weighted, 0, 64)}
	w.walk([]weighted{{sch, 1}}, doc, 0)
	return w.total
}

func (w *costWalk) over() bool { return w.total > w.limit }

// charge adds n steps, saturating just over the limit.
func (w *costWalk) charge(n int64) {
	w.total = min(sat(w.total+n), w.limit+1)
}

// sat keeps a sum of non-negative numbers that overflowed non-negative.
func sat(n int64) int64 {
	if n < 0 {
		return math.MaxInt64
	}
	return n
}

// mul multiplies non-negative numbers, saturating at math.MaxInt64.
func mul(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}

// walk charges the schemas in entries applied to v, then walks v's members
// with the schemas that apply to each. The lists of schemas live on
// w.stack, one region per level of the walk, so walking allocates nothing.
func (w *costWalk) walk(entries []weighted, v any, depth int) {
	base := len(w.stack)
	// Every schema that reaches v (through $ref, allOf, anyOf, ...) is
	// charged; those that apply schemas to v's members are kept.
	for _, e := range entries {
		if !hasInPlace(e.s) {
			w.apply(e.s, e.n, v, depth) // its closure is itself
			continue
		}
		closure := w.closure(e.s)
		visits, tracks := int64(0), false
		for _, c := range closure {
			w.apply(c.s, mul(e.n, c.n), v, depth)
			visits = sat(visits + c.n)
			tracks = tracks || c.s.UnevaluatedProperties != nil || c.s.UnevaluatedItems != nil
		}
		if tracks {
			// Under unevaluatedProperties or unevaluatedItems, each
			// schema applied in place copies and merges the set of v's
			// members not evaluated yet.
			w.charge(mul(mul(e.n, visits), members(v)))
		}
	}
	applied := w.stack[base:]
	if len(applied) > 0 && !w.over() {
		w.members(applied, v, depth)
	}
	w.stack = w.stack[:base]
}

// members walks v's members, or its items, with the schemas applied (to v)
// lead to each.
func (w *costWalk) members(applied []weighted, v any, depth int) {
	switch v := v.(type) {
	case map[string]any:
		for k, member := range v {
			start := len(w.stack)
			for _, a := range applied {
				if a.s.PropertyNames != nil {
					w.stack = append(w.stack, weighted{a.s.PropertyNames, a.n})
					w.walk(w.stack[len(w.stack)-1:], k, depth+1)
					w.stack = w.stack[:start]
				}
			}
			// Matching the name against patterns is charged first: it
			// is the walk's own cost too.
			for _, a := range applied {
				for re := range a.s.PatternProperties {
					w.charge(mul(a.n, patternSteps(re, len(k))))
				}
			}
			if w.over() {
				return
			}
			for _, a := range applied {
				w.addMemberSchemas(start, a, k)
			}
			if len(w.stack) > start {
				w.walk(w.stack[start:], member, depth+1)
			}
			w.stack = w.stack[:start]
			if w.over() {
				return
			}
		}
	case []any:
		for i, item := range v {
			start := len(w.stack)
			for _, a := range applied {
				w.addItemSchemas(start, a, i)
			}
			if len(w.stack) > start {
				w.walk(w.stack[start:], item, depth+1)
			}
			w.stack = w.stack[:start]
			if w.over() {
				return
			}
		}
	}
}

// apply charges n applications of s to v, at depth in the data, and keeps s
// on the stack when it applies schemas to v's members.
func (w *costWalk) apply(s *jsonschema.Schema, n int64, v any, depth int) {
	w.charge(mul(n, keywordCost(s, v, depth)))
	if hasMemberSchemas(s) {
		w.stack = append(w.stack, weighted{s, n})
	}
}

// keywordCost is the steps of applying s once to v at depth in the data:
// one, plus what grows with v, its depth or the keyword's own size.
func keywordCost(s *jsonschema.Schema, v any, depth int) int64 {
	// An error copies the value's location, and the dynamic scope is
	// walked up to the root: deep data costs more per check (each error at
	// a depth of 9,000 levels made 18 KB of data take 9 s).
	c := 1 + int64(depth/depthStep)
	if s.Enum != nil {
		c += int64(len(s.Enum.Values))
		// A failure's message lists the values.
		for _, e := range s.Enum.Values {
			c += literalSteps(e)
		}
	}
	if s.Const != nil {
		c += literalSteps(*s.Const) // a failure's message shows it
	}
	if s.Enum != nil || s.Const != nil {
		// Comparing a container may walk it whole.
		switch v.(type) {
		case map[string]any, []any:
			c += nodes(v)
		}
	}
	switch v := v.(type) {
	case string:
		if s.Format != nil || s.MinLength != nil || s.MaxLength != nil {
			c += int64(len(v)/64) + 1
		}
		if s.Pattern != nil {
			// The match, and the expression in a failure's message.
			c += patternSteps(s.Pattern, len(v)) + literalSteps(s.Pattern.String())
		}
	case map[string]any:
		// Names matched against patternProperties are charged by the
		// walk, name by name.
		c += int64(len(s.Required) + len(s.DependentRequired))
		for _, name := range s.Required {
			c += literalSteps(name) // a failure's message names them
		}
		if s.UnevaluatedProperties != nil {
			c += int64(len(v)) // the set of members not evaluated yet
		}
	case []any:
		if s.UnevaluatedItems != nil {
			c += int64(len(v)) // the set of items not evaluated yet
		}
		if s.UniqueItems {
			// Items are hashed whole, then compared on a hash match.
			c += 2 * nodes(v)
		}
	}
	return c
}

// patternUnitsPerStep converts the work of a regular expression match
// (input bytes times the program's estimated size, regexcost.Estimate) to steps:
// Go's linear-time matcher took 4 s for 100,000 bytes against
// [a-z]{0,1000}x, some 40 ns a unit, and a step is about a microsecond.
const patternUnitsPerStep = 32

// patternSteps is the steps of matching re against n bytes.
func patternSteps(re jsonschema.Regexp, n int) int64 {
	return 1 + mul(int64(n), int64(regexpCostOf(re)))/patternUnitsPerStep
}

// regexpCosts remembers regexcost.Estimate by expression, up to maxCachedCosts
// expressions: the schemas' patterns are few and recompiled often.
var (
	regexpCosts     sync.Map // string → int
	regexpCostsSize atomic.Int64
)

const maxCachedCosts = 10_000

// regexpCostOf is regexcost.Estimate of a compiled expression; one it cannot parse
// again costs the most any expression may.
func regexpCostOf(re jsonschema.Regexp) int {
	src := re.String()
	if c, ok := regexpCosts.Load(src); ok {
		return c.(int)
	}
	c := maxRegexpCost
	if p, err := syntax.Parse(src, syntax.Perl); err == nil {
		c = regexcost.Estimate(p, maxRegexpCost)
	}
	if regexpCostsSize.Load() < maxCachedCosts {
		if _, loaded := regexpCosts.LoadOrStore(src, c); !loaded {
			regexpCostsSize.Add(1)
		}
	}
	return c
}

// depthStep is the depth in the data that adds one step to each check.
const depthStep = 8

// literalSteps is the steps of writing a schema's literal into an error
// message: 20,000 items failing a const of 6,000 characters took 0.9 s and
// 120 MB of messages.
func literalSteps(v any) int64 {
	if s, ok := v.(string); ok {
		return int64(len(s) / 64)
	}
	return 0
}

// members counts the members of an object or the items of an array.
func members(v any) int64 {
	switch v := v.(type) {
	case map[string]any:
		return int64(len(v))
	case []any:
		return int64(len(v))
	}
	return 0
}

// nodes counts the values in v, v included.
func nodes(v any) int64 {
	n := int64(1)
	switch v := v.(type) {
	case map[string]any:
		for _, m := range v {
			n += nodes(m)
		}
	case []any:
		for _, m := range v {
			n += nodes(m)
		}
	}
	return n
}

// hasMemberSchemas reports whether s applies schemas to an object's members
// or an array's items.
func hasMemberSchemas(s *jsonschema.Schema) bool {
	return s.PropertyNames != nil || len(s.Properties) > 0 || len(s.PatternProperties) > 0 ||
		s.AdditionalProperties != nil || s.UnevaluatedProperties != nil ||
		s.Contains != nil || s.Items2020 != nil || len(s.PrefixItems) > 0 || s.Items != nil ||
		s.AdditionalItems != nil || s.UnevaluatedItems != nil
}

// addMemberSchemas adds to the stack's region from start the schemas a
// applies to its member named k.
func (w *costWalk) addMemberSchemas(start int, a weighted, k string) {
	s := a.s
	matched := false
	if p, ok := s.Properties[k]; ok {
		w.add(start, p, a.n)
		matched = true
	}
	if len(s.PatternProperties) > 0 {
		for re, p := range s.PatternProperties {
			if re.MatchString(k) {
				w.add(start, p, a.n)
				matched = true
			}
		}
	}
	if p, ok := s.AdditionalProperties.(*jsonschema.Schema); ok && !matched {
		w.add(start, p, a.n)
	}
	if s.UnevaluatedProperties != nil {
		w.add(start, s.UnevaluatedProperties, a.n)
	}
}

// addItemSchemas adds to the stack's region from start the schemas a
// applies to its item at index i.
func (w *costWalk) addItemSchemas(start int, a weighted, i int) {
	s := a.s
	if i < len(s.PrefixItems) {
		w.add(start, s.PrefixItems[i], a.n)
	} else if s.Items2020 != nil {
		w.add(start, s.Items2020, a.n)
	}
	switch items := s.Items.(type) {
	case *jsonschema.Schema:
		w.add(start, items, a.n)
	case []*jsonschema.Schema:
		if i < len(items) {
			w.add(start, items[i], a.n)
		} else if p, ok := s.AdditionalItems.(*jsonschema.Schema); ok {
			w.add(start, p, a.n)
		}
	}
	if s.Contains != nil {
		w.add(start, s.Contains, a.n)
	}
	if s.UnevaluatedItems != nil {
		w.add(start, s.UnevaluatedItems, a.n)
	}
}

// add adds n applications of s to the stack's region from start, merging
// with an entry of s there.
func (w *costWalk) add(start int, s *jsonschema.Schema, n int64) {
	for i := start; i < len(w.stack); i++ {
		if w.stack[i].s == s {
			w.stack[i].n = sat(w.stack[i].n + n)
			return
		}
	}
	w.stack = append(w.stack, weighted{s, n})
}

// closure returns every schema applied to a value when s is, without
// descending into the value: s itself and, transitively, what its $ref,
// $dynamicRef, allOf, anyOf, oneOf, not, if, then, else and dependentSchemas
// name, each with the number of paths leading to it. A reference back to a
// schema already on the path is not followed: the validator stops there
// with a reference-cycle error.
func (w *costWalk) closure(s *jsonschema.Schema) []weighted {
	if c, ok := w.closures[s]; ok {
		return c
	}
	if w.closures == nil {
		w.closures = map[*jsonschema.Schema][]weighted{}
	}
	counts := map[*jsonschema.Schema]int64{}
	var order []*jsonschema.Schema
	onPath := map[*jsonschema.Schema]bool{}
	paths := int64(0)
	var expand func(s *jsonschema.Schema)
	expand = func(s *jsonschema.Schema) {
		if s == nil || onPath[s] || paths > w.limit {
			return
		}
		// Each path is a visit of the validator: past the limit the
		// data is refused anyway, so the expansion stops there.
		paths++
		if _, seen := counts[s]; !seen {
			order = append(order, s)
		}
		counts[s] = sat(counts[s] + 1)
		onPath[s] = true
		for _, c := range w.inPlace(s) {
			expand(c)
		}
		delete(onPath, s)
	}
	expand(s)
	if paths > w.limit {
		w.total = w.limit + 1
	}
	c := make([]weighted, len(order))
	for i, s := range order {
		c[i] = weighted{s, counts[s]}
	}
	w.closures[s] = c
	return c
}

// hasInPlace reports whether s applies other schemas to the same value.
func hasInPlace(s *jsonschema.Schema) bool {
	return s.Ref != nil || s.Not != nil || s.If != nil || s.Then != nil || s.Else != nil ||
		s.RecursiveRef != nil || s.DynamicRef != nil || len(s.AllOf) > 0 || len(s.AnyOf) > 0 ||
		len(s.OneOf) > 0 || len(s.DependentSchemas) > 0 || len(s.Dependencies) > 0
}

// inPlace lists the schemas s applies to the same value.
func (w *costWalk) inPlace(s *jsonschema.Schema) []*jsonschema.Schema {
	out := []*jsonschema.Schema{s.Ref, s.Not, s.If, s.Then, s.Else}
	// A dynamic reference applies one schema: its static target, or,
	// when that target has the anchor, any schema with the anchor (the
	// outermost in the dynamic scope). Counting each is an upper bound.
	if r := s.RecursiveRef; r != nil {
		if r.RecursiveAnchor {
			out = append(out, w.recursiveAnchors()...)
		} else {
			out = append(out, r)
		}
	}
	if r := s.DynamicRef; r != nil {
		if r.Anchor != "" && r.Ref.DynamicAnchor == r.Anchor {
			out = append(out, w.dynamicAnchors(r.Anchor)...)
		} else {
			out = append(out, r.Ref)
		}
	}
	out = append(out, s.AllOf...)
	out = append(out, s.AnyOf...)
	out = append(out, s.OneOf...)
	for _, c := range s.DependentSchemas {
		out = append(out, c)
	}
	for _, v := range s.Dependencies {
		out = append(out, asSchemas(v)...)
	}
	return out
}

// dynamicAnchors lists the schemas of the document that declare the dynamic
// anchor name: where a $dynamicRef may lead besides its static target.
func (w *costWalk) dynamicAnchors(name string) []*jsonschema.Schema {
	w.indexAnchors()
	return w.anchors[name]
}

// recursiveAnchors lists the schemas of the document with
// "$recursiveAnchor": true.
func (w *costWalk) recursiveAnchors() []*jsonschema.Schema {
	w.indexAnchors()
	return w.recursive
}

func (w *costWalk) indexAnchors() {
	if w.anchors != nil {
		return
	}
	w.anchors = map[string][]*jsonschema.Schema{}
	seen := map[*jsonschema.Schema]bool{}
	var visit func(s *jsonschema.Schema)
	visit = func(s *jsonschema.Schema) {
		if s == nil || seen[s] {
			return
		}
		seen[s] = true
		if s.DynamicAnchor != "" {
			w.anchors[s.DynamicAnchor] = append(w.anchors[s.DynamicAnchor], s)
		}
		if s.RecursiveAnchor {
			w.recursive = append(w.recursive, s)
		}
		for _, c := range subschemas(s) {
			visit(c)
		}
	}
	visit(w.root)
}

// checkValidationBudget refuses doc when validating it against sch could
// take more than the per-event budget or what is left of b (nil: no request
// budget), and otherwise takes the steps from b.
func checkValidationBudget(sch *jsonschema.Schema, doc any, b *Budget) error {
	limit := int64(MaxValidationSteps)
	if b != nil && b.left < limit {
		limit = b.left
	}
	steps := validationSteps(sch, doc, limit)
	if steps <= limit {
		if b != nil {
			b.left -= steps
		}
		return nil
	}
	if b != nil && b.left < MaxValidationSteps {
		return budgetError(fmt.Sprintf("validating this event would exceed what is left of the request's validation budget (%s of %s steps): publish it in another request",
			englishPrinter.Sprint(b.left), englishPrinter.Sprint(b.size)))
	}
	return budgetError(fmt.Sprintf("validating this event against its schema would take more than %s steps (the limit per event): send less data, or make the schema apply fewer subschemas to each value",
		englishPrinter.Sprint(MaxValidationSteps)))
}
