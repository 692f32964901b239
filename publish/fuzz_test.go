package publish

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"herald/manifest"
	"herald/store"
)

var knownCodes = map[string]bool{
	CodeUnknownApp: true, CodeTypeNotOwned: true, CodeEventNotDeclared: true, CodeIDInvalid: true,
	CodeSubjectInvalid: true, CodeDataInvalid: true, CodePayloadTooLarge: true, CodeValidationBudget: true,
}

func FuzzValidateRequest(f *testing.F) {
	schema, err := manifest.CompileSchema(json.RawMessage(`{"type":"object","required":["name"],
		"properties":{"name":{"type":"string","maxLength":50},"n":{"type":"integer","minimum":-5,"multipleOf":0.5},
		"items":{"type":"array","items":{"type":"object","properties":{"k":{"enum":["a","b"]}}}}}}`))
	if err != nil {
		f.Fatalf("compile schema: %v", err)
	}
	decl := &declared{
		DeclaredEvent: store.DeclaredEvent{Type: "contacts.person.updated", Version: 1, App: "contacts", Subject: "person"},
		schema:        schema,
	}
	f.Add("", "contacts", "contacts.person.updated", 1, "person-1", `{"name":"Ada"}`, true)
	f.Add("0190f8a4-7b2c-7d3e-8f40-123456789abc", "contacts", "contacts.person.updated", 1, "p", `{"name":"Ada","items":[{"k":"c"}]}`, true)
	f.Add("x", "contacts", "contacts.person.updated", 1, "p\x00", `{"name":1}`, true)
	f.Add("", "contacts", "billing.invoice.paid", 1, "p", `{}`, true)
	f.Add("", "ghost", "ghost.x", 1, "p", `{}`, false)
	f.Add("", "contacts", "contacts.person.updated", 7, "\xff", "\xff", true)
	f.Add("", "contacts", "contacts.person.updated", 1, "p", `{"name":"`+strings.Repeat("é", 40)+`"} `, true)
	f.Add("", "contacts", "contacts.person.updated", 1, "p", `{"name":"a","n":1e100000000}`, true)
	f.Add("", "contacts", "contacts.person.updated", 1, "p", `{"name":"a","n":-1E-999999}`, true)
	f.Fuzz(func(t *testing.T, id, app, typ string, version int, subject, data string, appKnown bool) {
		r := Request{ID: id, App: app, Type: typ, Version: version, Subject: subject, Data: json.RawMessage(data)}
		in := checkInput{
			appKnown:      appKnown,
			now:           time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
			newID:         "0190f8a4-7b2c-7d3e-8f40-000000000001",
			maxEventBytes: 600,
		}
		if typ == decl.Type && version == decl.Version && app == decl.App {
			in.decl = decl
		}
		ev, rej := validateRequest(r, in)
		if rej != nil {
			if !knownCodes[rej.Code] || rej.Message == "" {
				t.Fatalf("rejection %+v has an unknown code or no message", rej)
			}
			if len(rej.Errors) > 0 && rej.Code != CodeDataInvalid {
				t.Fatalf("schema errors on a %s rejection", rej.Code)
			}
			return
		}
		if !appKnown || in.decl == nil {
			t.Fatalf("accepted %+v without a known app and declaration", r)
		}
		if len(ev.Envelope) > in.maxEventBytes || !utf8.Valid(ev.Envelope) || !json.Valid(ev.Envelope) {
			t.Fatalf("envelope of %d bytes is over the limit or not valid JSON: %q", len(ev.Envelope), ev.Envelope)
		}
		var doc struct {
			ID      string          `json:"id"`
			Subject string          `json:"subject"`
			Data    json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(ev.Envelope, &doc); err != nil {
			t.Fatal(err)
		}
		var compact bytes.Buffer
		_ = json.Compact(&compact, []byte(data))
		if doc.ID != ev.ID || doc.Subject != subject || !bytes.Equal(doc.Data, compact.Bytes()) {
			t.Fatalf("envelope %s does not carry id %s, subject %q and data %s", ev.Envelope, ev.ID, subject, compact.Bytes())
		}
		if len(ev.ContentHash) != 64 {
			t.Fatalf("content hash %q", ev.ContentHash)
		}
	})
}

func FuzzReadNDJSON(f *testing.F) {
	f.Add([]byte(`{"id":"x","app":"a","type":"a.b","version":1,"subject":"s","data":{"k":[1,2]}}` + "\n\n" + `{"app":`))
	f.Add([]byte("\r\n\r\n{}\r\n[1]\nnull\n" + `{"data":{"a":1}} {}`))
	f.Add([]byte(`{"extra":true}` + "\n" + strings.Repeat("y", 200)))
	f.Add([]byte(`{"version":1e99,"data":"` + strings.Repeat("z", 80) + `"}`))
	const maxLine = 64
	f.Fuzz(func(t *testing.T, input []byte) {
		last := 0
		err := readNDJSON(bytes.NewReader(input), maxLine, func(line int, req Request, err error) error {
			if line <= last {
				t.Fatalf("line %d reported after line %d", line, last)
			}
			last = line
			if err != nil {
				rej, ok := IsRejection(err)
				if !ok || (rej.Code != CodeDataInvalid && rej.Code != CodePayloadTooLarge) {
					t.Fatalf("line %d: unexpected error %v", line, err)
				}
				return nil
			}
			if len(req.Data) > maxLine {
				t.Fatalf("line %d: data of %d bytes from a line capped at %d", line, len(req.Data), maxLine)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("ReadNDJSON: %v", err)
		}
		if lines := bytes.Count(input, []byte("\n")) + 1; last > lines {
			t.Fatalf("reported line %d of %d", last, lines)
		}
	})
}
