package manifest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestBreakingChanges(t *testing.T) {
	tests := []struct {
		name     string
		old, new string
		// want lists "<pointer>|<message part>" per change, in order; empty
		// means compatible.
		want     []string
		unproven bool
	}{
		{"identical", `{"type":"object","required":["a"],"properties":{"a":{"type":"string"}}}`,
			`{"required":["a"],"type":"object","properties":{"a":{"type":"string"}}}`, nil, false},
		{"annotations only", `{"type":"string"}`, `{"type":"string","title":"T","description":"d","format":"email"}`, nil, false},
		{"new required property", `{"type":"object","properties":{"a":{}}}`,
			`{"type":"object","required":["a"],"properties":{"a":{}}}`, []string{`/required/0|new required property "a"`}, false},
		{"required removed", `{"required":["a","b"]}`, `{"required":["a"]}`, nil, false},
		{"type removed", `{"type":["string","null"]}`, `{"type":"string"}`, []string{`/type|type null no longer accepted`}, false},
		{"type narrowed number to integer", `{"type":"number"}`, `{"type":"integer"}`, []string{`/type|type number no longer accepted`}, false},
		{"type widened integer to number", `{"type":"integer"}`, `{"type":"number"}`, nil, false},
		{"type added", `{}`, `{"type":"object"}`, []string{`/type|type is now restricted to "object"`}, false},
		{"enum narrowed", `{"enum":["a","b","c"]}`, `{"enum":["a","c"]}`, []string{`/enum|"b" no longer accepted`}, false},
		{"enum widened", `{"enum":["a"]}`, `{"enum":["a","b"]}`, nil, false},
		{"enum added", `{"type":"string"}`, `{"type":"string","enum":["a"]}`, []string{`/enum|enum ["a"] added`}, false},
		{"type added to an enum of its type", `{"enum":["a","b"]}`, `{"type":"string","enum":["a","b"]}`, nil, false},
		{"type added that drops an enum value", `{"enum":["a",1]}`, `{"type":"string","enum":["a",1]}`,
			[]string{`/type|type is now restricted to "string"`}, false},
		{"integer const kept by type integer", `{"const":2}`, `{"type":"integer","const":2}`, nil, false},
		{"const changed", `{"const":1}`, `{"const":2}`, []string{`/const|const is now 2`}, false},
		{"const same number spelled differently", `{"const":1}`, `{"const":1.0}`, nil, false},
		{"enum to const of the only value", `{"enum":["x"]}`, `{"const":"x"}`, nil, false},
		{"minimum raised", `{"type":"integer","minimum":0}`, `{"type":"integer","minimum":1}`,
			[]string{`/minimum|lower bound tightened (was minimum 0, now minimum 1)`}, false},
		{"minimum lowered", `{"type":"integer","minimum":1}`, `{"type":"integer","minimum":0}`, nil, false},
		{"minimum made exclusive", `{"type":"number","minimum":0}`, `{"type":"number","exclusiveMinimum":0}`,
			[]string{`/exclusiveMinimum|lower bound tightened`}, false},
		{"maximum added", `{"type":"number"}`, `{"type":"number","maximum":10}`, []string{`/maximum|was none, now maximum 10`}, false},
		{"exclusiveMaximum relaxed to maximum", `{"exclusiveMaximum":10}`, `{"maximum":10}`, nil, false},
		{"multipleOf coarser", `{"multipleOf":2}`, `{"multipleOf":4}`, []string{`/multipleOf|was 2, now 4`}, false},
		{"multipleOf finer", `{"multipleOf":4}`, `{"multipleOf":2}`, nil, false},
		{"bounds ignored for another type", `{"type":"string"}`, `{"type":"string","minimum":3}`, nil, false},
		{"minLength raised", `{"type":"string","minLength":1}`, `{"type":"string","minLength":2}`, []string{`/minLength|was 1, now 2`}, false},
		{"maxLength added", `{"type":"string"}`, `{"type":"string","maxLength":5}`, []string{`/maxLength|was none, now 5`}, false},
		{"maxLength raised", `{"maxLength":5}`, `{"maxLength":6}`, nil, false},
		{"minItems, maxItems", `{"type":"array","maxItems":5}`, `{"type":"array","minItems":1,"maxItems":4}`,
			[]string{`/maxItems|was 5, now 4`, `/minItems|was 0, now 1`}, false},
		{"minProperties, maxProperties", `{"type":"object"}`, `{"type":"object","minProperties":1,"maxProperties":3}`,
			[]string{`/maxProperties|was none, now 3`, `/minProperties|was 0, now 1`}, false},
		{"pattern added", `{"type":"string"}`, `{"type":"string","pattern":"^a"}`, []string{`/pattern|pattern "^a" added`}, false},
		{"pattern changed", `{"pattern":"^a"}`, `{"pattern":"^ab"}`, []string{`/pattern|changed from "^a" to "^ab"`}, false},
		{"pattern removed", `{"pattern":"^a"}`, `{}`, nil, false},
		{"additionalProperties closed", `{"type":"object","properties":{"a":{}}}`,
			`{"type":"object","properties":{"a":{}},"additionalProperties":false}`,
			[]string{`/additionalProperties|closed (was open, now false)`}, false},
		{"additionalProperties true to a schema", `{"additionalProperties":true}`, `{"additionalProperties":{"type":"string"}}`,
			[]string{`/additionalProperties|closed (was open, now a schema)`}, false},
		{"additionalProperties opened", `{"additionalProperties":false}`, `{}`, nil, false},
		{"additionalProperties schema narrowed", `{"additionalProperties":{"type":["string","integer"]}}`,
			`{"additionalProperties":{"type":"string"}}`, []string{`/additionalProperties/type|integer no longer accepted`}, false},
		{"property added to a closed object", `{"properties":{"a":{}},"additionalProperties":false}`,
			`{"properties":{"a":{},"b":{"type":"string"}},"additionalProperties":false}`, nil, false},
		{"typed property added to an open object", `{"properties":{"a":{}}}`, `{"properties":{"a":{},"b":{"type":"string"}}}`,
			[]string{`/properties/b|property "b" added with a schema of its own`}, false},
		{"untyped property added to an open object", `{"properties":{"a":{}}}`, `{"properties":{"a":{},"b":{"description":"x"}}}`, nil, false},
		{"property removed from a closed object", `{"properties":{"a":{},"b":{}},"additionalProperties":false}`,
			`{"properties":{"a":{}},"additionalProperties":false}`, []string{`/additionalProperties|property "b" was removed`}, false},
		{"nested property type narrowed", `{"properties":{"address":{"properties":{"zip":{"type":["string","integer"]}}}}}`,
			`{"properties":{"address":{"properties":{"zip":{"type":"string"}}}}}`,
			[]string{`/properties/address/properties/zip/type|type integer no longer accepted`}, false},
		{"items narrowed", `{"type":"array","items":{"type":"string"}}`, `{"type":"array","items":{"type":"string","maxLength":3}}`,
			[]string{`/items/maxLength|was none, now 3`}, false},
		{"prefixItems narrowed", `{"prefixItems":[{"type":"string"},{}]}`, `{"prefixItems":[{"type":"string"},{"type":"integer"}]}`,
			[]string{`/prefixItems/1/type|restricted to "integer"`}, false},
		{"items closed after the prefix", `{"prefixItems":[{}]}`, `{"prefixItems":[{}],"items":false}`,
			[]string{`/items|false and accepts nothing`}, false},
		{"uniqueItems added", `{"type":"array"}`, `{"type":"array","uniqueItems":true}`, []string{`/uniqueItems|must now be unique`}, false},
		{"local $ref followed", `{"properties":{"p":{"$ref":"#/$defs/P"}},"$defs":{"P":{"type":"object","properties":{"n":{"type":"string"}}}}}`,
			`{"properties":{"p":{"$ref":"#/$defs/P"}},"$defs":{"P":{"type":"object","required":["n"],"properties":{"n":{"type":"string"}}}}}`,
			[]string{`/properties/p/required/0|new required property "n"`}, false},
		{"recursive $ref ends", `{"$defs":{"N":{"type":"object","properties":{"next":{"$ref":"#/$defs/N"}}}},"$ref":"#/$defs/N"}`,
			`{"$defs":{"N":{"type":"object","properties":{"next":{"$ref":"#/$defs/N"}}}},"$ref":"#/$defs/N"}`, nil, false},
		{"$ref inlined", `{"properties":{"p":{"$ref":"#/$defs/S"}},"$defs":{"S":{"type":"string"}}}`,
			`{"properties":{"p":{"type":"string"}}}`, nil, false},
		{"allOf added", `{"type":"object"}`, `{"type":"object","allOf":[{"required":["a"]}]}`,
			[]string{`/allOf|cannot prove compatible: allOf was added or changed`}, true},
		{"anyOf removed", `{"anyOf":[{"type":"string"},{"type":"integer"}]}`, `{}`, nil, false},
		{"external $ref", `{"type":"object"}`, `{"$ref":"https://example.com/s.json"}`,
			[]string{`(root)|cannot prove compatible: a $ref that is not local`}, true},
		{"schema false", `{"type":"string"}`, `false`, []string{`(root)|accepts nothing`}, false},
		{"from false", `false`, `{"type":"string"}`, nil, false},
		{"from true", `true`, `{"required":["a"]}`, []string{`/required/0|new required property "a"`}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := BreakingChanges(json.RawMessage(tt.old), json.RawMessage(tt.new))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("BreakingChanges = %v; want %d changes %v", got, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				ptr, part, _ := strings.Cut(w, "|")
				s := got[i].String()
				if !strings.HasPrefix(s, ptr+": ") || !strings.Contains(s, part) {
					t.Errorf("change %d = %q; want at %s containing %q", i, s, ptr, part)
				}
				if got[i].Unproven != tt.unproven {
					t.Errorf("change %d Unproven = %v, want %v", i, got[i].Unproven, tt.unproven)
				}
			}
		})
	}
}

func TestBreakingChangesRefusesInvalidJSON(t *testing.T) {
	if _, err := BreakingChanges(json.RawMessage(`{`), json.RawMessage(`{}`)); err == nil {
		t.Error("no error for an invalid previous schema")
	}
}

// FuzzBreakingChanges checks that any pair of JSON documents is compared
// without a panic, and that a schema compared with itself shows no change
// that is not merely unproven.
func FuzzBreakingChanges(f *testing.F) {
	f.Add(`{"type":"object","required":["a"],"properties":{"a":{"type":"string","maxLength":3}}}`, `{"type":"object"}`)
	f.Add(`{"$defs":{"N":{"properties":{"n":{"$ref":"#/$defs/N"}}}},"$ref":"#/$defs/N"}`, `{"$ref":"#"}`)
	f.Add(`{"prefixItems":[{"enum":[1,2]}],"items":false}`, `{"prefixItems":[{"const":1.0}],"multipleOf":0}`)
	f.Add(`true`, `false`)
	f.Fuzz(func(t *testing.T, a, b string) {
		if !json.Valid([]byte(a)) || !json.Valid([]byte(b)) {
			return
		}
		if _, err := BreakingChanges(json.RawMessage(a), json.RawMessage(b)); err != nil {
			t.Fatalf("valid JSON refused: %v", err)
		}
		same, err := BreakingChanges(json.RawMessage(a), json.RawMessage(a))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range same {
			if !c.Unproven {
				t.Errorf("a schema compared with itself: %s", c)
			}
		}
	})
}

// ring is a schema of n definitions, each one whose property x refers
// to the next, the last back to the first.
func ring(n int) string {
	var b strings.Builder
	b.WriteString(`{"$ref":"#/$defs/d0","$defs":{`)
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"d%d":{"properties":{"x":{"$ref":"#/$defs/d%d"}}}`, i, (i+1)%n)
	}
	b.WriteString(`}}`)
	return b.String()
}

// TestBreakingChangesOfCoprimeRingsIsBounded: two recursive schemas whose
// $ref rings have coprime lengths pair their definitions 1,000 × 999 ways
// before a pair repeats; the comparison stops at its bound with one
// unproven change (an apply then asks for the change to be accepted)
// instead of nesting a million levels deep under the apply lock.
func TestBreakingChangesOfCoprimeRingsIsBounded(t *testing.T) {
	old, new := ring(1000), ring(999)
	if len(old) > MaxSchemaBytes {
		t.Fatalf("the ring is %d bytes, over MaxSchemaBytes: not a schema a manifest may hold", len(old))
	}
	start := time.Now()
	changes, err := BreakingChanges(json.RawMessage(old), json.RawMessage(new))
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the comparison took %v", took)
	}
	if len(changes) != 1 || !changes[0].Unproven || !strings.Contains(changes[0].Message, "too large or too recursive") {
		t.Fatalf("changes %+v, want one unproven change saying the comparison stopped", changes)
	}
	// A ring compared with itself repeats its first pair at once.
	if changes, err := BreakingChanges(json.RawMessage(old), json.RawMessage(old)); err != nil || len(changes) != 0 {
		t.Fatalf("a ring against itself: %+v, %v; want no change", changes, err)
	}
}

// itemsRing is a schema of n definitions in an array, each an array whose
// items are the next definition, the last's the first: about 27 bytes a
// definition, so that 64 KB hold more than 2,000.
func itemsRing(n int, description string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"description":%q,"$ref":"#/d/0","d":[`, description)
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"items":{"$ref":"#/d/%d"}}`, (i+1)%n)
	}
	b.WriteString(`]}`)
	return b.String()
}

// TestBreakingChangesOfALongRingIsExact: the comparison's bounds leave
// room for the longest ring a schema may hold, compared with itself after
// a change of its description only: no change, not an unproven one.
func TestBreakingChangesOfALongRingIsExact(t *testing.T) {
	old, new := itemsRing(2200, "before"), itemsRing(2200, "after")
	if len(new) > MaxSchemaBytes {
		t.Fatalf("the ring is %d bytes, over MaxSchemaBytes", len(new))
	}
	changes, err := BreakingChanges(json.RawMessage(old), json.RawMessage(new))
	if err != nil || len(changes) != 0 {
		t.Fatalf("a description changed: %d changes (%v), %v; want none", len(changes), changes, err)
	}
}

// TestBreakingChangesOfInlineSchemasMeetingOneRef: two inline subschemas of
// the previous schema now both refer to one definition. Each is compared
// with it: the narrowing of the second is not hidden by the first.
func TestBreakingChangesOfInlineSchemasMeetingOneRef(t *testing.T) {
	old := `{"properties":{"billing":{"properties":{"zip":{"type":"string"}}},
		"shipping":{"properties":{"zip":{"type":["string","integer"]}}}}}`
	new := `{"$defs":{"A":{"properties":{"zip":{"type":"string"}}}},
		"properties":{"billing":{"$ref":"#/$defs/A"},"shipping":{"$ref":"#/$defs/A"}}}`
	changes, err := BreakingChanges(json.RawMessage(old), json.RawMessage(new))
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 1 || changes[0].Pointer != "/properties/shipping/properties/zip/type" || changes[0].Unproven {
		t.Fatalf("changes %+v, want integer no longer accepted at shipping's zip", changes)
	}
}
