package envelope

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"
)

func TestEncodeFieldOrderAndEscaping(t *testing.T) {
	e := Envelope{ID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", App: "shop", Type: "shop.order.placed",
		Subject: "o<1>&2", Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600)), Version: 2,
		Data: []byte(`{"a":"<b>"}`)}
	want := `{"specversion":"1.0","id":"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","source":"app:shop",` +
		`"type":"shop.order.placed","subject":"o<1>&2","time":"2026-01-02T02:04:05.000000006Z",` +
		`"datacontenttype":"application/json","dataversion":2,"data":{"a":"<b>"}}`
	if got := string(e.Encode()); got != want {
		t.Fatalf("envelope\n got %s\nwant %s", got, want)
	}
	e.TraceParent, e.TraceState = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "k=v"
	want = want[:len(want)-len(`,"data":{"a":"<b>"}}`)] +
		`,"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","tracestate":"k=v","data":{"a":"<b>"}}`
	if got := string(e.Encode()); got != want {
		t.Fatalf("traced envelope\n got %s\nwant %s", got, want)
	}
	if !json.Valid(e.Encode()) {
		t.Fatal("envelope is not JSON")
	}
}

// TestContentHashIgnoresFormattingAndEscaping: equal data hashes equally
// however it is written, and the hash is the one publish has always stored
// (SHA-256 of the JSON array [app, type, version, subject, data], as
// json.Marshal writes it), so rows written before this package match.
func TestContentHashIgnoresFormattingAndEscaping(t *testing.T) {
	forms := []string{
		`{"b":"<x&y>","a":1.50,"c":[1,{"z":null,"y":true}]}`,
		"{ \"a\" : 1.50,\n \"c\":[1,{\"y\":true,\"z\":null}], \"b\":\"\\u003cx\\u0026y\\u003e\"}",
	}
	var hashes []string
	for _, f := range forms {
		c, err := Canonical([]byte(f))
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"a":1.50,"b":"<x&y>","c":[1,{"y":true,"z":null}]}`; string(c) != want {
			t.Fatalf("canonical %s, want %s", c, want)
		}
		hashes = append(hashes, ContentHash("shop", "shop.order.placed", 1, "o-1", c))
	}
	doc, _ := json.Marshal([]any{"shop", "shop.order.placed", 1, "o-1",
		json.RawMessage(`{"a":1.50,"b":"\u003cx\u0026y\u003e","c":[1,{"y":true,"z":null}]}`)})
	sum := sha256.Sum256(doc)
	want := hex.EncodeToString(sum[:])
	for i, h := range hashes {
		if h != want {
			t.Errorf("form %d hashes to %s, want %s", i, h, want)
		}
	}
}

func TestCanonicalRefusesInvalidJSON(t *testing.T) {
	for _, in := range []string{``, `{`, `{"a":}`} {
		if _, err := Canonical([]byte(in)); err == nil {
			t.Errorf("Canonical(%q) accepted", in)
		}
	}
}

func TestDataIsCanonical(t *testing.T) {
	type payload struct {
		Z string  `json:"z"`
		A int64   `json:"a"`
		F float64 `json:"f"`
		N *string `json:"n"`
	}
	got, err := Data(payload{Z: "<&>", A: 3, F: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"a":3,"f":0.25,"n":null,"z":"<&>"}`; string(got) != want {
		t.Fatalf("data %s, want %s", got, want)
	}
	if _, err := Data(func() {}); err == nil {
		t.Fatal("Data accepted a value JSON cannot hold")
	}
}
