package manifest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// MaxChecksPerValue bounds, at apply, the subschemas a dataSchema may apply
// to one value of the data (docs/design.md#manifests). With it, any event of
// up to MaxValidationSteps/MaxChecksPerValue values (about 2,000) fits the
// validation budget whatever its shape; larger events are measured one by
// one when published.
const MaxChecksPerValue = 256

// worstCase explores the data a schema may be given, one position at a
// time (a property name, an item index, or any other name or index), with
// the schemas applied at that position and how many times, as costWalk
// does for one document. It finds the most checks one value can get, and
// recursion that applies a schema more times at each level.
type worstCase struct {
	costWalk
	deadline time.Time
	ids      map[*jsonschema.Schema]int
	explored map[string]bool
	// onPath maps the schemas of each state on the current path (without
	// counts) to the counts there.
	onPath map[string][]int64
	// most is the most checks of one value found so far.
	most int64
	err  error
}

// checkSchemaForApply compiles a manifest's dataSchema and checks its worst
// case: what apply accepts, stricter than what CompileSchema compiles.
func checkSchemaForApply(raw []byte) error {
	deadline := time.Now().Add(MaxCompileTime)
	sch, err := CompileSchema(raw)
	if err != nil {
		return err
	}
	return checkWorstCase(sch, deadline)
}

// checkWorstCase refuses a schema that may apply more than
// MaxChecksPerValue subschemas to one value, or whose recursion applies
// itself more times at each level of the data (the work then doubles with
// each level). It is a check of apply, not of CompileSchema: schemas stored
// before it are still compiled to publish, and the validation budget bounds
// their events.
func checkWorstCase(sch *jsonschema.Schema, deadline time.Time) error {
	w := &worstCase{
		costWalk: costWalk{root: sch, limit: MaxChecksPerValue},
		deadline: deadline,
		ids:      map[*jsonschema.Schema]int{},
		explored: map[string]bool{},
		onPath:   map[string][]int64{},
	}
	w.explore([]weighted{{sch, 1}}, "")
	if w.err != nil {
		return w.err
	}
	return nil
}

// explore visits the position where the schemas in state apply (where: a
// JSON pointer, "" for the root), then every position below it.
func (w *worstCase) explore(state []weighted, where string) {
	if w.err != nil {
		return
	}
	if time.Now().After(w.deadline) {
		w.err = errCompileTime(MaxCompileTime)
		return
	}
	slices.SortFunc(state, func(a, b weighted) int { return w.id(a.s) - w.id(b.s) })
	support, key := w.keys(state)
	if w.explored[key] {
		return
	}
	w.explored[key] = true
	if before, ok := w.onPath[support]; ok {
		for i, e := range state {
			if e.n > before[i] {
				w.err = limitError(fmt.Sprintf("schema applies itself more times at each level of the data (at %s): validation would double with each level of nesting", readablePointer(where)))
				return
			}
		}
		return // the same schemas, no more often: nothing new below
	}
	counts := make([]int64, len(state))
	for i, e := range state {
		counts[i] = e.n
	}
	w.onPath[support] = counts
	defer delete(w.onPath, support)

	var applied []weighted
	checks := int64(0)
	for _, e := range state {
		for _, c := range w.closure(e.s) {
			n := mul(e.n, c.n)
			checks = sat(checks + n)
			if hasMemberSchemas(c.s) {
				applied = append(applied, weighted{c.s, n})
			}
		}
	}
	w.most = max(w.most, checks)
	if checks > w.limit {
		w.err = limitError(fmt.Sprintf("schema may apply more than %d subschemas to one value of the data (at %s): anyOf, oneOf, allOf and references that fan out multiply",
			w.limit, readablePointer(where)))
		return
	}
	for _, p := range positions(applied) {
		w.stack = w.stack[:0]
		for _, a := range applied {
			p.add(&w.costWalk, a)
		}
		if len(w.stack) > 0 {
			w.explore(slices.Clone(w.stack), where+p.name)
		}
	}
}

// id numbers schemas in the order they are met, for state keys.
func (w *worstCase) id(s *jsonschema.Schema) int {
	if id, ok := w.ids[s]; ok {
		return id
	}
	w.ids[s] = len(w.ids)
	return w.ids[s]
}

// keys returns a state's schemas as a key, without and with counts.
func (w *worstCase) keys(state []weighted) (support, key string) {
	var sb, kb strings.Builder
	for _, e := range state {
		id := strconv.Itoa(w.id(e.s))
		sb.WriteString(id + ",")
		kb.WriteString(id + ":" + strconv.FormatInt(e.n, 10) + ",")
	}
	return sb.String(), kb.String()
}

// position is a place below a value: a named member, any other member, an
// item at an index, any later item, or a member's name.
type position struct {
	name string
	add  func(w *costWalk, a weighted)
}

// positions lists the places below a value where applied schemas lead:
// each property name they name, each prefix index, and the rest.
func positions(applied []weighted) []position {
	var names []string
	prefix := 0
	for _, a := range applied {
		for k := range a.s.Properties {
			names = append(names, k)
		}
		prefix = max(prefix, len(a.s.PrefixItems))
		if items, ok := a.s.Items.([]*jsonschema.Schema); ok {
			prefix = max(prefix, len(items))
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	var out []position
	for _, k := range names {
		out = append(out, position{"/" + k, func(w *costWalk, a weighted) { w.addMemberSchemas(0, a, k) }})
	}
	out = append(out, position{"/(any other member)", func(w *costWalk, a weighted) { addAnyMember(w, a) }})
	out = append(out, position{"/(a member's name)", func(w *costWalk, a weighted) {
		if a.s.PropertyNames != nil {
			w.add(0, a.s.PropertyNames, a.n)
		}
	}})
	for i := range prefix + 1 {
		name := "/" + strconv.Itoa(i)
		if i == prefix {
			name = "/(any later item)"
		}
		out = append(out, position{name, func(w *costWalk, a weighted) { w.addItemSchemas(0, a, i) }})
	}
	return out
}

// addAnyMember adds the schemas a may apply to a member it does not name:
// every pattern (some name may match them all) and additionalProperties.
func addAnyMember(w *costWalk, a weighted) {
	s := a.s
	for _, p := range s.PatternProperties {
		w.add(0, p, a.n)
	}
	if p, ok := s.AdditionalProperties.(*jsonschema.Schema); ok {
		w.add(0, p, a.n)
	}
	if s.UnevaluatedProperties != nil {
		w.add(0, s.UnevaluatedProperties, a.n)
	}
}
