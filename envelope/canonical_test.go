package envelope

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
)

// The writers encoding/json did the work of until the hand-written ones
// (canonical.go): every content hash stored since must come out the same.

func referenceString(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

func referenceCanonical(data []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return marshal(v)
}

func referenceContentHash(app, typ string, version int, subject string, canonicalData []byte) string {
	doc, _ := json.Marshal([]any{app, typ, version, subject, json.RawMessage(canonicalData)})
	sum := sha256.Sum256(doc)
	return hex.EncodeToString(sum[:])
}

var canonicalSeeds = []string{
	`{"n":1}`, `{"b":[1,2.50,-3e+7,{"z":null,"a":true}],"a":"x"}`, `"<>&"`, `{"<":"&amp;","\u2028":"\u2029"}`,
	`"\u00e9\ud83d\ude00\n\t\b\f\r\u0001\u001f\u007f\"\\\/"`, `"\ud800"`, "\"\xff\"", `{"a":1,"a":2}`,
	`{"é":1,"e":2,"E":3,"":4,"a\u0000":5}`, `[]`, `{}`, `null`, `-0`, `1E400`, `0.000`, `[[[]]]`,
	` { "spaced" : [ 1 , 2 ] } `, `"` + strings.Repeat("x", 300) + `"`,
}

func TestCanonicalMatchesEncodingJSON(t *testing.T) {
	for _, s := range canonicalSeeds {
		checkCanonical(t, []byte(s), "contacts", "contacts.person.updated", 1, "person-1")
		checkCanonical(t, []byte(s), "a<b", "t&t", 7, "s\u2028\"\\é")
	}
}

func FuzzCanonicalMatchesEncodingJSON(f *testing.F) {
	for _, s := range canonicalSeeds {
		f.Add([]byte(s), "contacts", "contacts.person.updated", 1, "person-1")
	}
	f.Add([]byte(`{}`), "a<b", "t&t", 7, "s\u2028\"\\é\x00\xff")
	f.Fuzz(func(t *testing.T, data []byte, app, typ string, version int, subject string) {
		checkCanonical(t, data, app, typ, version, subject)
	})
}

func checkCanonical(t *testing.T, data []byte, app, typ string, version int, subject string) {
	t.Helper()
	for _, s := range []string{app, typ, subject, string(data)} {
		if got, want := appendString(nil, s), referenceString(s); !bytes.Equal(got, want) {
			t.Fatalf("appendString(%q) = %s, encoding/json writes %s", s, got, want)
		}
	}
	want, wantErr := referenceCanonical(data)
	if wantErr != nil || !json.Valid(data) {
		return // Canonical takes valid JSON only
	}
	got, err := Canonical(data)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Canonical(%q) = %s, %v; encoding/json writes %s", data, got, err, want)
	}
	if h, ref := ContentHash(app, typ, version, subject, got), referenceContentHash(app, typ, version, subject, want); h != ref {
		t.Fatalf("ContentHash(%q, %q, %d, %q, %s) = %s, encoding/json's document hashes to %s", app, typ, version, subject, got, h, ref)
	}
}

func TestCanonicalValueRefusesWhatDecodeNeverGives(t *testing.T) {
	for _, v := range []any{json.Number("1x"), json.Number(""), json.Number("01"), json.Number("true"), 1.5, map[string]string{}} {
		if b, err := CanonicalValue(v); err == nil {
			t.Errorf("CanonicalValue(%#v) = %s, want an error", v, b)
		}
	}
}
