package manifest

import (
	"encoding/json"
	"regexp"
	"testing"
)

func TestHashStableAcrossFormatting(t *testing.T) {
	base := `{"app":"contacts","endpoint":"https://c.internal","events":[{"name":"person.updated","version":1,"subject":"person","place":null,"dataSchema":{"type":"object","required":["name"],"properties":{"name":{"type":"string","maxLength":10}}}}],"subscribes":[{"type":"billing.invoice.paid","version":1}]}`
	same := []struct{ name, source, data string }{
		{"indented, reordered keys", "a.json", `{
			"subscribes": [ { "version": 1, "type": "billing.invoice.paid" } ],
			"events": [ {
				"dataSchema": { "properties": { "name": { "maxLength": 10, "type": "string" } }, "required": [ "name" ], "type": "object" },
				"subject": "person", "version": 1, "name": "person.updated"
			} ],
			"endpoint": "https://c.internal/",
			"app": "contacts"
		}`},
		{"escaped strings", "b.json", `{"app":"\u0063ontacts","endpoint":"https://c.internal","events":[{"name":"person.updated","version":1,"subject":"person","dataSchema":{"type":"\u006fbject","required":["name"],"properties":{"name":{"type":"string","maxLength":10}}}}],"subscribes":[{"type":"billing.invoice.paid","version":1}]}`},
		{"YAML", "c.yaml", `
app: contacts
endpoint: https://c.internal
events:
  - name: person.updated
    version: 1
    subject: person
    dataSchema:
      type: object
      required: [name]
      properties: {name: {type: string, maxLength: 10}}
subscribes: [{type: billing.invoice.paid, version: 1}]
`},
	}
	m, err := Parse("base.json", []byte(base))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := m.Hash()
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(want) {
		t.Fatalf("Hash %q is not hex SHA-256", want)
	}
	if again := m.Hash(); again != want {
		t.Errorf("Hash changed between calls: %s, %s", want, again)
	}
	for _, tt := range same {
		t.Run(tt.name, func(t *testing.T) {
			other, err := Parse(tt.source, []byte(tt.data))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := other.Hash(); got != want {
				t.Errorf("hash %s, want %s", got, want)
			}
		})
	}

	empty := []string{
		`{"app":"a","endpoint":"http://h"}`,
		`{"app":"a","endpoint":"http://h","events":[],"subscribes":[]}`,
		`{"app":"a","endpoint":"http://h","events":null,"subscribes":null}`,
	}
	var emptyHash string
	for i, data := range empty {
		m, err := Parse("empty.json", []byte(data))
		if err != nil {
			t.Fatalf("Parse(%s): %v", data, err)
		}
		if i == 0 {
			emptyHash = m.Hash()
		} else if m.Hash() != emptyHash {
			t.Errorf("%s: hash differs from the one without lists", data)
		}
	}
}

func TestHashChangesWithContent(t *testing.T) {
	changes := map[string]func(map[string]any){
		"app":           func(d map[string]any) { d["app"] = "people" },
		"endpoint":      func(d map[string]any) { d["endpoint"] = "https://contacts.internal:9443" },
		"delivery path": func(d map[string]any) { d["deliveryPath"] = "/in" },
		"event name":    func(d map[string]any) { event(d, 1)["name"] = "person.removed" },
		"version":       func(d map[string]any) { event(d, 1)["version"] = 2 },
		"subject":       func(d map[string]any) { event(d, 0)["subject"] = "human" },
		"title":         func(d map[string]any) { event(d, 0)["title"] = "Person changed" },
		"description":   func(d map[string]any) { event(d, 0)["description"] = "More." },
		"automation":    func(d map[string]any) { event(d, 0)["automation"] = false },
		"place":         func(d map[string]any) { event(d, 0)["place"] = map[string]any{"kind": "project"} },
		"schema": func(d map[string]any) {
			event(d, 0)["dataSchema"] = map[string]any{"type": "object", "required": []any{"id"}}
		},
		"schema order": func(d map[string]any) { event(d, 0)["dataSchema"].(map[string]any)["required"] = []any{"name", "id"} },
		"event order": func(d map[string]any) {
			evs := d["events"].([]any)
			evs[0], evs[1] = evs[1], evs[0]
		},
		"subscription":     func(d map[string]any) { subscription(d, 1)["version"] = 3 },
		"no subscriptions": func(d map[string]any) { delete(d, "subscribes") },
	}
	base, err := Parse("base.json", render(t, validDoc()))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	seen := map[string]string{base.Hash(): "base"}
	for name, change := range changes {
		doc := validDoc()
		change(doc)
		m, err := Parse("changed.json", render(t, doc))
		if err != nil {
			t.Fatalf("%s: Parse: %v", name, err)
		}
		h := m.Hash()
		if prev, dup := seen[h]; dup {
			t.Errorf("changing the %s gives the same hash as %s", name, prev)
		}
		seen[h] = name
	}
}

func TestHashIgnoresSource(t *testing.T) {
	a, err := Parse("a.json", render(t, validDoc()))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse("elsewhere/b.json", render(t, validDoc()))
	if err != nil {
		t.Fatal(err)
	}
	if a.Hash() != b.Hash() {
		t.Error("hash depends on the source")
	}
}

func TestHashOfBuiltManifest(t *testing.T) {
	// A hand-built manifest may hold raw JSON that is not valid; Hash must
	// still be stable and tell it apart from other content.
	m := &Manifest{App: "a", Events: []Event{{Name: "e", DataSchema: json.RawMessage(`{bad`)}}}
	h := m.Hash()
	if h == "" || h != m.Hash() {
		t.Errorf("unstable hash %q", h)
	}
	m.Events[0].DataSchema = json.RawMessage(`{bad2`)
	if m.Hash() == h {
		t.Error("different invalid schemas hash alike")
	}
}
