package manifest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// SchemaChange is one way a changed dataSchema may reject data the previous
// schema accepted.
type SchemaChange struct {
	// Pointer is the JSON pointer, in the new schema, of the change ("" is
	// the schema's root).
	Pointer string `json:"pointer"`
	// Message says what changed.
	Message string `json:"message"`
	// Unproven is true when the change is not known to reject anything but
	// could not be proven compatible either (a changed allOf, say).
	Unproven bool `json:"unproven,omitempty"`
}

// String renders the change as "<pointer>: <message>", the root as "(root)".
func (c SchemaChange) String() string {
	p := c.Pointer
	if p == "" {
		p = "(root)"
	}
	if c.Unproven {
		return p + ": cannot prove compatible: " + c.Message
	}
	return p + ": " + c.Message
}

// BreakingChanges compares the dataSchema of one (event, version) before and
// after a change and lists every way the new one may reject a document the
// old one accepted: new required properties, removed or narrowed types,
// narrowed enum or const, tightened bounds and lengths, added or changed
// patterns, closed additionalProperties, recursively through properties,
// additionalProperties, items, prefixItems and local $refs. What it cannot
// judge (changed allOf, anyOf, oneOf, not, if/then/else, patternProperties,
// dependent*, contains, unevaluated*, non-local $refs) is listed as Unproven.
// An empty list means every document the old schema accepted, the new one
// accepts too. Both schemas must be valid JSON.
func BreakingChanges(oldSchema, newSchema json.RawMessage) ([]SchemaChange, error) {
	o, err := decodeSchemaDoc(oldSchema)
	if err != nil {
		return nil, fmt.Errorf("read the previous schema: %w", err)
	}
	n, err := decodeSchemaDoc(newSchema)
	if err != nil {
		return nil, fmt.Errorf("read the new schema: %w", err)
	}
	c := &comparer{oldRoot: o, newRoot: n, seen: map[[2]string]bool{}}
	c.compare(o, n, "")
	sort.SliceStable(c.out, func(i, j int) bool { return c.out[i].Pointer < c.out[j].Pointer })
	return c.out, nil
}

func decodeSchemaDoc(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

type comparer struct {
	oldRoot, newRoot any
	// seen holds the (old, new) pairs of $ref targets already compared, so
	// recursive schemas end.
	seen map[[2]string]bool
	out  []SchemaChange
}

func (c *comparer) add(ptr, format string, args ...any) {
	c.out = append(c.out, SchemaChange{Pointer: ptr, Message: fmt.Sprintf(format, args...)})
}

func (c *comparer) unproven(ptr, format string, args ...any) {
	c.out = append(c.out, SchemaChange{Pointer: ptr, Message: fmt.Sprintf(format, args...), Unproven: true})
}

// annotations never reject anything.
var annotations = map[string]bool{
	"title": true, "description": true, "$comment": true, "default": true, "examples": true,
	"deprecated": true, "readOnly": true, "writeOnly": true, "format": true,
	"$id": true, "$anchor": true, "$dynamicAnchor": true, "$defs": true, "definitions": true,
	"contentEncoding": true, "contentMediaType": true, "contentSchema": true,
}

// handled are the keywords compare judges itself.
var handled = map[string]bool{
	"type": true, "enum": true, "const": true, "required": true,
	"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true, "multipleOf": true,
	"minLength": true, "maxLength": true, "pattern": true,
	"minItems": true, "maxItems": true, "uniqueItems": true, "items": true, "prefixItems": true,
	"minProperties": true, "maxProperties": true, "properties": true, "additionalProperties": true,
	"$ref": true, "$schema": true,
}

// compare records how n (at ptr in the new schema) may reject what o
// accepted.
func (c *comparer) compare(o, n any, ptr string) {
	o, oPtr, ok := c.deref(c.oldRoot, o)
	if !ok {
		c.unproven(ptr, "the previous schema has a $ref that is not local (%s)", oPtr)
		return
	}
	n, nPtr, ok := c.deref(c.newRoot, n)
	if !ok {
		c.unproven(ptr, "a $ref that is not local (%s)", nPtr)
		return
	}
	if oPtr != "" || nPtr != "" {
		key := [2]string{oPtr, nPtr}
		if c.seen[key] {
			return
		}
		c.seen[key] = true
	}
	// Boolean schemas: false accepts nothing, true everything.
	if b, isBool := o.(bool); isBool {
		if !b {
			return
		}
		o = map[string]any{}
	}
	if b, isBool := n.(bool); isBool {
		if !b {
			c.add(ptr, "the schema is now false and accepts nothing")
		}
		return
	}
	om, _ := o.(map[string]any)
	nm, _ := n.(map[string]any)
	if om == nil || nm == nil {
		c.unproven(ptr, "a schema that is neither an object nor a boolean")
		return
	}
	if r, has := nm["$ref"]; has && !c.sameRef(om["$ref"], r) {
		c.unproven(ptr+"/$ref", "$ref %v beside other keywords was added or changed", r)
	}
	if !equalJSON(om["$schema"], nm["$schema"]) && nm["$schema"] != nil {
		c.unproven(ptr+"/$schema", "the dialect changed")
	}

	types := c.compareTypes(om, nm, ptr)
	c.compareValues(om, nm, ptr)
	if types.number {
		c.compareNumbers(om, nm, ptr)
	}
	if types.str {
		c.compareLowerBound(om, nm, ptr, "minLength")
		c.compareUpperBound(om, nm, ptr, "maxLength")
		c.comparePattern(om, nm, ptr)
	}
	if types.array {
		c.compareLowerBound(om, nm, ptr, "minItems")
		c.compareUpperBound(om, nm, ptr, "maxItems")
		if nm["uniqueItems"] == true && om["uniqueItems"] != true {
			c.add(ptr+"/uniqueItems", "items must now be unique")
		}
		c.compareItems(om, nm, ptr)
	}
	if types.object {
		c.compareLowerBound(om, nm, ptr, "minProperties")
		c.compareUpperBound(om, nm, ptr, "maxProperties")
		c.compareRequired(om, nm, ptr)
		c.compareProperties(om, nm, ptr)
	}
	// Whatever else asserts: removing it only loosens; adding or changing it
	// is beyond this comparison.
	for _, k := range sortedKeys(nm) {
		if handled[k] || annotations[k] {
			continue
		}
		if ov, had := om[k]; had && equalJSON(ov, nm[k]) {
			continue
		}
		if isKnownAssertion(k) {
			c.unproven(ptr+"/"+escapePointer(k), "%s was added or changed", k)
		}
	}
}

// knownAssertions are the draft 2020-12 keywords that may reject data and
// that compare does not judge in detail. Other unknown keywords are
// annotations.
var knownAssertions = []string{
	"allOf", "anyOf", "oneOf", "not", "if", "then", "else",
	"dependentRequired", "dependentSchemas", "dependencies", "patternProperties", "propertyNames",
	"contains", "minContains", "maxContains", "unevaluatedItems", "unevaluatedProperties",
	"$dynamicRef", "$recursiveRef", "additionalItems",
}

func isKnownAssertion(k string) bool { return slices.Contains(knownAssertions, k) }

// sameRef reports whether two $ref values name equal schemas in their
// documents.
func (c *comparer) sameRef(o, n any) bool {
	os, ok1 := o.(string)
	ns, ok2 := n.(string)
	if !ok1 || !ok2 || os != ns || !strings.HasPrefix(os, "#") {
		return false
	}
	ot, found1 := resolvePointer(c.oldRoot, strings.TrimPrefix(os, "#"))
	nt, found2 := resolvePointer(c.newRoot, strings.TrimPrefix(ns, "#"))
	return found1 && found2 && equalJSON(ot, nt)
}

func hasAssertions(m map[string]any) bool {
	for k := range m {
		if k != "$ref" && !annotations[k] {
			return true
		}
	}
	return false
}

// deref follows a schema's $ref when the schema is nothing but the $ref
// (and annotations), returning the target and its pointer. ok is false for a
// $ref that does not resolve inside the document.
func (c *comparer) deref(root, s any) (any, string, bool) {
	ptr := ""
	for range 64 {
		m, isMap := s.(map[string]any)
		if !isMap {
			return s, ptr, true
		}
		ref, isStr := m["$ref"].(string)
		if !isStr || hasAssertions(m) {
			return s, ptr, true
		}
		if !strings.HasPrefix(ref, "#") {
			return nil, ref, false
		}
		target, found := resolvePointer(root, strings.TrimPrefix(ref, "#"))
		if !found {
			return nil, ref, false
		}
		s, ptr = target, ref
	}
	return nil, ptr, false // a chain of 64 refs: a loop of refs only
}

// resolvePointer resolves a JSON pointer in doc.
func resolvePointer(doc any, ptr string) (any, bool) {
	if ptr == "" {
		return doc, true
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil, false
	}
	cur := doc
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch v := cur.(type) {
		case map[string]any:
			next, ok := v[tok]
			if !ok {
				return nil, false
			}
			cur = next
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(v) {
				return nil, false
			}
			cur = v[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

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
