package publish_test

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"herald/publish"
)

// readLine is what ReadNDJSON reported for one line.
type readLine struct {
	line    int
	req     publish.Request
	code    string // rejection code, empty for a request
	message string
}

func readAll(t *testing.T, input string) []readLine {
	t.Helper()
	var got []readLine
	err := publish.ReadNDJSON(strings.NewReader(input), func(line int, req publish.Request, err error) error {
		l := readLine{line: line, req: req}
		if err != nil {
			rej, ok := publish.IsRejection(err)
			if !ok {
				t.Fatalf("line %d: error %v is not a rejection", line, err)
			}
			l.code, l.message = rej.Code, rej.Message
		}
		got = append(got, l)
		return nil
	})
	if err != nil {
		t.Fatalf("ReadNDJSON: %v", err)
	}
	return got
}

func TestReadNDJSON(t *testing.T) {
	t.Parallel()
	good := `{"id":"3f1c9a52-8e1b-4d0c-9a6e-2b7d4c1e9f00","app":"contacts","type":"contacts.person.updated","version":1,"subject":"p-1","data":{"name":"Ada"}}`
	minimal := `{"app":"a","type":"a.b","version":2,"subject":"s","data":null}`
	overlong := `{"app":"a","type":"a.b","version":1,"subject":"s","data":"` + strings.Repeat("x", publish.MaxLineBytes) + `"}`
	tests := []struct {
		name  string
		input string
		want  []readLine // requests compared on the fields set here
	}{
		{
			name:  "good file with blank lines, CRLF and no final newline",
			input: good + "\n\n   \r\n" + minimal + "\r\n" + good,
			want: []readLine{
				{line: 1, req: publish.Request{ID: "3f1c9a52-8e1b-4d0c-9a6e-2b7d4c1e9f00", App: "contacts",
					Type: "contacts.person.updated", Version: 1, Subject: "p-1", Data: []byte(`{"name":"Ada"}`)}},
				{line: 4, req: publish.Request{App: "a", Type: "a.b", Version: 2, Subject: "s", Data: []byte(`null`)}},
				{line: 5, req: publish.Request{ID: "3f1c9a52-8e1b-4d0c-9a6e-2b7d4c1e9f00", App: "contacts",
					Type: "contacts.person.updated", Version: 1, Subject: "p-1", Data: []byte(`{"name":"Ada"}`)}},
			},
		},
		{
			name:  "malformed line in the middle does not stop the file",
			input: minimal + "\n{\"app\": \n" + minimal + "\n",
			want: []readLine{
				{line: 1, req: publish.Request{App: "a", Type: "a.b", Version: 2, Subject: "s", Data: []byte(`null`)}},
				{line: 2, code: publish.CodeDataInvalid, message: "line 2: invalid JSON"},
				{line: 3, req: publish.Request{App: "a", Type: "a.b", Version: 2, Subject: "s", Data: []byte(`null`)}},
			},
		},
		{
			name:  "unknown field",
			input: `{"app":"a","type":"a.b","version":1,"subject":"s","data":{},"extra":1}` + "\n" + minimal,
			want: []readLine{
				{line: 1, code: publish.CodeDataInvalid, message: `line 1: invalid JSON: json: unknown field "extra"`},
				{line: 2, req: publish.Request{App: "a", Type: "a.b", Version: 2, Subject: "s", Data: []byte(`null`)}},
			},
		},
		{
			name:  "overlong line is skipped",
			input: minimal + "\n" + overlong + "\n" + minimal + "\n",
			want: []readLine{
				{line: 1, req: publish.Request{App: "a", Type: "a.b", Version: 2, Subject: "s", Data: []byte(`null`)}},
				{line: 2, code: publish.CodePayloadTooLarge, message: fmt.Sprintf("line 2 is longer than %d bytes", publish.MaxLineBytes)},
				{line: 3, req: publish.Request{App: "a", Type: "a.b", Version: 2, Subject: "s", Data: []byte(`null`)}},
			},
		},
		{
			name:  "overlong last line without newline",
			input: minimal + "\n" + overlong,
			want: []readLine{
				{line: 1, req: publish.Request{App: "a", Type: "a.b", Version: 2, Subject: "s", Data: []byte(`null`)}},
				{line: 2, code: publish.CodePayloadTooLarge, message: "line 2 is longer than"},
			},
		},
		{
			name: "values that are not one object",
			input: strings.Join([]string{`[1]`, `null`, `"x"`, `{"app":"a"} {"app":"b"}`, `{"app":"a"}}`,
				`{"version":"1"}`, `{"version":1.5}`}, "\n"),
			want: []readLine{
				{line: 1, code: publish.CodeDataInvalid, message: "line 1: not a JSON object"},
				{line: 2, code: publish.CodeDataInvalid, message: "line 2: not a JSON object"},
				{line: 3, code: publish.CodeDataInvalid, message: "line 3: not a JSON object"},
				{line: 4, code: publish.CodeDataInvalid, message: "line 4: invalid JSON: unexpected data after the object"},
				{line: 5, code: publish.CodeDataInvalid, message: "line 5: invalid JSON"},
				{line: 6, code: publish.CodeDataInvalid, message: "line 6: invalid JSON"},
				{line: 7, code: publish.CodeDataInvalid, message: "line 7: invalid JSON"},
			},
		},
		{
			name:  "empty input",
			input: "",
			want:  nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := readAll(t, tt.input)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d lines %+v, want %d", len(got), got, len(tt.want))
			}
			for i, w := range tt.want {
				g := got[i]
				if g.line != w.line || g.code != w.code || !strings.HasPrefix(g.message, w.message) {
					t.Errorf("line %d: got line %d %s %q, want line %d %s %q", i, g.line, g.code, g.message, w.line, w.code, w.message)
				}
				if w.code == "" && (g.req.ID != w.req.ID || g.req.App != w.req.App || g.req.Type != w.req.Type ||
					g.req.Version != w.req.Version || g.req.Subject != w.req.Subject || string(g.req.Data) != string(w.req.Data)) {
					t.Errorf("line %d: request %+v, want %+v", w.line, g.req, w.req)
				}
			}
		})
	}
}

func TestReadNDJSONLineLimitBoundary(t *testing.T) {
	t.Parallel()
	prefix := `{"app":"a","type":"a.b","version":1,"subject":"s","data":"`
	line := func(n int) string { return prefix + strings.Repeat("x", n-len(prefix)-2) + `"}` }
	got := readAll(t, line(publish.MaxLineBytes)+"\r\n"+line(publish.MaxLineBytes+1)+"\n")
	if len(got) != 2 || got[0].code != "" || got[1].code != publish.CodePayloadTooLarge {
		t.Fatalf("lines of exactly and one over MaxLineBytes: %+v", []string{got[0].code, got[1].code})
	}
	if len(got[0].req.Data) != publish.MaxLineBytes-len(prefix) {
		t.Errorf("data of the line at the limit is %d bytes", len(got[0].req.Data))
	}
}

func TestReadNDJSONStops(t *testing.T) {
	t.Parallel()
	stop := errors.New("stop")
	calls := 0
	err := publish.ReadNDJSON(strings.NewReader("{}\n{}\n{}\n"), func(int, publish.Request, error) error {
		calls++
		if calls == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != 2 {
		t.Errorf("callback error: ReadNDJSON = %v after %d calls, want stop after 2", err, calls)
	}

	boom := errors.New("disk gone")
	r := io.MultiReader(strings.NewReader("{}\n"), iotest.ErrReader(boom))
	calls = 0
	err = publish.ReadNDJSON(r, func(int, publish.Request, error) error { calls++; return nil })
	if !errors.Is(err, boom) || calls != 1 {
		t.Errorf("read error: ReadNDJSON = %v after %d calls, want %v after 1", err, calls, boom)
	}
}
