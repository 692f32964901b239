package manifest

// The keyword-by-keyword comparisons of BreakingChanges.

import (
	"encoding/json"
	"fmt"
	"math/big"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// typeSet is which JSON types a schema's type keyword admits.
type typeSet struct{ null, boolean, number, str, array, object bool }

var jsonTypes = []string{"null", "boolean", "integer", "number", "string", "array", "object"}

// schemaTypes returns the types a schema's "type" keyword admits (all when
// absent) as a set of names; "number" admits "integer" too.
func schemaTypes(m map[string]any) map[string]bool {
	out := map[string]bool{}
	switch t := m["type"].(type) {
	case nil:
		for _, name := range jsonTypes {
			out[name] = true
		}
	case string:
		out[t] = true
	case []any:
		for _, v := range t {
			if s, ok := v.(string); ok {
				out[s] = true
			}
		}
	}
	if out["number"] {
		out["integer"] = true
	}
	return out
}

// compareTypes reports types the new schema no longer admits and returns
// the types the old schema admitted, which decide which other keywords
// matter.
func (c *comparer) compareTypes(om, nm map[string]any, ptr string) typeSet {
	ot, nt := schemaTypes(om), schemaTypes(nm)
	if values, finite := allowedValues(om); finite {
		// Only the types of the values the old enum or const allowed matter.
		of := map[string]bool{}
		for _, v := range values {
			if t := valueType(v); ot[t] {
				of[t] = true
			}
		}
		ot = of
	}
	var lost []string
	for _, name := range jsonTypes {
		if ot[name] && !nt[name] {
			if name == "integer" && ot["number"] {
				continue // reported as number
			}
			lost = append(lost, name)
		}
	}
	if len(lost) > 0 {
		if _, had := om["type"]; !had {
			c.add(ptr+"/type", "type is now restricted to %s", typeText(nm["type"]))
		} else {
			c.add(ptr+"/type", "type %s no longer accepted (was %s, now %s)",
				strings.Join(lost, ", "), typeText(om["type"]), typeText(nm["type"]))
		}
	}
	return typeSet{
		null: ot["null"], boolean: ot["boolean"], number: ot["number"] || ot["integer"],
		str: ot["string"], array: ot["array"], object: ot["object"],
	}
}

// valueType is the JSON type of a decoded value, "integer" for a number
// without a fractional part.
func valueType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number:
		if r, ok := ratOf(x); ok && r.IsInt() {
			return "integer"
		}
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	default:
		return "object"
	}
}

func typeText(t any) string {
	b, _ := json.Marshal(t)
	return string(b)
}

// compareValues checks enum and const.
func (c *comparer) compareValues(om, nm map[string]any, ptr string) {
	oldValues, oldFinite := allowedValues(om)
	if nc, has := nm["const"]; has {
		switch {
		case !oldFinite:
			c.add(ptr+"/const", "const %s added: other values are no longer accepted", typeText(nc))
		default:
			for _, v := range oldValues {
				if !equalJSON(v, nc) {
					c.add(ptr+"/const", "const is now %s; %s is no longer accepted", typeText(nc), typeText(v))
					break
				}
			}
		}
	}
	if ne, has := nm["enum"]; has {
		list, _ := ne.([]any)
		if !oldFinite {
			c.add(ptr+"/enum", "enum %s added: other values are no longer accepted", typeText(ne))
			return
		}
		var removed []string
		for _, v := range oldValues {
			if !slices.ContainsFunc(list, func(x any) bool { return equalJSON(x, v) }) {
				removed = append(removed, typeText(v))
			}
		}
		if len(removed) > 0 {
			c.add(ptr+"/enum", "enum narrowed: %s no longer accepted", strings.Join(removed, ", "))
		}
	}
}

// allowedValues returns the values an old schema's enum and const allow;
// finite is false when it has neither.
func allowedValues(m map[string]any) (values []any, finite bool) {
	if v, has := m["const"]; has {
		return []any{v}, true
	}
	if e, has := m["enum"].([]any); has {
		return e, true
	}
	return nil, false
}

// bound is a numeric bound; inclusive unless exclusive.
type bound struct {
	value     *big.Rat
	exclusive bool
}

func ratOf(v any) (*big.Rat, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return nil, false
	}
	r, ok := new(big.Rat).SetString(n.String())
	return r, ok
}

// lowerBound is the tighter of minimum and exclusiveMinimum, nil when none.
func lowerBound(m map[string]any) *bound {
	var b *bound
	if r, ok := ratOf(m["minimum"]); ok {
		b = &bound{value: r}
	}
	if r, ok := ratOf(m["exclusiveMinimum"]); ok {
		if b == nil || r.Cmp(b.value) >= 0 {
			b = &bound{value: r, exclusive: true}
		}
	}
	return b
}

// upperBound is the tighter of maximum and exclusiveMaximum, nil when none.
func upperBound(m map[string]any) *bound {
	var b *bound
	if r, ok := ratOf(m["maximum"]); ok {
		b = &bound{value: r}
	}
	if r, ok := ratOf(m["exclusiveMaximum"]); ok {
		if b == nil || r.Cmp(b.value) <= 0 {
			b = &bound{value: r, exclusive: true}
		}
	}
	return b
}

func (b *bound) text(exclusiveName, inclusiveName string) string {
	if b == nil {
		return "none"
	}
	if b.exclusive {
		return exclusiveName + " " + b.value.RatString()
	}
	return inclusiveName + " " + b.value.RatString()
}

// boundKeyword names the keyword of the new bound, for the pointer.
func boundKeyword(b *bound, exclusiveName, inclusiveName string) string {
	if b.exclusive {
		return exclusiveName
	}
	return inclusiveName
}

// compareNumbers checks minimum, maximum, their exclusive forms and
// multipleOf.
func (c *comparer) compareNumbers(om, nm map[string]any, ptr string) {
	if ob, nb := lowerBound(om), lowerBound(nm); nb != nil {
		tighter := ob == nil || nb.value.Cmp(ob.value) > 0 ||
			(nb.value.Cmp(ob.value) == 0 && nb.exclusive && !ob.exclusive)
		if tighter {
			c.add(ptr+"/"+boundKeyword(nb, "exclusiveMinimum", "minimum"), "lower bound tightened (was %s, now %s)",
				ob.text("exclusiveMinimum", "minimum"), nb.text("exclusiveMinimum", "minimum"))
		}
	}
	if ob, nb := upperBound(om), upperBound(nm); nb != nil {
		tighter := ob == nil || nb.value.Cmp(ob.value) < 0 ||
			(nb.value.Cmp(ob.value) == 0 && nb.exclusive && !ob.exclusive)
		if tighter {
			c.add(ptr+"/"+boundKeyword(nb, "exclusiveMaximum", "maximum"), "upper bound tightened (was %s, now %s)",
				ob.text("exclusiveMaximum", "maximum"), nb.text("exclusiveMaximum", "maximum"))
		}
	}
	nmul, hasNew := ratOf(nm["multipleOf"])
	if !hasNew {
		return
	}
	omul, hasOld := ratOf(om["multipleOf"])
	// Every multiple of the old divisor is a multiple of the new one when
	// old/new is an integer.
	if !hasOld || nmul.Sign() == 0 || !new(big.Rat).Quo(omul, nmul).IsInt() {
		was := "none"
		if hasOld {
			was = omul.RatString()
		}
		c.add(ptr+"/multipleOf", "multipleOf tightened (was %s, now %s)", was, nmul.RatString())
	}
}

// intOf reads a non-negative integer keyword.
func intOf(m map[string]any, k string) (*big.Int, bool) {
	r, ok := ratOf(m[k])
	if !ok || !r.IsInt() {
		return nil, false
	}
	return r.Num(), true
}

// compareLowerBound checks a min* keyword: absent means 0.
func (c *comparer) compareLowerBound(om, nm map[string]any, ptr, k string) {
	nv, ok := intOf(nm, k)
	if !ok {
		return
	}
	ov, had := intOf(om, k)
	if !had {
		ov = big.NewInt(0)
	}
	if nv.Cmp(ov) > 0 {
		c.add(ptr+"/"+k, "%s tightened (was %s, now %s)", k, ov, nv)
	}
}

// compareUpperBound checks a max* keyword: absent means no limit.
func (c *comparer) compareUpperBound(om, nm map[string]any, ptr, k string) {
	nv, ok := intOf(nm, k)
	if !ok {
		return
	}
	ov, had := intOf(om, k)
	if !had {
		c.add(ptr+"/"+k, "%s tightened (was none, now %s)", k, nv)
		return
	}
	if nv.Cmp(ov) < 0 {
		c.add(ptr+"/"+k, "%s tightened (was %s, now %s)", k, ov, nv)
	}
}

func (c *comparer) comparePattern(om, nm map[string]any, ptr string) {
	np, has := nm["pattern"]
	if !has {
		return
	}
	op, had := om["pattern"]
	switch {
	case !had:
		c.add(ptr+"/pattern", "pattern %s added", typeText(np))
	case !equalJSON(op, np):
		c.add(ptr+"/pattern", "pattern changed from %s to %s", typeText(op), typeText(np))
	}
}

func (c *comparer) compareRequired(om, nm map[string]any, ptr string) {
	oldReq := stringSet(om["required"])
	nr, _ := nm["required"].([]any)
	for i, v := range nr {
		name, _ := v.(string)
		if !oldReq[name] {
			c.add(fmt.Sprintf("%s/required/%d", ptr, i), "new required property %s", strconv.Quote(name))
		}
	}
}

func stringSet(v any) map[string]bool {
	out := map[string]bool{}
	list, _ := v.([]any)
	for _, x := range list {
		if s, ok := x.(string); ok {
			out[s] = true
		}
	}
	return out
}

// compareProperties checks properties and additionalProperties: each
// property name is judged by the schema that applied to it before (its
// properties entry, or additionalProperties) against the one that applies
// now.
func (c *comparer) compareProperties(om, nm map[string]any, ptr string) {
	oldProps, _ := om["properties"].(map[string]any)
	newProps, _ := nm["properties"].(map[string]any)
	oldPat, hasOldPat := om["patternProperties"]
	newPat, hasNewPat := nm["patternProperties"]
	if hasOldPat || hasNewPat {
		// Which names the patterns cover is beyond this comparison; unchanged
		// patterns with unchanged properties are still judged below.
		if !equalJSON(oldPat, newPat) && hasNewPat {
			c.unproven(ptr+"/patternProperties", "patternProperties was added or changed")
		}
	}
	oldAdd, hasOldAdd := om["additionalProperties"]
	if !hasOldAdd {
		oldAdd = true
	}
	newAdd, hasNewAdd := nm["additionalProperties"]
	if !hasNewAdd {
		newAdd = true
	}
	for _, name := range sortedKeys(newProps) {
		at := ptr + "/properties/" + escapePointer(name)
		switch op, had := oldProps[name]; {
		case had:
			c.compare(op, newProps[name], at)
		case hasOldPat:
		case isTrueSchema(oldAdd) && !isTrueSchema(newProps[name]):
			c.add(at, "property %s added with a schema of its own; the previous schema accepted any value for it "+
				"(additionalProperties was open)", strconv.Quote(name))
		default:
			c.compare(oldAdd, newProps[name], at)
		}
	}
	for _, name := range sortedKeys(oldProps) {
		if _, still := newProps[name]; still || hasNewPat {
			continue
		}
		if newAdd == false {
			c.add(ptr+"/additionalProperties", "property %s was removed and additional properties are not allowed", strconv.Quote(name))
			continue
		}
		c.compare(oldProps[name], newAdd, ptr+"/additionalProperties")
	}
	if !equalJSON(oldAdd, newAdd) {
		switch {
		case oldAdd == false:
		case isTrueSchema(oldAdd) && newAdd == false:
			c.add(ptr+"/additionalProperties", "additionalProperties closed (was open, now false)")
		case isTrueSchema(oldAdd) && !isTrueSchema(newAdd):
			c.add(ptr+"/additionalProperties", "additionalProperties closed (was open, now a schema)")
		default:
			c.compare(oldAdd, newAdd, ptr+"/additionalProperties")
		}
	}
}

// isTrueSchema reports whether s accepts everything as written: true, or an
// object of annotations only.
func isTrueSchema(s any) bool {
	switch v := s.(type) {
	case bool:
		return v
	case map[string]any:
		for k := range v {
			if !annotations[k] {
				return false
			}
		}
		return true
	}
	return false
}

// compareItems checks prefixItems and items position by position.
func (c *comparer) compareItems(om, nm map[string]any, ptr string) {
	oldPrefix, _ := om["prefixItems"].([]any)
	newPrefix, _ := nm["prefixItems"].([]any)
	oldItems, hasOldItems := om["items"]
	if !hasOldItems {
		oldItems = true
	}
	newItems, hasNewItems := nm["items"]
	if !hasNewItems {
		newItems = true
	}
	for i := 0; i < max(len(oldPrefix), len(newPrefix)); i++ {
		o, n := oldItems, newItems
		at := ptr + "/items"
		if i < len(oldPrefix) {
			o = oldPrefix[i]
		}
		if i < len(newPrefix) {
			n = newPrefix[i]
			at = fmt.Sprintf("%s/prefixItems/%d", ptr, i)
		}
		c.compare(o, n, at)
	}
	if hasNewItems {
		c.compare(oldItems, newItems, ptr+"/items")
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// equalJSON compares decoded JSON values, numbers by value.
func equalJSON(a, b any) bool {
	an, aok := a.(json.Number)
	bn, bok := b.(json.Number)
	if aok && bok {
		ar, ok1 := ratOf(an)
		br, ok2 := ratOf(bn)
		return ok1 && ok2 && ar.Cmp(br) == 0
	}
	switch av := a.(type) {
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			return false
		}
		for i := range av {
			if !equalJSON(av[i], bv[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok || len(av) != len(bv) {
			return false
		}
		for k, v := range av {
			w, ok := bv[k]
			if !ok || !equalJSON(v, w) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}
