package publish

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"herald/manifest"
	"herald/store"
)

// BenchmarkValidateRequest measures the publisher's CPU for one event
// before its insert: the checks, the schema, the envelope and the content
// hash. With 64 publishers on two CPUs this work competes with PostgreSQL's
// backends, so it bounds PublishTx and Publish against plain INSERTs
// (docs/performance.md, "Concurrent publishers").
//
//	go test ./publish -run '^$' -bench ValidateRequest -benchmem
func BenchmarkValidateRequest(b *testing.B) {
	schema, err := manifest.CompileSchema(json.RawMessage(`{"type":"object","required":["id","name"],
		"properties":{"id":{"type":"string"},"name":{"type":"string","maxLength":200},
		"email":{"type":"string"},"n":{"type":"integer","minimum":0},
		"tags":{"type":"array","items":{"type":"string"}},
		"address":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"}}}}}`))
	if err != nil {
		b.Fatal(err)
	}
	in := checkInput{
		appKnown: true,
		decl: &declared{DeclaredEvent: store.DeclaredEvent{App: "contacts", Type: "contacts.person.updated", Version: 1},
			schema: schema},
		now:           time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		newID:         "0190f8a4-7b2c-7d3e-8f40-000000000001",
		maxEventBytes: DefaultMaxEventBytes,
	}
	tags := make([]string, 40)
	for i := range tags {
		tags[i] = fmt.Sprintf("%q", fmt.Sprintf("tag-%02d", i))
	}
	for _, c := range []struct{ name, data string }{
		{"40B", `{"id":"person-1","name":"Ada","n":1}`},
		{"1KB", `{"id": "person-1", "name": "Ada Lovelace", "email": "ada@example.com", "n": 36,
			"address": {"street": "12 St James's Square", "city": "London"}, "notes": "` + strings.Repeat("x", 500) + `",
			"tags": [` + strings.Join(tags, ", ") + `]}`},
	} {
		r := Request{App: "contacts", Type: "contacts.person.updated", Version: 1, Subject: "person-1", Data: json.RawMessage(c.data)}
		if _, rej := validateRequest(r, in); rej != nil {
			b.Fatalf("%s: %v", c.name, rej)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, rej := validateRequest(r, in); rej != nil {
					b.Fatal(rej)
				}
			}
		})
	}
}
