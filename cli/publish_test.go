package cli

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"herald/manifest"
	"herald/publish"
)

// personUpdated returns publish flags for a contacts.person.updated event.
func personUpdated(subject, data string, extra ...string) []string {
	return append([]string{"publish", "--app", "contacts", "--type", "contacts.person.updated",
		"--version", "1", "--subject", subject, "--data", data}, extra...)
}

// publishedOutput is the JSON answer of a single publish.
type publishedOutput struct {
	Accepted  *bool                `json:"accepted"`
	ID        string               `json:"id"`
	Seq       int64                `json:"seq"`
	Duplicate bool                 `json:"duplicate"`
	Code      string               `json:"code"`
	Message   string               `json:"message"`
	Errors    []manifest.DataError `json:"errors"`
}

func TestPublishAccepted(t *testing.T) {
	t.Parallel()
	e := appliedEnv(t)
	r := mustRun(t, e, personUpdated("person-1", `{"id":"p1","name":"Ann"}`)...)
	wantContains(t, "stdout", r.stdout, "accepted: event ", "(seq ")

	const id = "0190f3c4-1111-7abc-8def-0123456789ab"
	first := decode[publishedOutput](t, mustRun(t, e, personUpdated("person-1", `{"id":"p1","name":"Bo"}`, "--id", id, "--json")...).stdout)
	if first.Accepted == nil || !*first.Accepted || first.ID != id || first.Seq <= 0 || first.Duplicate {
		t.Errorf("first publish --json = %+v", first)
	}
	// The same id and content again is an idempotent success.
	again := decode[publishedOutput](t, mustRun(t, e, personUpdated("person-1", `{"name":"Bo","id":"p1"}`, "--id", id, "--json")...).stdout)
	if again.Accepted == nil || !*again.Accepted || again.Seq != first.Seq || !again.Duplicate {
		t.Errorf("republish --json = %+v, want a duplicate with seq %d", again, first.Seq)
	}
	r = mustRun(t, e, personUpdated("person-1", `{"id":"p1","name":"Bo"}`, "--id", id)...)
	wantContains(t, "stdout", r.stdout, "already accepted", id)
	// The same id with other content is refused.
	r = run(t, e, personUpdated("person-1", `{"id":"p1","name":"Other"}`, "--id", id)...)
	if r.code != ExitInvalid || !strings.HasPrefix(r.stderr, "rejected: id_conflict: ") {
		t.Errorf("reused id: exit %d, stderr %q", r.code, r.stderr)
	}

	// --data @FILE and @- (stdin).
	path := writeFile(t, t.TempDir(), "data.json", `{"id": "p2", "name": "Cy"}`)
	mustRun(t, e, personUpdated("person-2", "@"+path)...)
	r = runInput(t, e, `{"id": "p3", "name": "Di"}`, personUpdated("person-3", "@-")...)
	if r.code != ExitOK {
		t.Errorf("--data @-: exit %d\n%s", r.code, r.stderr)
	}
	r = run(t, e, personUpdated("person-4", "@"+path+".missing")...)
	if r.code != ExitInvalid {
		t.Errorf("--data @missing: exit %d, want %d", r.code, ExitInvalid)
	}
}

func TestPublishRejected(t *testing.T) {
	t.Parallel()
	e := appliedEnv(t)
	tests := []struct {
		name       string
		args       []string
		wantCode   string
		wantStderr []string
		wantErrors []manifest.DataError
	}{
		{"unknown app", []string{"publish", "--app", "nobody", "--type", "nobody.thing", "--version", "1",
			"--subject", "k", "--data", "{}"}, publish.CodeUnknownApp, []string{`app "nobody"`}, nil},
		{"type not owned", []string{"publish", "--app", "contacts", "--type", "billing.invoice.paid", "--version", "1",
			"--subject", "k", "--data", "{}"}, publish.CodeTypeNotOwned, []string{"billing.invoice.paid"}, nil},
		{"event not declared", []string{"publish", "--app", "contacts", "--type", "contacts.person.updated", "--version", "2",
			"--subject", "k", "--data", "{}"}, publish.CodeEventNotDeclared, []string{"contacts.person.updated"}, nil},
		{"subject missing", personUpdated("", `{"id":"p1","name":"Ann"}`), publish.CodeSubjectInvalid, []string{"subject"}, nil},
		{"subject with a control character", personUpdated("a\tb", `{"id":"p1","name":"Ann"}`), publish.CodeSubjectInvalid,
			[]string{"control"}, nil},
		{"data not JSON", personUpdated("k", `{"id":`), publish.CodeDataInvalid, []string{"not valid JSON"}, nil},
		{"data fails the schema", personUpdated("k", `{"id":"p1","name":""}`), publish.CodeDataInvalid,
			[]string{"\n  /name: "}, []manifest.DataError{{Pointer: "/name"}}},
		{"id not a UUID", personUpdated("k", `{"id":"p1","name":"Ann"}`, "--id", "42"), publish.CodeIDInvalid,
			[]string{`"42"`}, nil},
		{"payload too large", personUpdated("k", `{"id":"p1","name":"`+strings.Repeat("a", publish.DefaultMaxEventBytes)+`"}`),
			publish.CodePayloadTooLarge, []string{"bytes"}, nil},
		{"data with two errors", personUpdated("k", `{"name":"Ann","extra":1}`), publish.CodeDataInvalid,
			[]string{"\n  (root): "}, []manifest.DataError{{Pointer: ""}, {Pointer: ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, e, tt.args...)
			if r.code != ExitInvalid {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, ExitInvalid, r.stdout, r.stderr)
			}
			if !strings.HasPrefix(r.stderr, "rejected: "+tt.wantCode+": ") {
				t.Errorf("stderr = %q, want it to start with %q", r.stderr, "rejected: "+tt.wantCode+": ")
			}
			wantContains(t, "stderr", r.stderr, tt.wantStderr...)
			if r.stdout != "" {
				t.Errorf("stdout = %q, want nothing", r.stdout)
			}

			r = run(t, e, append(tt.args, "--json")...)
			if r.code != ExitInvalid {
				t.Fatalf("--json: exit %d, want %d", r.code, ExitInvalid)
			}
			got := decode[publishedOutput](t, r.stdout)
			raw := decode[map[string]any](t, r.stdout)
			if got.Accepted == nil || *got.Accepted || got.Code != tt.wantCode || got.Message == "" {
				t.Errorf("--json = %+v", got)
			}
			if _, ok := raw["errors"].([]any); !ok {
				t.Errorf("--json errors = %#v, want a list", raw["errors"])
			}
			if len(got.Errors) != len(tt.wantErrors) {
				t.Fatalf("--json errors = %+v, want %d", got.Errors, len(tt.wantErrors))
			}
			for i, want := range tt.wantErrors {
				if got.Errors[i].Pointer != want.Pointer || got.Errors[i].Message == "" {
					t.Errorf("error %d = %+v, want pointer %q with a message", i, got.Errors[i], want.Pointer)
				}
			}
		})
	}
}

func TestPublishFile(t *testing.T) {
	t.Parallel()
	e := appliedEnv(t)
	line := func(subject, data string) string {
		return fmt.Sprintf(`{"app":"contacts","type":"contacts.person.updated","version":1,"subject":%q,"data":%s}`, subject, data)
	}
	content := strings.Join([]string{
		line("a", `{"id":"1","name":"A"}`),
		`this is not json`,
		line("b", `{"id":"2"}`),
		"",
		line("c", `{"id":"3","name":"C"}`),
		`{"app":"contacts","type":"contacts.person.updated","version":1,"subject":"d","data":{"id":"4","name":"D"},"colour":"red"}`,
	}, "\n") + "\n"
	dir := t.TempDir()
	path := writeFile(t, dir, "events.ndjson", content)

	r := run(t, e, "publish", "--file", path)
	if r.code != ExitInvalid {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, ExitInvalid, r.stdout, r.stderr)
	}
	wantContains(t, "stderr", r.stderr, "line 2: data_invalid: ", "line 3: data_invalid: ", "line 6: data_invalid: ",
		"\n  (root): ")
	if strings.Contains(r.stderr, "line 2: data_invalid: line 2:") {
		t.Errorf("line number repeated:\n%s", r.stderr)
	}
	if i, j := strings.Index(r.stderr, "line 2:"), strings.Index(r.stderr, "line 3:"); i < 0 || j < i {
		t.Errorf("rejections not in line order:\n%s", r.stderr)
	}
	wantContains(t, "stdout", r.stdout, "5 lines: 2 accepted, 3 rejected")

	// The same file again: the accepted lines carry no id, so they are new
	// events; --json reports the same counts.
	r = run(t, e, "--json", "publish", "--file", path)
	if r.code != ExitInvalid {
		t.Fatalf("--json: exit %d, want %d", r.code, ExitInvalid)
	}
	sum := decode[publish.Summary](t, r.stdout)
	if sum.Lines != 5 || sum.Accepted != 2 || sum.Rejected != 3 || len(sum.Rejections) != 3 {
		t.Errorf("summary = %+v", sum)
	}

	good := writeFile(t, dir, "good.ndjson", line("e", `{"id":"5","name":"E"}`)+"\n"+line("f", `{"id":"6","name":"F"}`))
	r = mustRun(t, e, "publish", "--file", good)
	wantContains(t, "stdout", r.stdout, "2 lines: 2 accepted, 0 rejected")
	if r.stderr != "" {
		t.Errorf("stderr = %q, want nothing (no terminal, no progress bar)", r.stderr)
	}

	r = runInput(t, e, line("g", `{"id":"7","name":"G"}`)+"\n", "publish", "--file", "-")
	if r.code != ExitOK || !strings.Contains(r.stdout, "1 line: 1 accepted") {
		t.Errorf("--file -: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	if r := run(t, e, "publish", "--file", dir+"/missing.ndjson"); r.code != ExitInvalid {
		t.Errorf("missing file: exit %d, want %d", r.code, ExitInvalid)
	}

	st := decode[statusJSON](t, mustRun(t, e, "status", "--json").stdout)
	if st.Relay.Undispatched != 2+2+2+1 {
		t.Errorf("undispatched = %d, want 7", st.Relay.Undispatched)
	}
}

func TestStatus(t *testing.T) {
	t.Parallel()
	e := appliedEnv(t)
	r := mustRun(t, e, "status")
	wantContains(t, "status", r.stdout, "undispatched events: 0", "none")
	st := decode[statusJSON](t, mustRun(t, e, "status", "--json").stdout)
	if st.Relay.Undispatched != 0 || st.LastRejections == nil || len(st.LastRejections) != 0 {
		t.Errorf("empty status = %+v", st)
	}

	mustRun(t, e, personUpdated("person-1", `{"id":"p1","name":"Ann"}`)...)
	mustRun(t, e, personUpdated("person-2", `{"id":"p2","name":"Bo"}`)...)
	for i := range 11 {
		run(t, e, personUpdated(fmt.Sprintf("person-%d", i), `{"id":"p"}`)...)
	}
	run(t, e, "publish", "--app", "contacts", "--type", "billing.invoice.paid", "--version", "1", "--subject", "k", "--data", "{}")

	r = mustRun(t, e, "status")
	wantContains(t, "status", r.stdout, "undispatched events: 2, the oldest waiting ",
		"CODE", "type_not_owned", "data_invalid", "billing.invoice.paid@1", "contacts.person.updated@1", "contacts")
	st = decode[statusJSON](t, mustRun(t, e, "status", "--json").stdout)
	if st.Relay.Undispatched != 2 || st.Relay.OldestAgeSeconds < 0 {
		t.Errorf("relay = %+v", st.Relay)
	}
	if len(st.LastRejections) != statusRejections {
		t.Fatalf("%d rejections listed, want %d", len(st.LastRejections), statusRejections)
	}
	latest := st.LastRejections[0]
	if latest.Code != publish.CodeTypeNotOwned || latest.App != "contacts" || latest.Type != "billing.invoice.paid" ||
		latest.Reason == "" || time.Since(latest.Time) > time.Hour {
		t.Errorf("latest rejection = %+v", latest)
	}
}

func TestProgressBar(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		total int64
		read  int64
		want  string
	}{
		{"unknown size", 0, 500, "10 lines, 1 rejected"},
		{"half", 1000, 500, "[###############...............]  50%  10 lines, 1 rejected"},
		{"done", 1000, 1000, "[##############################] 100%  10 lines, 1 rejected"},
		{"read ahead of size", 1000, 1200, "[##############################] 100%  10 lines, 1 rejected"},
	}
	for _, tt := range tests {
		c := &countingReader{r: strings.NewReader("")}
		c.n.Store(tt.read)
		b := newProgressBar(&bytes.Buffer{}, tt.total, c)
		if got := b.render(10, 1); got != tt.want {
			t.Errorf("%s: render = %q, want %q", tt.name, got, tt.want)
		}
	}

	var out bytes.Buffer
	now := time.Unix(0, 0)
	b := newProgressBar(&out, 0, &countingReader{r: strings.NewReader("")})
	b.now = func() time.Time { return now }
	b.update(500, 0)
	b.update(1000, 0) // within progressRedraw: skipped
	now = now.Add(progressRedraw)
	b.update(1500, 2)
	b.clear()
	if want := "\r500 lines, 0 rejected\r1500 lines, 2 rejected\r\x1b[K"; out.String() != want {
		t.Errorf("bar wrote %q, want %q", out.String(), want)
	}
	if isTerminal(&out) {
		t.Error("a buffer is not a terminal")
	}
}

// 32 MiB of --data was read whole and parsed before the event limit refused
// it. The data here is not JSON at its end, so only a refusal before parsing
// answers payload_too_large rather than data_invalid.
func TestPublishDataFileRefusedWhileReading(t *testing.T) {
	t.Parallel()
	e := appliedEnv(t)
	huge := `[` + strings.Repeat(`1,`, 16<<20) + `oops`
	path := writeFile(t, t.TempDir(), "huge.json", huge)
	for name, r := range map[string]result{
		"@file": run(t, e, personUpdated("k", "@"+path)...),
		"@-":    runInput(t, e, huge, personUpdated("k", "@-")...),
	} {
		if r.code != ExitInvalid || !strings.HasPrefix(r.stderr, "rejected: payload_too_large: ") ||
			!strings.Contains(r.stderr, fmt.Sprintf("over the limit of %d bytes", publish.DefaultMaxEventBytes)) {
			t.Errorf("%s: exit %d, stderr %q; want payload_too_large", name, r.code, r.stderr)
		}
	}
}
