package manifest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Schemas whose events could not fit the validation budget are refused at
// apply, naming where in the data the work multiplies; CompileSchema still
// compiles them (a declaration stored before is published under the
// validation budget).
func TestApplyRefusesSchemasThatMultiplyWork(t *testing.T) {
	for _, tt := range []struct {
		name, schema, msg string
	}{
		{"fan-out under items", fanOutItemsSchema(),
			"schema may apply more than 256 subschemas to one value of the data (at /(any later item))"},
		{"doubling recursion", doublingSchema,
			"schema applies itself more times at each level of the data (at /(any later item)/(any later item))"},
		{"fan-out under a named property", `{"$defs":` + fanOutDefs(9) + `,"properties":{"a":{"properties":{"b":{"$ref":"#/$defs/d0"}}}}}`,
			"schema may apply more than 256 subschemas to one value of the data (at /a/b)"},
		{"a pattern and additionalProperties doubling each level",
			`{"patternProperties":{"^a":{"$ref":"#"}},"additionalProperties":{"$ref":"#"}}`,
			"schema applies itself more times at each level of the data (at /(any other member)/(any other member))"},
		{"items and contains doubling each level", `{"items":{"$ref":"#"},"contains":{"$ref":"#"}}`,
			"schema applies itself more times at each level"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := CompileSchema(json.RawMessage(tt.schema)); err != nil {
				t.Fatalf("CompileSchema = %v, want compiled", err)
			}
			doc := validDoc()
			event(doc, 0)["dataSchema"] = json.RawMessage(tt.schema)
			start := time.Now()
			_, err := Parse("contacts.json", render(t, doc))
			if took := time.Since(start); took > time.Second {
				t.Errorf("refusing took %v", took)
			}
			wantProblem(t, problemsOf(t, err), "events[0].dataSchema", "dataSchema is refused: "+tt.msg)
		})
	}
}

// fanOutDefs returns $defs of levels oneOf definitions, each referring twice
// to the next.
func fanOutDefs(levels int) string {
	var defs []string
	for i := range levels {
		defs = append(defs, fmt.Sprintf(`"d%d":{"oneOf":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]}`, i, i+1, i+1))
	}
	defs = append(defs, fmt.Sprintf(`"d%d":{"type":"string"}`, levels))
	return "{" + strings.Join(defs, ",") + "}"
}

func TestApplyAcceptsRealisticSchemas(t *testing.T) {
	for _, schema := range []string{
		typicalSchema,
		// A tree: recursion that applies itself once per level.
		`{"type":"object","properties":{"children":{"type":"array","items":{"$ref":"#"}},"left":{"$ref":"#"},"right":{"$ref":"#"}}}`,
		// A linked list through $dynamicRef.
		`{"$dynamicAnchor":"node","type":"object","properties":{"next":{"$dynamicRef":"#node"}}}`,
		// A choice of shapes, each with its own fields.
		`{"oneOf":[` + strings.Repeat(`{"type":"object","required":["kind"],"properties":{"kind":{"const":"a"},"x":{"anyOf":[{"type":"string"},{"type":"integer"}]}}},`, 40) +
			`{"type":"object"}]}`,
		// Items with a prefix, contains and uniqueItems.
		`{"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":{"type":"number"},"contains":{"type":"integer"},"uniqueItems":true}`,
		// The expansion budget's own example: a definition used 200 times.
		`{"$defs":{"a":{"type":"object","properties":{"x":{"type":"string"}}}},"properties":{` + usesOf(200) + `}}`,
	} {
		doc := validDoc()
		event(doc, 0)["dataSchema"] = json.RawMessage(schema)
		if _, err := Parse("contacts.json", render(t, doc)); err != nil {
			t.Errorf("schema %.80s… refused: %v", schema, err)
		}
	}
}

func usesOf(n int) string {
	uses := make([]string, n)
	for i := range uses {
		uses[i] = fmt.Sprintf(`"p%d":{"$ref":"#/$defs/a"}`, i)
	}
	return strings.Join(uses, ",")
}

// Every example and deployed manifest is accepted.
func TestApplyAcceptsExampleManifests(t *testing.T) {
	for _, paths := range [][]string{{"../examples/manifests", "../examples/orders/manifest.json"}, {"../deploy/manifests"}} {
		ms, err := Load(paths...)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) < 3 {
			t.Errorf("%v: loaded %d manifests, want at least 3", paths, len(ms))
		}
	}
}
