package jsonvalue

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"
)

// reference is what Decode must equal: encoding/json's Decoder with
// UseNumber, and nothing but white space after the value.
func reference(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, io.ErrUnexpectedEOF
	}
	return v, nil
}

var seeds = []string{
	`{"n":1}`, `null`, `true`, `false`, `"x"`, `0`, `-1.5e-300`, `1e100000000`, `123456789012345678901234567890`,
	`{}`, `[]`, ` {"a" : [1, "b", null, true, {"c": {}}] } `, `[[[[]]]]`,
	`{"a":1,"a":2}`, `{"a":{"x":1},"a":[2]}`,
	`"\u00e9\ud83d\ude00\n\t\"\\\/"`, `"\ud800"`, `"\udc00x"`, "\"\xff\xfe\"", "{\"\xff\":1}",
	`"<>&\u2028\u2029"`, `{"b":1,"a":2,"A":3}`,
	`{"a":1}{}`, `{"a":1} x`, `[1,]`, `{"a"}`, `{"a":}`, `[1 2]`, `01`, `1.`, `.5`, `+1`, `NaN`, `tru`, ``, `   `,
	`{"a":1`, `[`, `"abc`, `{"a":1,}`, `{1:2}`, "\"a\x01\"", `[1,2]]`,
}

func TestDecodeMatchesEncodingJSON(t *testing.T) {
	deep := strings.Repeat("[", 10001) + strings.Repeat("]", 10001)
	for _, s := range append(seeds, deep) {
		check(t, []byte(s))
	}
}

func FuzzDecodeMatchesEncodingJSON(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) { check(t, raw) })
}

func check(t *testing.T, raw []byte) {
	t.Helper()
	want, wantErr := reference(raw)
	before := bytes.Clone(raw)
	got, err := Decode(raw)
	if !bytes.Equal(raw, before) {
		t.Fatalf("Decode changed its input %q to %q", before, raw)
	}
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("Decode(%q): error %v, encoding/json's %v", raw, err, wantErr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("Decode(%q) = %#v, encoding/json gives %#v", raw, got, want)
	}
}
