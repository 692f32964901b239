package manifest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// fanOutSchema returns a schema of levels definitions, each referring twice
// to the next: under 2 KB of JSON standing for 2^levels subschemas.
func fanOutSchema(keyword string, levels int) string {
	var defs []string
	for i := range levels {
		defs = append(defs, fmt.Sprintf(`"d%d":{%q:[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]}`, i, keyword, i+1, i+1))
	}
	defs = append(defs, fmt.Sprintf(`"d%d":{"type":"string"}`, levels))
	return `{"$defs":{` + strings.Join(defs, ",") + `},"$ref":"#/$defs/d0"}`
}

// Such a schema took 55 s at some 1.3 KB and doubled per level; now it is
// refused at once for its expanded size.
func TestCompileSchemaFanOutRefused(t *testing.T) {
	for _, keyword := range []string{"anyOf", "allOf", "oneOf"} {
		schema := fanOutSchema(keyword, 24)
		start := time.Now()
		_, err := CompileSchema(json.RawMessage(schema))
		took := time.Since(start)
		if !errors.Is(err, ErrSchemaLimit) || !strings.Contains(err.Error(), "too large once its references are expanded") {
			t.Errorf("%s: CompileSchema = %v, want an expanded-size limit error", keyword, err)
		}
		if took > MaxCompileTime {
			t.Errorf("%s: refusing took %v", keyword, took)
		}
	}
}

func TestCompileSchemaExpansionWithinBudget(t *testing.T) {
	var uses []string
	for i := range 200 {
		uses = append(uses, fmt.Sprintf(`"p%d":{"$ref":"#/$defs/a"}`, i))
	}
	accepted := []string{
		fanOutSchema("anyOf", 8),
		// Recursion counts once per reference: a tree of any depth.
		`{"type":"object","properties":{"children":{"type":"array","items":{"$ref":"#"}},"left":{"$ref":"#"},"right":{"$ref":"#"}}}`,
		// A definition used many times, well within the budget.
		`{"$defs":{"a":{"type":"object","properties":{"x":{"type":"string"},"y":{"type":"string"}}}},"properties":{` +
			strings.Join(uses, ",") + `}}`,
	}
	for _, schema := range accepted {
		if _, err := CompileSchema(json.RawMessage(schema)); err != nil {
			t.Errorf("CompileSchema(%.60s…) = %v", schema, err)
		}
	}
	// The walk counts each use of a definition: in a 3-level fan-out each
	// allOf entry is its own subschema plus its target, so d3 = 1,
	// d2 = 1+2·(1+d3) = 5, d1 = 13, d0 = 29, and the root adds itself.
	sch, err := CompileSchema(json.RawMessage(fanOutSchema("allOf", 3)))
	if err != nil {
		t.Fatal(err)
	}
	e := &expansion{limit: 1000, deadline: time.Now().Add(time.Minute),
		sizes: map[*jsonschema.Schema]int{}, inside: map[*jsonschema.Schema]bool{}}
	if n := e.size(sch); n != 30 {
		t.Errorf("expanded size of a 3-level fan-out = %d, want 30", n)
	}
}

func TestCompileSchemaTimeBudget(t *testing.T) {
	_, err := compileSchema(json.RawMessage(`{"type":"object"}`), compileBudget{maxExpanded: MaxExpandedSchema, maxTime: 0})
	if !errors.Is(err, ErrSchemaLimit) || !strings.Contains(err.Error(), "took longer than") {
		t.Fatalf("compileSchema with no time = %v, want a time limit error", err)
	}
}

// A manifest with such a schema is refused naming the event.
func TestManifestFanOutSchemaNamesTheEvent(t *testing.T) {
	doc := `{"app":"contacts","endpoint":"https://contacts.internal","events":[` +
		`{"name":"person.updated","version":1,"subject":"person","dataSchema":{"type":"object"}},` +
		`{"name":"person.bomb","version":2,"subject":"person","dataSchema":` + fanOutSchema("allOf", 30) + `}]}`
	_, err := Parse("contacts.json", []byte(doc))
	if err == nil {
		t.Fatal("manifest with a fan-out schema accepted")
	}
	msg := err.Error()
	if !strings.Contains(msg, `event "person.bomb" v2: dataSchema is refused`) || !strings.Contains(msg, "expanded") {
		t.Errorf("error %q, want it to name person.bomb v2 and the expanded size", msg)
	}
	if strings.Contains(msg, "person.updated") {
		t.Errorf("error %q blames the valid event too", msg)
	}
}

// The schema path never panics and a compiled schema is always cheap to
// validate against the probe values.
func FuzzCompileSchema(f *testing.F) {
	for _, s := range []string{
		`{"type":"object","properties":{"n":{"minimum":1e10}}}`,
		fanOutSchema("anyOf", 4),
		`{"$ref":"#"}`,
		`{"minimum":1e999999}`,
		`{"$defs":{"a":{"$dynamicAnchor":"x","items":{"$dynamicRef":"#x"}}},"$ref":"#/$defs/a"}`,
		`{"properties":{"a":{"$ref":"#/properties/b"},"b":{"$ref":"#/properties/a"}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		sch, err := CompileSchema(raw)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		for _, probe := range []string{`null`, `1e5`, `"x"`, `[1,[2]]`, `{"a":{"b":1}}`} {
			for _, e := range ValidateData(sch, json.RawMessage(probe)) {
				if strings.Contains(e.Message, "could not be validated") {
					t.Fatalf("validator panicked on %s: %s", probe, e.Message)
				}
			}
		}
	})
}
