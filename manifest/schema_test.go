package manifest

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func TestCompileSchema(t *testing.T) {
	tests := []struct {
		name   string
		schema string
		errMsg string // "" for a schema that compiles
	}{
		{"object", `{"type":"object","properties":{"a":{"type":"integer"}}}`, ""},
		{"true", `true`, ""},
		{"empty", `{}`, ""},
		{"meta-schema $ref is bundled, not fetched", `{"$ref":"https://json-schema.org/draft/2020-12/schema"}`, ""},
		{"own $id with local $ref", `{"$id":"https://example.com/p.json","$defs":{"s":{"type":"string"}},"$ref":"https://example.com/p.json#/$defs/s"}`, ""},
		{"depth 32", nested(32), ""},
		{"depth 33", nested(33), "nested deeper than 32 levels"},
		{"arrays count as depth", `{"allOf":[` + strings.Repeat("[", 31) + strings.Repeat("]", 31) + `]}`, "nested deeper than 32 levels"},
		{"too large", `{"description":"` + strings.Repeat("x", MaxSchemaBytes) + `"}`, "larger than 64 KiB"},
		{"not JSON", `{"type":`, "not valid JSON"},
		{"trailing data", `{} {}`, "not valid JSON"},
		{"type 12", `{"type":12}`, "at /type"},
		{"minLength x", `{"minLength":"x"}`, "at /minLength: got string, want integer"},
		{"required not array", `{"properties":{"a":{"required":"b"}}}`, "at /properties/a/required"},
		{"reference cycle", `{"$ref":"#"}`, "causing reference cycle"},
		{"reference cycle in $defs", `{"$defs":{"a":{"$ref":"#/$defs/a"}},"anyOf":[{"$ref":"#/$defs/a"}]}`, "causing reference cycle"},
		{"recursive schema", `{"type":"object","properties":{"child":{"$ref":"#"}}}`, ""},
		{"remote $ref", `{"$ref":"https://example.com/s.json"}`, `reference to "https://example.com/s.json" is not allowed: the schema must be self-contained`},
		{"remote $ref with fragment", `{"$ref":"http://example.com/s.json#/a"}`, `"http://example.com/s.json" is not allowed`},
		{"file $ref", `{"$ref":"file:///etc/hosts"}`, "remote references are never fetched"},
		{"remote $schema", `{"$schema":"https://example.com/meta.json"}`, "remote references are never fetched"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sch, err := CompileSchema(json.RawMessage(tt.schema))
			if tt.errMsg == "" {
				if err != nil || sch == nil {
					t.Fatalf("CompileSchema: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("CompileSchema accepted %s", tt.schema)
			}
			if !strings.Contains(err.Error(), tt.errMsg) {
				t.Errorf("error %q, want it to contain %q", err, tt.errMsg)
			}
			limit := strings.Contains(tt.errMsg, "larger than") || strings.Contains(tt.errMsg, "deeper than")
			if errors.Is(err, ErrSchemaLimit) != limit {
				t.Errorf("errors.Is(%v, ErrSchemaLimit) = %v", err, !limit)
			}
			if strings.Contains(err.Error(), "mem://") {
				t.Errorf("error %q shows the internal schema location", err)
			}
		})
	}
}

func TestCompileSchemaDraft(t *testing.T) {
	// The array form of "items" is valid in draft-07 but not in 2020-12, the
	// default draft.
	const items = `"items":[{"type":"string"}]`
	if _, err := CompileSchema(json.RawMessage(`{` + items + `}`)); err == nil {
		t.Error("tuple items accepted under the default draft 2020-12")
	}
	sch, err := CompileSchema(json.RawMessage(`{"$schema":"http://json-schema.org/draft-07/schema#",` + items + `}`))
	if err != nil {
		t.Fatalf("draft-07 schema: %v", err)
	}
	if errs := ValidateData(sch, json.RawMessage(`[1]`)); len(errs) != 1 || errs[0].Pointer != "/0" {
		t.Errorf("draft-07 tuple validation: %+v", errs)
	}
}

func TestValidateData(t *testing.T) {
	sch, err := CompileSchema(json.RawMessage(`{
		"type": "object",
		"required": ["id", "name"],
		"properties": {
			"id": {"type": "string"},
			"name": {"type": "string", "minLength": 1},
			"address": {
				"type": "object",
				"properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}
			},
			"tags": {"type": "array", "items": {"type": "string"}},
			"a/b~c": {"type": "integer"},
			"ref": {"$ref": "#/$defs/positive"}
		},
		"$defs": {"positive": {"type": "number", "exclusiveMinimum": 0}},
		"additionalProperties": false
	}`))
	if err != nil {
		t.Fatalf("CompileSchema: %v", err)
	}
	tests := []struct {
		name     string
		data     string
		pointers []string // expected, in order
		messages []string // substrings, one per pointer
	}{
		{"valid", `{"id":"p-1","name":"Ada","address":{"city":"London"},"tags":["x"],"ref":1.5}`, nil, nil},
		{"missing required at root", `{"id":"p-1"}`, []string{""}, []string{"missing property 'name'"}},
		{"wrong root type", `[]`, []string{""}, []string{"got array, want object"}},
		{"nested", `{"id":"p-1","name":"","address":{"city":5,"zip":"abc"},"tags":["x",3]}`,
			[]string{"/address/city", "/address/zip", "/name", "/tags/1"},
			[]string{"got number, want string", "does not match pattern", "minLength", "got number, want string"}},
		{"escaped pointer", `{"id":"p","name":"n","a/b~c":"x"}`, []string{"/a~1b~0c"}, []string{"want integer"}},
		{"through $ref", `{"id":"p","name":"n","ref":-1}`, []string{"/ref"}, []string{"exclusiveMinimum"}},
		{"additional property", `{"id":"p","name":"n","extra":1}`, []string{""}, []string{"additional properties 'extra' not allowed"}},
		{"not JSON", `{"id":`, []string{""}, []string{"data is not valid JSON"}},
		{"trailing data", `{} 1`, []string{""}, []string{"data is not valid JSON"}},
		{"empty", ``, []string{""}, []string{"data is not valid JSON"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := ValidateData(sch, json.RawMessage(tt.data))
			var pointers []string
			for _, e := range errs {
				pointers = append(pointers, e.Pointer)
			}
			if !reflect.DeepEqual(pointers, tt.pointers) {
				t.Fatalf("pointers %q, want %q; errors %+v", pointers, tt.pointers, errs)
			}
			for i, e := range errs {
				if !strings.Contains(e.Message, tt.messages[i]) {
					t.Errorf("error at %q: %q, want it to contain %q", e.Pointer, e.Message, tt.messages[i])
				}
			}
		})
	}
}

func TestValidateDataLargeNumbers(t *testing.T) {
	// Numbers are compared exactly, not as float64.
	sch, err := CompileSchema(json.RawMessage(`{"type":"integer","maximum":9007199254740993}`))
	if err != nil {
		t.Fatalf("CompileSchema: %v", err)
	}
	if errs := ValidateData(sch, json.RawMessage(`9007199254740993`)); len(errs) != 0 {
		t.Errorf("maximum itself refused: %+v", errs)
	}
	if errs := ValidateData(sch, json.RawMessage(`9007199254740994`)); len(errs) != 1 {
		t.Errorf("maximum + 1: %+v, want one error", errs)
	}
}

func TestJSONPointer(t *testing.T) {
	tests := []struct {
		tokens []string
		want   string
	}{
		{nil, ""},
		{[]string{"a"}, "/a"},
		{[]string{"a", "0", ""}, "/a/0/"},
		{[]string{"a/b", "~c"}, "/a~1b/~0c"},
	}
	for _, tt := range tests {
		if got := jsonPointer(tt.tokens); got != tt.want {
			t.Errorf("jsonPointer(%q) = %q, want %q", tt.tokens, got, tt.want)
		}
	}
}

func TestValidateDataConcurrently(t *testing.T) {
	// The publish path shares one compiled schema between requests.
	sch, err := CompileSchema(json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","maximum":10}}}`))
	if err != nil {
		t.Fatalf("CompileSchema: %v", err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				n := i*50 + j
				errs := ValidateData(sch, json.RawMessage(`{"n":`+strconv.Itoa(n)+`}`))
				if (n > 10) != (len(errs) == 1) {
					t.Errorf("n=%d: %+v", n, errs)
				}
			}
		}()
	}
	wg.Wait()
}
