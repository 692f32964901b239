package envelope

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
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

// referenceContentHash is "" where json.Marshal failed (the old
// ContentHash hashed its empty output then).
func referenceContentHash(app, typ string, version int, subject string, canonicalData []byte) string {
	doc, err := json.Marshal([]any{app, typ, version, subject, json.RawMessage(canonicalData)})
	if err != nil {
		return ""
	}
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
	if h, ref := ContentHash(app, typ, version, subject, got), referenceContentHash(app, typ, version, subject, want); ref != "" && h != ref {
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

// Data nested 10,000 levels deep is valid JSON the publisher accepts, but
// json.Marshal of the hash's array around it failed, and the empty output
// hashed alike for every such event: a re-publish of other content under
// the same id read as a duplicate. Each content now has a hash of its own,
// whatever the strings around it.
func TestContentHashOfDeepData(t *testing.T) {
	deep, err := Canonical([]byte(strings.Repeat("[", 10000) + strings.Repeat("]", 10000)))
	if err != nil {
		t.Fatal(err)
	}
	empty := sha256.Sum256(nil)
	seen := map[string]string{}
	for _, subject := range []string{"o-1", "o-2", "o<3>", "é"} {
		for i, data := range [][]byte{deep, append([]byte(`["<"`+","), deep[1:]...)} {
			h := ContentHash("shop", "shop.order.created", 1, subject, data)
			name := fmt.Sprintf("subject %q, data %d", subject, i)
			if h == hex.EncodeToString(empty[:]) {
				t.Fatalf("%s: the hash of nothing", name)
			}
			if prev, ok := seen[h]; ok {
				t.Fatalf("%s and %s hash alike", name, prev)
			}
			seen[h] = name
		}
	}
}
