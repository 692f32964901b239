package api

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"herald/publish"
)

func request(contentType, body string, limit int64) *http.Request {
	r := httptest.NewRequest(http.MethodPost, EventsPath, strings.NewReader(body))
	r.Header.Set("Content-Type", contentType)
	r.Body = http.MaxBytesReader(httptest.NewRecorder(), r.Body, limit)
	return r
}

func TestReadEvents(t *testing.T) {
	t.Parallel()
	ev := `{"type":"a.b","version":1,"subject":"s","data":{}}`
	for _, tc := range []struct {
		name, ct, body string
		n              int
		batch          bool
		status         int // of the errBody; 0: none
		rejected       []int
	}{
		{"object", mediaJSON, ev, 1, false, 0, nil},
		{"object with space", mediaJSON + "; charset=utf-8", " \n" + ev + "\n", 1, false, 0, nil},
		{"array", mediaJSON, "[" + ev + "," + ev + "]", 2, true, 0, nil},
		{"array of bad elements", mediaJSON, `[{"nope":1},3]`, 2, true, 0, []int{0, 1}},
		{"array with a bad element", mediaJSON, "[" + ev + `,{"data":1,"version":"1"}]`, 2, true, 0, []int{1}},
		{"ndjson", mediaNDJSON, ev + "\n\n" + ev + "\n", 2, true, 0, nil},
		{"ndjson bad line", mediaNDJSON, ev + "\n[1]\n", 2, true, 0, []int{1}},
		{"empty", mediaJSON, "  ", 0, false, 400, nil},
		{"empty array", mediaJSON, "[]", 0, false, 400, nil},
		{"two objects", mediaJSON, ev + ev, 0, false, 400, nil},
		{"truncated", mediaJSON, "[" + ev, 0, false, 400, nil},
		{"string", mediaJSON, `"x"`, 0, false, 400, nil},
		{"too many", mediaJSON, "[" + ev + "," + ev + "," + ev + "]", 0, false, 413, nil},
		{"too many lines", mediaNDJSON, ev + "\n" + ev + "\n" + ev, 0, false, 413, nil},
		{"too long", mediaJSON, "[" + ev + "," + strings.Repeat(" ", 2000) + ev + "]", 0, false, 413, nil},
		{"media type", "text/plain", ev, 0, false, 415, nil},
		{"no media type", "", ev, 0, false, 415, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			items, batch, err := readEvents(request(tc.ct, tc.body, 1000), 2)
			var bad *errBody
			if tc.status != 0 {
				if !errors.As(err, &bad) || bad.status != tc.status {
					t.Fatalf("err %v, want status %d", err, tc.status)
				}
				return
			}
			if err != nil || len(items) != tc.n || batch != tc.batch {
				t.Fatalf("%d items, batch %v, err %v", len(items), batch, err)
			}
			var rejected []int
			for i, it := range items {
				if it.rej != nil {
					if it.rej.Code != publish.CodeDataInvalid {
						t.Errorf("item %d: %s", i, it.rej.Code)
					}
					rejected = append(rejected, i)
				} else if it.req.Type != "a.b" || it.req.Version != 1 || it.req.Subject != "s" {
					t.Errorf("item %d: %+v", i, it.req)
				}
			}
			if len(rejected) != len(tc.rejected) {
				t.Fatalf("rejected %v, want %v", rejected, tc.rejected)
			}
			for i := range rejected {
				if rejected[i] != tc.rejected[i] {
					t.Fatalf("rejected %v, want %v", rejected, tc.rejected)
				}
			}
		})
	}
}

// FuzzReadEvents: any body gives items or an answer, never a panic, and
// never more events than allowed.
func FuzzReadEvents(f *testing.F) {
	for _, s := range []string{`{"type":"a.b","version":1,"subject":"s","data":{}}`, `[{},{"id":1}]`, "{}\n[]\n", `[`, `{"data":`, "\xff"} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, body string, ndjson bool) {
		ct := mediaJSON
		if ndjson {
			ct = mediaNDJSON
		}
		items, _, err := readEvents(request(ct, body, 4096), 3)
		var bad *errBody
		if err != nil && !errors.As(err, &bad) {
			t.Fatalf("unexpected error %v", err)
		}
		if err == nil && (len(items) == 0 || len(items) > 3) {
			t.Fatalf("%d items", len(items))
		}
	})
}

func TestTokens(t *testing.T) {
	t.Parallel()
	id, token, hash, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	got, ok := tokenID(token)
	if !ok || got != id || !tokenMatches(token, hash) {
		t.Fatalf("token %q: id %q ok %v", token, got, ok)
	}
	_, other, _, _ := NewToken()
	if other == token || tokenMatches(other, hash) {
		t.Fatal("two tokens match one hash")
	}
	for _, bad := range []string{"", "hrld_", token + "x", strings.ToUpper(token), "hrld_" + id + "_short"} {
		if _, ok := tokenID(bad); ok {
			t.Errorf("tokenID accepted %q", bad)
		}
	}
	for header, want := range map[string]string{"Bearer abc": "abc", "bearer  abc ": "abc", "Basic abc": "", "Bearer": "", "Bearer  ": ""} {
		if got, _ := bearer(header); got != want {
			t.Errorf("bearer(%q) = %q, want %q", header, got, want)
		}
	}
}
