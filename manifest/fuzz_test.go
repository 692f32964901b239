package manifest

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func FuzzParse(f *testing.F) {
	for _, name := range []string{"contacts.json", "billing.json", "audit-log.yaml"} {
		data, err := os.ReadFile(filepath.Join("..", "examples", "manifests", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, filepath.Ext(name) == ".yaml")
	}
	f.Add(render(f, validDoc()), false)
	seeds := []string{
		`{"app":"a","endpoint":"http://h"}`,
		`{"app":"a","endpoint":"http://h//","deliveryPath":"/x","events":[{"name":"e","version":1,"subject":"s","place":{"k":[1,2.50,"<&>"]},"automation":false,"dataSchema":{"$defs":{"x":{"type":"string"}},"$ref":"#/$defs/x"}}]}`,
		`{"app":"a","endpoint":"http://h","events":[{"name":"e","version":1.5,"subject":"s","dataSchema":{"type":12}}]}`,
		`{"app":"a","endpoint":"http://h","events":[{"name":"e","version":1,"subject":"s","dataSchema":{"$ref":"https://example.com/x"}}]}`,
		`{"app":"a","endpoint":"http://h","subscribes":[{"type":"b.c","version":1},{"type":"b.c","version":1}]}`,
		`{"app":"a","app":"b"}`,
		`{"app":"a"} trailing`,
		`[]`,
		`{`,
		"app: a\nendpoint: http://h\nevents:\n  - {name: e, version: 1, subject: s, dataSchema: true}\n",
		"app: a\n---\napp: b\n",
		"a: &x [*x]\n",
	}
	for _, s := range seeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}

	f.Fuzz(func(t *testing.T, data []byte, asYAML bool) {
		source := "fuzz.json"
		if asYAML {
			source = "fuzz.yaml"
		}
		m, err := Parse(source, data)
		if err != nil {
			var verr *ValidationError
			if !errors.As(err, &verr) || len(verr.Problems) == 0 {
				t.Fatalf("Parse error %T without problems: %v", err, err)
			}
			if m != nil {
				t.Fatal("Parse returned a manifest with an error")
			}
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("parsed manifest does not validate: %v", err)
		}
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("marshal parsed manifest: %v", err)
		}
		again, err := Parse("again.json", out)
		if err != nil {
			t.Fatalf("re-parse of own JSON %s: %v", out, err)
		}
		if again.Hash() != m.Hash() {
			t.Fatalf("hash changed on re-parse of %s", out)
		}
	})
}

// FuzzValidationBudget: for any schema CompileSchema accepts and any data,
// counting the validation's steps, checking the schema's worst case and
// validating within the budget never panic, and a budget refusal takes no
// steps from the request.
func FuzzValidationBudget(f *testing.F) {
	for _, s := range []struct{ schema, data string }{
		{typicalSchema, typicalEvent(2)},
		{doublingSchema, `[[[[]]]]`},
		{fanOutItemsSchema(), `["x","y"]`},
		{`{"$dynamicAnchor":"n","type":"array","items":{"$dynamicRef":"#n"}}`, `[[1],[]]`},
		{`{"$schema":"http://json-schema.org/draft-07/schema#","items":[{"type":"string"}],"additionalItems":{"$ref":"#"},"dependencies":{"a":{"required":["b"]}}}`, `["a",[1],{"a":1}]`},
		{`{"$schema":"https://json-schema.org/draft/2019-09/schema","$recursiveAnchor":true,"items":{"$recursiveRef":"#"}}`, `[[[]]]`},
		{`{"patternProperties":{"^a":{"enum":[1,[2]]}},"propertyNames":{"pattern":"^[a-z]+$"},"unevaluatedProperties":false}`, `{"ab":[2],"b":1}`},
		{`{"if":{"type":"string"},"then":{"minLength":2},"else":{"const":{"a":[1]}},"not":{"contains":{"type":"null"},"minContains":2}}`, `{"a":[1]}`},
	} {
		f.Add(s.schema, s.data)
	}
	f.Fuzz(func(t *testing.T, schema, data string) {
		sch, err := CompileSchema(json.RawMessage(schema))
		if err != nil {
			return
		}
		_ = checkWorstCase(sch, time.Now().Add(MaxCompileTime))
		b := NewBudget(MaxValidationSteps)
		_, err = ValidateDataWithin(sch, json.RawMessage(data), b)
		if err != nil && b.Left() != MaxValidationSteps {
			t.Errorf("a refused event took %d steps", MaxValidationSteps-b.Left())
		}
		if err != nil && !errors.Is(err, ErrValidationBudget) {
			t.Errorf("error %v is not ErrValidationBudget", err)
		}
	})
}
