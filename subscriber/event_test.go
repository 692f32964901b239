package subscriber

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestDecodeEvent(t *testing.T) {
	const base = `"specversion":"1.0","id":"e1","source":"app:contacts","type":"contacts.person.updated"`
	tests := []struct {
		name        string
		body        string
		wantVersion int
		errHas      string
	}{
		{"integer dataversion", `{` + base + `,"dataversion":3,"data":{}}`, 3, ""},
		{"string dataversion", `{` + base + `,"dataversion":"12"}`, 12, ""},
		{"no dataversion", `{` + base + `}`, 0, ""},
		{"fractional dataversion", `{` + base + `,"dataversion":1.5}`, 0, "dataversion"},
		{"negative dataversion", `{` + base + `,"dataversion":-1}`, 0, "dataversion"},
		{"word dataversion", `{` + base + `,"dataversion":"one"}`, 0, "dataversion"},
		{"bad time", `{` + base + `,"time":"yesterday"}`, 0, "time"},
		{"specversion 0.3", `{"specversion":"0.3","id":"e1","source":"s","type":"t"}`, 0, "specversion"},
		{"no id", `{"specversion":"1.0","source":"s","type":"t"}`, 0, "no id"},
		{"no type", `{"specversion":"1.0","id":"e1","source":"s"}`, 0, "no type"},
		{"no source", `{"specversion":"1.0","id":"e1","type":"t"}`, 0, "no source"},
		{"id not a string", `{"specversion":"1.0","id":1,"source":"s","type":"t"}`, 0, "decode cloudevent"},
		{"array", `[]`, 0, "decode cloudevent"},
		{"null", `null`, 0, "specversion"},
		{"not JSON", `id=1`, 0, "decode cloudevent"},
		// Members encoding/json would read as source or type, which the
		// publisher's checks did not see: refused.
		{"a second source in upper case", `{` + base + `,"Source":"app:billing"}`, 0, "lower-case"},
		{"a repeated type", `{` + base + `,"type":"billing.invoice.paid"}`, 0, "twice"},
		{"source in long s", `{"specversion":"1.0","id":"e1","source":"app:contacts","type":"t","ſource":"app:billing"}`, 0, "lower-case"},
		{"a repeated source", `{` + base + `,"source":"app:billing"}`, 0, "twice"},
		{"data_base64 is a member", `{` + base + `,"data_base64":"e30="}`, 0, ""},
		{"an empty member name", `{` + base + `,"":1}`, 0, "lower-case"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := decodeEvent([]byte(tc.body))
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("error %v, want one mentioning %q", err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ev.DataVersion != tc.wantVersion || ev.ID != "e1" || ev.Source != "app:contacts" {
				t.Errorf("decoded %+v", ev)
			}
		})
	}
}

func TestDecodeDataWithoutData(t *testing.T) {
	var v map[string]any
	err := Event{ID: "e1"}.DecodeData(&v)
	var reject *RejectError
	if !errors.As(err, &reject) {
		t.Fatalf("DecodeData of an event without data: %v, want a RejectError", err)
	}
}

// TestDedupKey: two apps' events with one id have different keys, each the
// webhook-id Herald sends ("<publisher>:<id>").
func TestDedupKey(t *testing.T) {
	a, err := decodeEvent([]byte(`{"specversion":"1.0","id":"e1","source":"app:contacts","type":"contacts.person.updated"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := decodeEvent([]byte(`{"specversion":"1.0","id":"e1","source":"app:billing","type":"billing.invoice.paid"}`))
	if err != nil {
		t.Fatal(err)
	}
	if a.DedupKey() != "contacts:e1" || b.DedupKey() != "billing:e1" {
		t.Errorf("dedup keys %q and %q, want contacts:e1 and billing:e1", a.DedupKey(), b.DedupKey())
	}
}

// TestDecodeEventManyMembers: the member check is linear: a body of the
// largest size a publisher may write, made of distinct short members
// (about 30,000), decodes in well under a delivery's timeout.
func TestDecodeEventManyMembers(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"specversion":"1.0","id":"e1","source":"app:contacts","type":"contacts.person.updated"`)
	for i := 0; b.Len() < 256<<10-16; i++ {
		fmt.Fprintf(&b, `,"m%d":0`, i)
	}
	b.WriteString("}")
	start := time.Now()
	if _, err := decodeEvent([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("decoding %d bytes of members took %v", b.Len(), took)
	}
}
