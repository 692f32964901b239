package manifest

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestParseExamples(t *testing.T) {
	tests := []struct {
		file       string
		app        string
		events     []string // "<name>@<version>"
		subscribes []string // "<type>@<version>"
	}{
		{"contacts.json", "contacts", []string{"person.updated@1", "person.deleted@1"}, []string{"billing.invoice.paid@1"}},
		{"billing.json", "billing", []string{"invoice.paid@1"}, []string{"contacts.person.updated@1", "contacts.person.deleted@1"}},
		{"audit-log.yaml", "audit-log", []string{"entry.recorded@1"}, []string{"contacts.person.updated@1", "billing.invoice.paid@1"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join("..", "examples", "manifests", tt.file)
			m, err := ParseFile(path)
			if err != nil {
				t.Fatalf("ParseFile: %v", err)
			}
			if m.App != tt.app || m.Source != path {
				t.Errorf("app %q source %q, want %q %q", m.App, m.Source, tt.app, path)
			}
			if m.Endpoint != "http://127.0.0.1:8089" || m.Path() != DefaultDeliveryPath {
				t.Errorf("endpoint %q path %q", m.Endpoint, m.Path())
			}
			var events, subs []string
			for _, ev := range m.Events {
				events = append(events, ev.Name+"@"+strconv.Itoa(ev.Version))
				if _, err := CompileSchema(ev.DataSchema); err != nil {
					t.Errorf("event %s: schema does not compile: %v", ev.Name, err)
				}
			}
			for _, s := range m.Subscribes {
				subs = append(subs, s.Type+"@"+strconv.Itoa(s.Version))
			}
			if strings.Join(events, ",") != strings.Join(tt.events, ",") {
				t.Errorf("events %v, want %v", events, tt.events)
			}
			if strings.Join(subs, ",") != strings.Join(tt.subscribes, ",") {
				t.Errorf("subscribes %v, want %v", subs, tt.subscribes)
			}
		})
	}
}

func TestParseJSONAndYAML(t *testing.T) {
	const js = `{
	  "app": "contacts",
	  "endpoint": "https://contacts.internal:8443/",
	  "deliveryPath": "/hooks/herald",
	  "events": [
	    {"name": "person.updated", "version": 1, "subject": "person", "title": "Person updated",
	     "automation": false, "place": {"kind": "project"},
	     "dataSchema": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}},
	    {"name": "person.updated", "version": 2, "subject": "person", "place": null, "dataSchema": true}
	  ],
	  "subscribes": [{"type": "billing.invoice.paid", "version": 1}]
	}`
	const yml = `
app: contacts
endpoint: https://contacts.internal:8443/
deliveryPath: /hooks/herald
events:
  - name: person.updated
    version: 1
    subject: person
    title: Person updated
    automation: false
    place: {kind: project}
    dataSchema:
      properties:
        name: {type: string}
      required: [name]
      type: object
  - {name: person.updated, version: 2, subject: person, place: null, dataSchema: true}
subscribes:
  - type: billing.invoice.paid
    version: 1
`
	inputs := []struct{ source, data string }{
		{"contacts.json", js},
		{"contacts.yaml", yml},
		{"contacts.yml", yml},
		{"", js},  // JSON by content
		{"", yml}, // YAML by content
	}
	var hashes []string
	for _, in := range inputs {
		m, err := Parse(in.source, []byte(in.data))
		if err != nil {
			t.Fatalf("Parse(%q): %v", in.source, err)
		}
		if m.Source != in.source {
			t.Errorf("Source %q, want %q", m.Source, in.source)
		}
		if m.Endpoint != "https://contacts.internal:8443" {
			t.Errorf("%s: endpoint %q, want the trailing slash removed", in.source, m.Endpoint)
		}
		if m.Path() != "/hooks/herald" {
			t.Errorf("%s: path %q", in.source, m.Path())
		}
		if len(m.Events) != 2 || len(m.Subscribes) != 1 {
			t.Fatalf("%s: %d events, %d subscriptions", in.source, len(m.Events), len(m.Subscribes))
		}
		ev := m.Events[0]
		if ev.IsAutomation() || !ev.HasPlace() || ev.Title != "Person updated" {
			t.Errorf("%s: event 0 = %+v", in.source, ev)
		}
		if ev2 := m.Events[1]; !ev2.IsAutomation() || ev2.HasPlace() || ev2.Place != nil {
			t.Errorf("%s: event 1 = %+v, want automation by default and no place", in.source, ev2)
		}
		if err := m.Validate(); err != nil {
			t.Errorf("%s: Validate after Parse: %v", in.source, err)
		}
		hashes = append(hashes, m.Hash())
	}
	for i, h := range hashes {
		if h != hashes[0] {
			t.Errorf("input %d hash %s differs from JSON hash %s", i, h, hashes[0])
		}
	}
}

func TestParseAccepts(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(doc map[string]any)
	}{
		{"no subscribes", func(d map[string]any) { delete(d, "subscribes") }},
		{"no events", func(d map[string]any) { d["events"] = nil }},
		{"80-character app id", func(d map[string]any) { d["app"] = "a" + strings.Repeat("-", 78) + "z" }},
		{"120-character event name", func(d map[string]any) { event(d, 0)["name"] = strings.Repeat("a", 120) }},
		{"same name, other version", func(d map[string]any) { event(d, 1)["name"] = "person.updated"; event(d, 1)["version"] = 2 }},
		{"version 1000000", func(d map[string]any) { event(d, 0)["version"] = 1000000 }},
		{"subject with digits and underscore", func(d map[string]any) { event(d, 0)["subject"] = "person_v2-x" }},
		{"http endpoint with path", func(d map[string]any) { d["endpoint"] = "http://127.0.0.1:8089/contacts" }},
		{"schema depth 32", func(d map[string]any) { event(d, 0)["dataSchema"] = json.RawMessage(nested(MaxSchemaDepth)) }},
		{"draft-07 schema", func(d map[string]any) {
			// Tuple "items" is valid in draft-07 only (see TestCompileSchemaDraft).
			event(d, 0)["dataSchema"] = json.RawMessage(`{"$schema":"http://json-schema.org/draft-07/schema#","items":[{"type":"string"}]}`)
		}},
		{"local $ref", func(d map[string]any) {
			event(d, 0)["dataSchema"] = json.RawMessage(`{"$defs":{"n":{"type":"string"}},"properties":{"name":{"$ref":"#/$defs/n"}}}`)
		}},
		{"null optional fields", func(d map[string]any) {
			event(d, 0)["title"] = nil
			event(d, 0)["automation"] = nil
			d["deliveryPath"] = nil
		}},
		{"any place", func(d map[string]any) { event(d, 0)["place"] = []any{1, "two"} }},
		{"subscribing to own event", func(d map[string]any) { subscription(d, 0)["type"] = "contacts.person.updated" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := validDoc()
			tt.mutate(doc)
			if _, err := Parse("test.json", render(t, doc)); err != nil {
				t.Fatalf("Parse: %v", err)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	valid := string(render(t, validDoc()))
	tests := []struct {
		name   string
		source string               // default "test.json"
		raw    string               // the manifest text, if set
		mutate func(map[string]any) // else validDoc with this change
		field  string
		msg    string
	}{
		// Syntax and structure.
		{name: "malformed JSON", raw: `{"app": "contacts",`, msg: "not valid JSON"},
		{name: "malformed JSON position", raw: "{\n  \"app\": x\n}", msg: "at line 2, column 10"},
		{name: "trailing garbage", raw: valid + " x", msg: "unexpected data after the JSON value"},
		{name: "second object", raw: valid + valid, msg: "unexpected data after the JSON value"},
		{name: "empty", raw: "", source: "test.json", msg: "not valid JSON"},
		{name: "not an object", raw: `[1, 2]`, msg: "must be a JSON object"},
		{name: "oversized", raw: `{"app":"contacts","endpoint":"http://h","events":[],"subscribes":[],"deliveryPath":"/` + strings.Repeat("a", MaxManifestBytes) + `"}`, msg: "larger than 1 MiB"},
		{name: "unknown top-level field", mutate: func(d map[string]any) { d["colour"] = "blue" }, field: "colour", msg: `unknown field "colour"`},
		{name: "case-folded field", mutate: func(d map[string]any) { d["App"] = "x" }, field: "App", msg: `unknown field "App"`},
		{name: "unknown event field", mutate: func(d map[string]any) { event(d, 1)["schema"] = map[string]any{} }, field: "events[1].schema", msg: `unknown field "schema"`},
		{name: "deprecated not a boolean", mutate: func(d map[string]any) { event(d, 0)["deprecated"] = "yes" }, field: "events[0].deprecated", msg: "must be true or false"},
		{name: "unknown subscription field", mutate: func(d map[string]any) { subscription(d, 0)["versoin"] = 1 }, field: "subscribes[0].versoin", msg: "unknown field"},
		{name: "odd field name", mutate: func(d map[string]any) { d["a b"] = 1 }, field: `["a b"]`, msg: "unknown field"},
		{name: "duplicate field", raw: strings.Replace(valid, `{"app":"contacts"`, `{"app":"contacts","app":"billing"`, 1), field: "app", msg: "more than once"},
		{name: "app not a string", mutate: func(d map[string]any) { d["app"] = 5 }, field: "app", msg: "must be a string"},
		{name: "events not an array", mutate: func(d map[string]any) { d["events"] = map[string]any{} }, field: "events", msg: "must be an array"},
		{name: "event not an object", mutate: func(d map[string]any) { d["events"] = []any{"person.updated"} }, field: "events[0]", msg: "must be an object"},
		{name: "automation not a bool", mutate: func(d map[string]any) { event(d, 0)["automation"] = "yes" }, field: "events[0].automation", msg: "true or false"},

		// App ids.
		{name: "app missing", mutate: func(d map[string]any) { delete(d, "app") }, field: "app", msg: "is required"},
		{name: "app upper case", mutate: func(d map[string]any) { d["app"] = "Contacts" }, field: "app", msg: "not a valid app id"},
		{name: "app starts with digit", mutate: func(d map[string]any) { d["app"] = "1contacts" }, field: "app", msg: "not a valid app id"},
		{name: "app starts with dash", mutate: func(d map[string]any) { d["app"] = "-contacts" }, field: "app", msg: "not a valid app id"},
		{name: "app with underscore", mutate: func(d map[string]any) { d["app"] = "con_tacts" }, field: "app", msg: "not a valid app id"},
		{name: "app with dot", mutate: func(d map[string]any) { d["app"] = "con.tacts" }, field: "app", msg: "not a valid app id"},
		{name: "app 81 characters", mutate: func(d map[string]any) { d["app"] = strings.Repeat("a", 81) }, field: "app", msg: "not a valid app id"},

		// Endpoint and delivery path.
		{name: "endpoint missing", mutate: func(d map[string]any) { delete(d, "endpoint") }, field: "endpoint", msg: "is required"},
		{name: "endpoint host:port", mutate: func(d map[string]any) { d["endpoint"] = "127.0.0.1:8089" }, field: "endpoint", msg: "absolute http or https URL"},
		{name: "endpoint relative", mutate: func(d map[string]any) { d["endpoint"] = "/contacts" }, field: "endpoint", msg: "absolute http or https URL"},
		{name: "endpoint ftp", mutate: func(d map[string]any) { d["endpoint"] = "ftp://files.internal" }, field: "endpoint", msg: "http or https URL, not ftp"},
		{name: "endpoint opaque", mutate: func(d map[string]any) { d["endpoint"] = "http:contacts" }, field: "endpoint", msg: "absolute http or https URL"},
		{name: "endpoint without host", mutate: func(d map[string]any) { d["endpoint"] = "https:///deliver" }, field: "endpoint", msg: "must name a host"},
		{name: "endpoint port only", mutate: func(d map[string]any) { d["endpoint"] = "http://:8089" }, field: "endpoint", msg: "must name a host"},
		{name: "endpoint with query", mutate: func(d map[string]any) { d["endpoint"] = "https://contacts.internal?token=x" }, field: "endpoint", msg: "must not contain a query"},
		{name: "endpoint with empty query", mutate: func(d map[string]any) { d["endpoint"] = "https://contacts.internal/x?" }, field: "endpoint", msg: "must not contain a query"},
		{name: "endpoint with fragment", mutate: func(d map[string]any) { d["endpoint"] = "https://contacts.internal/x#top" }, field: "endpoint", msg: "must not contain a fragment"},
		{name: "endpoint with user", mutate: func(d map[string]any) { d["endpoint"] = "https://user:pw@contacts.internal" }, field: "endpoint", msg: "user information"},
		{name: "endpoint too long", mutate: func(d map[string]any) { d["endpoint"] = "https://h/" + strings.Repeat("a", MaxEndpointLen) + "b" }, field: "endpoint", msg: "longer than"},
		{name: "deliveryPath relative", mutate: func(d map[string]any) { d["deliveryPath"] = "deliver" }, field: "deliveryPath", msg: "must start with /"},
		{name: "deliveryPath with query", mutate: func(d map[string]any) { d["deliveryPath"] = "/deliver?x=1" }, field: "deliveryPath", msg: "query or fragment"},
		{name: "deliveryPath with space", mutate: func(d map[string]any) { d["deliveryPath"] = "/de liver" }, field: "deliveryPath", msg: "spaces or control"},
		{name: "deliveryPath bad escape", mutate: func(d map[string]any) { d["deliveryPath"] = "/de%zzliver" }, field: "deliveryPath", msg: "not a valid URL path"},

		// Event names, versions, subjects.
		{name: "event name missing", mutate: func(d map[string]any) { delete(event(d, 0), "name") }, field: "events[0].name", msg: "is required"},
		{name: "event name upper case", mutate: func(d map[string]any) { event(d, 0)["name"] = "Person.updated" }, field: "events[0].name", msg: "not a valid event name"},
		{name: "event name empty segment", mutate: func(d map[string]any) { event(d, 0)["name"] = "person..updated" }, field: "events[0].name", msg: "not a valid event name"},
		{name: "event name trailing dot", mutate: func(d map[string]any) { event(d, 0)["name"] = "person." }, field: "events[0].name", msg: "not a valid event name"},
		{name: "event name segment starts with digit", mutate: func(d map[string]any) { event(d, 0)["name"] = "person.1st" }, field: "events[0].name", msg: "not a valid event name"},
		{name: "event name with space", mutate: func(d map[string]any) { event(d, 0)["name"] = "person updated" }, field: "events[0].name", msg: "not a valid event name"},
		{name: "event name 121 characters", mutate: func(d map[string]any) { event(d, 0)["name"] = strings.Repeat("a", 121) }, field: "events[0].name", msg: "longer than 120"},
		{name: "duplicate event", mutate: func(d map[string]any) { event(d, 1)["name"] = "person.updated" }, field: "events[1]", msg: `event "person.updated" v1: is declared twice (first at events[0])`},
		{name: "version missing", mutate: func(d map[string]any) { delete(event(d, 0), "version") }, field: "events[0].version", msg: "is required"},
		{name: "version 0", mutate: func(d map[string]any) { event(d, 0)["version"] = 0 }, field: "events[0].version", msg: "must be an integer from 1 to 1000000, got 0"},
		{name: "version 1000001", mutate: func(d map[string]any) { event(d, 0)["version"] = 1000001 }, field: "events[0].version", msg: "got 1000001"},
		{name: "version negative", mutate: func(d map[string]any) { event(d, 0)["version"] = -1 }, field: "events[0].version", msg: "got -1"},
		{name: "version 1.5", mutate: func(d map[string]any) { event(d, 0)["version"] = json.Number("1.5") }, field: "events[0].version", msg: "must be an integer from 1 to 1000000, got 1.5"},
		{name: "version 1e2", mutate: func(d map[string]any) { event(d, 0)["version"] = json.Number("1e2") }, field: "events[0].version", msg: "got 1e2"},
		{name: "version huge", mutate: func(d map[string]any) { event(d, 0)["version"] = json.Number("99999999999999999999999") }, field: "events[0].version", msg: "must be an integer"},
		{name: "version string", mutate: func(d map[string]any) { event(d, 0)["version"] = "1" }, field: "events[0].version", msg: `got "1"`},
		{name: "subject missing", mutate: func(d map[string]any) { delete(event(d, 0), "subject") }, field: "events[0].subject", msg: `event "person.updated" v1: is required`},
		{name: "subject upper case", mutate: func(d map[string]any) { event(d, 0)["subject"] = "Person" }, field: "events[0].subject", msg: "not a valid subject"},
		{name: "subject 81 characters", mutate: func(d map[string]any) { event(d, 0)["subject"] = strings.Repeat("p", 81) }, field: "events[0].subject", msg: "not a valid subject"},

		// Schemas.
		{name: "schema missing", mutate: func(d map[string]any) { delete(event(d, 0), "dataSchema") }, field: "events[0].dataSchema", msg: `event "person.updated" v1: dataSchema is required`},
		{name: "schema null", mutate: func(d map[string]any) { event(d, 0)["dataSchema"] = nil }, field: "events[0].dataSchema", msg: "dataSchema is required"},
		{name: "schema type 12", mutate: func(d map[string]any) { event(d, 0)["dataSchema"] = map[string]any{"type": 12} }, field: "events[0].dataSchema", msg: `event "person.updated" v1: dataSchema is not a valid JSON Schema: at /type`},
		{name: "schema minLength string", mutate: func(d map[string]any) { event(d, 1)["dataSchema"] = map[string]any{"minLength": "x"} }, field: "events[1].dataSchema", msg: `event "person.deleted" v1: dataSchema is not a valid JSON Schema: at /minLength: got string, want integer`},
		{name: "schema a string", mutate: func(d map[string]any) { event(d, 0)["dataSchema"] = "object" }, field: "events[0].dataSchema", msg: "at the root: got string, want boolean or object"},
		{name: "schema bad regex", mutate: func(d map[string]any) { event(d, 0)["dataSchema"] = map[string]any{"pattern": "("} }, field: "events[0].dataSchema", msg: "not valid regex"},
		{name: "schema dangling local $ref", mutate: func(d map[string]any) { event(d, 0)["dataSchema"] = map[string]any{"$ref": "#/$defs/missing"} }, field: "events[0].dataSchema", msg: "not found"},
		{name: "schema remote https $ref", mutate: func(d map[string]any) {
			event(d, 0)["dataSchema"] = map[string]any{"$ref": "https://schemas.example.com/person.json"}
		}, field: "events[0].dataSchema", msg: `reference to "https://schemas.example.com/person.json" is not allowed`},
		{name: "schema remote http $ref nested", mutate: func(d map[string]any) {
			event(d, 0)["dataSchema"] = map[string]any{"properties": map[string]any{"a": map[string]any{"$ref": "http://127.0.0.1:1/x.json"}}}
		}, field: "events[0].dataSchema", msg: "remote references are never fetched"},
		{name: "schema file $ref", mutate: func(d map[string]any) { event(d, 0)["dataSchema"] = map[string]any{"$ref": "file:///etc/passwd"} }, field: "events[0].dataSchema", msg: `reference to "file:///etc/passwd" is not allowed`},
		{name: "schema relative $ref", mutate: func(d map[string]any) { event(d, 0)["dataSchema"] = map[string]any{"$ref": "person.json"} }, field: "events[0].dataSchema", msg: `reference to "person.json" is not allowed`},
		{name: "schema unknown $schema", mutate: func(d map[string]any) {
			event(d, 0)["dataSchema"] = map[string]any{"$schema": "https://example.com/meta"}
		}, field: "events[0].dataSchema", msg: `reference to "https://example.com/meta" is not allowed`},
		{name: "schema too deep", mutate: func(d map[string]any) { event(d, 0)["dataSchema"] = json.RawMessage(nested(MaxSchemaDepth + 1)) }, field: "events[0].dataSchema", msg: "dataSchema is refused: schema is nested deeper than 32 levels"},
		{name: "schema too large", mutate: func(d map[string]any) {
			event(d, 0)["dataSchema"] = map[string]any{"description": strings.Repeat("x", MaxSchemaBytes)}
		}, field: "events[0].dataSchema", msg: "larger than 64 KiB"},
		{name: "schema of unnamed event", mutate: func(d map[string]any) {
			event(d, 0)["name"] = "Bad"
			event(d, 0)["dataSchema"] = map[string]any{"type": 12}
		}, field: "events[0].dataSchema", msg: "dataSchema is not a valid JSON Schema"},

		// Subscriptions.
		{name: "subscription type missing", mutate: func(d map[string]any) { delete(subscription(d, 0), "type") }, field: "subscribes[0].type", msg: "is required"},
		{name: "subscription type without name", mutate: func(d map[string]any) { subscription(d, 0)["type"] = "billing" }, field: "subscribes[0].type", msg: "not a valid event type"},
		{name: "subscription type trailing dot", mutate: func(d map[string]any) { subscription(d, 0)["type"] = "billing." }, field: "subscribes[0].type", msg: "not a valid event type"},
		{name: "subscription type bad app", mutate: func(d map[string]any) { subscription(d, 0)["type"] = "Billing.invoice.paid" }, field: "subscribes[0].type", msg: "not a valid event type"},
		{name: "subscription type bad name", mutate: func(d map[string]any) { subscription(d, 0)["type"] = "billing.Invoice" }, field: "subscribes[0].type", msg: "not a valid event type"},
		{name: "subscription version 0", mutate: func(d map[string]any) { subscription(d, 1)["version"] = 0 }, field: "subscribes[1].version", msg: "must be an integer from 1 to 1000000"},
		{name: "subscription version 1.5", mutate: func(d map[string]any) { subscription(d, 1)["version"] = 1.5 }, field: "subscribes[1].version", msg: "got 1.5"},
		{name: "duplicate subscription", mutate: func(d map[string]any) {
			subscription(d, 1)["type"] = "billing.invoice.paid"
			subscription(d, 1)["version"] = 1
		}, field: "subscribes[1]", msg: "billing.invoice.paid v1 is listed twice (first at subscribes[0])"},

		// YAML.
		{name: "bad YAML", source: "x.yaml", raw: "app: [contacts\n", msg: "not valid YAML"},
		{name: "YAML duplicate key", source: "x.yaml", raw: "app: a\napp: b\n", msg: "not valid YAML"},
		{name: "YAML two documents", source: "x.yml", raw: "app: a\n---\napp: b\n", msg: "more than one document"},
		{name: "YAML unknown field", source: "x.yaml", raw: "app: contacts\nendpoint: http://h\nsubscribe: []\n", field: "subscribe", msg: "unknown field"},
		{name: "YAML scalar", source: "x.yaml", raw: "contacts\n", msg: "must be a JSON object"},
		{name: "YAML by content", source: "manifest", raw: "app: contacts\nendpoint: ftp://h\n", field: "endpoint", msg: "not ftp"},
		{name: "YAML version float", source: "x.yaml", raw: "app: contacts\nendpoint: http://h\nsubscribes: [{type: a.b, version: 1.5}]\n", field: "subscribes[0].version", msg: "got 1.5"},
		{name: "JSON extension with YAML", source: "x.json", raw: "app: contacts\n", msg: "not valid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			source := tt.source
			if source == "" {
				source = "test.json"
			}
			data := []byte(tt.raw)
			if tt.mutate != nil {
				doc := validDoc()
				tt.mutate(doc)
				data = render(t, doc)
			}
			m, err := Parse(source, data)
			if err == nil {
				t.Fatalf("Parse accepted the manifest: %+v", m)
			}
			if m != nil {
				t.Errorf("Parse returned a manifest with an error")
			}
			var verr *ValidationError
			if errors.As(err, &verr) && verr.Source != source {
				t.Errorf("error source %q, want %q", verr.Source, source)
			}
			wantProblem(t, problemsOf(t, err), tt.field, tt.msg)
		})
	}
}

func TestParseReportsEveryProblem(t *testing.T) {
	doc := validDoc()
	doc["colour"] = "blue"
	event(doc, 0)["version"] = 0
	event(doc, 1)["dataSchema"] = map[string]any{"type": 12}
	subscription(doc, 1)["type"] = "nope"
	_, err := Parse("test.json", render(t, doc))
	problems := problemsOf(t, err)
	wantProblem(t, problems, "colour", "unknown field")
	wantProblem(t, problems, "events[0].version", "got 0")
	wantProblem(t, problems, "events[1].dataSchema", `event "person.deleted" v1`)
	wantProblem(t, problems, "subscribes[1].type", "not a valid event type")
	if len(problems) != 4 {
		t.Errorf("%d problems, want 4:\n%s", len(problems), formatProblems(problems))
	}
	if lines := strings.Count(err.Error(), "\n") + 1; lines != len(problems) {
		t.Errorf("Error() has %d lines for %d problems:\n%s", lines, len(problems), err)
	}
}

func TestValidationErrorFormat(t *testing.T) {
	doc := validDoc()
	event(doc, 0)["version"] = 0
	_, err := Parse("examples/contacts.json", render(t, doc))
	want := `manifest examples/contacts.json (app "contacts"): events[0].version: must be an integer from 1 to 1000000, got 0`
	if err == nil || err.Error() != want {
		t.Errorf("error:\n%v\nwant:\n%s", err, want)
	}

	_, err = Parse("bad.json", []byte(`{`))
	if err == nil || !strings.HasPrefix(err.Error(), "manifest bad.json: not valid JSON") {
		t.Errorf("error %q, want one without app or field", err)
	}

	// A bad app id is not repeated in the heading.
	doc = validDoc()
	doc["app"] = "Contacts"
	_, err = Parse("x.json", render(t, doc))
	if err == nil || !strings.HasPrefix(err.Error(), "manifest x.json: app: ") {
		t.Errorf("error %q", err)
	}
}

func TestValidateBuiltManifest(t *testing.T) {
	m := &Manifest{
		App:      "billing",
		Endpoint: "http://127.0.0.1:8089",
		Events: []Event{{
			Name: "invoice.paid", Version: 1, Subject: "invoice",
			DataSchema: json.RawMessage(`{"type":"object"}`),
		}},
		Subscribes: []Subscription{{Type: "contacts.person.updated", Version: 1}},
	}
	if err := m.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	m.Source = "built"
	m.Events[0].Place = json.RawMessage(`{not json`)
	m.Subscribes[0].Version = 0
	err := m.Validate()
	problems := problemsOf(t, err)
	wantProblem(t, problems, "events[0].place", "not valid JSON")
	wantProblem(t, problems, "subscribes[0].version", "got 0")
	var verr *ValidationError
	if errors.As(err, &verr); verr.Source != "built" || verr.App != "billing" {
		t.Errorf("error source %q app %q", verr.Source, verr.App)
	}
}

func TestSplitEventType(t *testing.T) {
	tests := []struct {
		in        string
		app, name string
		ok        bool
	}{
		{"contacts.person.updated", "contacts", "person.updated", true},
		{"a.b", "a", "b", true},
		{"contacts", "", "", false},
		{"contacts.", "", "", false},
		{".person", "", "", false},
		{"Contacts.person", "", "", false},
		{"contacts.person..x", "", "", false},
	}
	for _, tt := range tests {
		app, name, ok := SplitEventType(tt.in)
		if app != tt.app || name != tt.name || ok != tt.ok {
			t.Errorf("SplitEventType(%q) = %q, %q, %v; want %q, %q, %v", tt.in, app, name, ok, tt.app, tt.name, tt.ok)
		}
	}
}

func TestParseDeprecated(t *testing.T) {
	doc := validDoc()
	event(doc, 0)["deprecated"] = true
	m, err := Parse("test.json", render(t, doc))
	if err != nil {
		t.Fatal(err)
	}
	if !m.Events[0].Deprecated || m.Events[1].Deprecated {
		t.Errorf("deprecated = %v, %v; want true, false", m.Events[0].Deprecated, m.Events[1].Deprecated)
	}
	plain, err := Parse("test.json", render(t, validDoc()))
	if err != nil {
		t.Fatal(err)
	}
	if plain.Hash() == m.Hash() {
		t.Error("marking a version deprecated does not change the manifest's hash")
	}
	event(doc, 0)["deprecated"] = false
	notDeprecated, err := Parse("test.json", render(t, doc))
	if err != nil {
		t.Fatal(err)
	}
	if notDeprecated.Hash() != plain.Hash() {
		t.Error(`"deprecated": false changes the hash of an otherwise equal manifest`)
	}
}
