package manifest

import (
	"encoding/json"
	"fmt"
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
	o, err := decodeJSON(oldSchema)
	if err != nil {
		return nil, fmt.Errorf("read the previous schema: %w", err)
	}
	n, err := decodeJSON(newSchema)
	if err != nil {
		return nil, fmt.Errorf("read the new schema: %w", err)
	}
	c := &comparer{oldRoot: o, newRoot: n, seen: map[[2]string]bool{}}
	c.compare(o, n, "")
	sort.SliceStable(c.out, func(i, j int) bool { return c.out[i].Pointer < c.out[j].Pointer })
	return c.out, nil
}

type comparer struct {
	oldRoot, newRoot any
	// seen holds the (old, new) pairs of $ref targets already compared, so
	// recursive schemas end.
	seen map[[2]string]bool
	out  []SchemaChange
	// steps counts the subschemas compared and depth the nesting of the
	// comparison under way; past maxCompareSteps or maxCompareDepth the
	// comparison stops with one Unproven change (cut).
	steps, depth int
	cut          bool
}

// Bounds of one comparison. Two recursive schemas whose $ref rings have
// coprime lengths p and q pair their targets p×q ways before a pair
// repeats: rings of 1,000 and 999 definitions (60 KB each, within
// MaxSchemaBytes) made a million nested comparisons, each pointer longer
// than the last, under the lock that serialises every app's apply. A
// schema a manifest may hold is compared in far fewer: a ring of refs
// compared with itself nests as deep as the ring is long, and 64 KB hold
// fewer than 3,000 definitions. Pointers in messages are cut at
// maxComparePointer bytes, so a deep comparison holds little.
const (
	maxCompareSteps   = 20_000
	maxCompareDepth   = 10_000
	maxComparePointer = 1_000
)

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
	if c.cut {
		return
	}
	if len(ptr) > maxComparePointer {
		// Only a pointer in a message: its start and its last step say
		// enough, and a deep comparison keeps one per level.
		head := ptr[:maxComparePointer/2]
		head = head[:max(strings.LastIndex(head, "/"), 0)] // whole steps: no rune cut
		ptr = head + "/…" + ptr[strings.LastIndex(ptr, "/"):]
	}
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
	if oPtr != "" && nPtr != "" {
		// Both sides at $ref targets: a pair compared once is compared. With
		// one side inline, the pair says nothing of the inline side (two
		// inline subschemas may meet one target), and the inline side's own
		// nesting ends the recursion.
		key := [2]string{oPtr, nPtr}
		if c.seen[key] {
			return
		}
		c.seen[key] = true
	}
	c.steps++
	c.depth++
	defer func() { c.depth-- }()
	if c.steps > maxCompareSteps || c.depth > maxCompareDepth {
		c.cut = true
		c.unproven(ptr, "the schemas are too large or too recursive to compare (more than %d subschemas, or %d levels)",
			maxCompareSteps, maxCompareDepth)
		return
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
