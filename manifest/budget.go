package manifest

import (
	"fmt"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The compile budget of one dataSchema. References that fan out (a
// definition referring twice to the next, and so on) make a small schema
// stand for an exponentially large one: compiling it is quick, but every
// validation walks the expansion, so checking the schema took minutes and
// each event of its type would be slow to publish.
const (
	// MaxExpandedSchema bounds the number of subschemas of a dataSchema with
	// every reference replaced by what it refers to. A reference back to a
	// schema it is inside (a recursive schema) counts once: each level of
	// such recursion consumes a level of the data.
	MaxExpandedSchema = 20_000
	// MaxCompileTime bounds the time spent compiling and checking one
	// dataSchema.
	MaxCompileTime = 2 * time.Second
)

// compileBudget is what one CompileSchema call may spend.
type compileBudget struct {
	maxExpanded int
	maxTime     time.Duration
}

var defaultBudget = compileBudget{maxExpanded: MaxExpandedSchema, maxTime: MaxCompileTime}

// errCompileTime is the refusal of a schema that took too long.
func errCompileTime(d time.Duration) error {
	return limitError(fmt.Sprintf("schema took longer than %v to compile and check", d))
}

// expansion measures the expanded size of a compiled schema. Each schema is
// measured once and remembered, so the walk is linear in the compiled graph
// however large the expansion is; a size over limit is recorded as limit+1.
type expansion struct {
	limit    int
	deadline time.Time
	sizes    map[*jsonschema.Schema]int
	inside   map[*jsonschema.Schema]bool
	steps    int
	late     bool
}

// checkExpansion refuses sch when its expansion exceeds the budget's size, or
// when measuring it runs past deadline.
func checkExpansion(sch *jsonschema.Schema, b compileBudget, deadline time.Time) error {
	e := &expansion{limit: b.maxExpanded, deadline: deadline,
		sizes: map[*jsonschema.Schema]int{}, inside: map[*jsonschema.Schema]bool{}}
	n := e.size(sch)
	if e.late {
		return errCompileTime(b.maxTime)
	}
	if n > e.limit {
		return limitError(fmt.Sprintf("schema is too large once its references are expanded: more than %d subschemas (references that fan out multiply)", e.limit))
	}
	return nil
}

func (e *expansion) size(s *jsonschema.Schema) int {
	if s == nil {
		return 0
	}
	if n, ok := e.sizes[s]; ok {
		return n
	}
	if e.inside[s] {
		return 1
	}
	if e.steps++; e.steps%1024 == 0 && time.Now().After(e.deadline) {
		e.late = true
	}
	if e.late {
		return e.limit + 1
	}
	e.inside[s] = true
	n := 1
	for _, c := range subschemas(s) {
		if n += e.size(c); n > e.limit {
			n = e.limit + 1
			break
		}
	}
	delete(e.inside, s)
	e.sizes[s] = n
	return n
}

// subschemas lists every schema s applies to the data or a part of it,
// references included.
func subschemas(s *jsonschema.Schema) []*jsonschema.Schema {
	out := []*jsonschema.Schema{s.Ref, s.RecursiveRef, s.Not, s.If, s.Then, s.Else,
		s.PropertyNames, s.UnevaluatedProperties, s.Contains, s.Items2020, s.UnevaluatedItems, s.ContentSchema}
	if s.DynamicRef != nil {
		out = append(out, s.DynamicRef.Ref)
	}
	out = append(out, s.AllOf...)
	out = append(out, s.AnyOf...)
	out = append(out, s.OneOf...)
	out = append(out, s.PrefixItems...)
	for _, c := range s.Properties {
		out = append(out, c)
	}
	for _, c := range s.PatternProperties {
		out = append(out, c)
	}
	for _, c := range s.DependentSchemas {
		out = append(out, c)
	}
	for _, v := range s.Dependencies {
		out = append(out, asSchemas(v)...)
	}
	out = append(out, asSchemas(s.AdditionalProperties)...)
	out = append(out, asSchemas(s.Items)...)
	out = append(out, asSchemas(s.AdditionalItems)...)
	return out
}

// asSchemas returns the schemas in a keyword value that may also be a bool
// or a list of property names.
func asSchemas(v any) []*jsonschema.Schema {
	switch v := v.(type) {
	case *jsonschema.Schema:
		return []*jsonschema.Schema{v}
	case []*jsonschema.Schema:
		return v
	}
	return nil
}
