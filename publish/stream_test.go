package publish_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"herald/publish"
)

func TestPublishStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.publisher(publish.Options{MaxEventBytes: 2000})
	dupID := "5b0e6c1a-3f2d-4e8b-9c7a-1d2e3f4a5b6c"
	ev := func(subject, name string) string {
		return fmt.Sprintf(`{"app":"contacts","type":"contacts.person.updated","version":1,"subject":%q,"data":{"name":%q}}`, subject, name)
	}
	withID := func(subject, name string) string {
		return fmt.Sprintf(`{"id":%q,"app":"contacts","type":"contacts.person.updated","version":1,"subject":%q,"data":{"name":%q}}`,
			dupID, subject, name)
	}
	lines := []string{
		ev("p-1", "Ada"),   // 1
		"",                 // 2 blank
		"{not json",        // 3 malformed
		ev("p-2", "Bob"),   // 4
		withID("p-3", "C"), // 5
		`{"app":"contacts","type":"contacts.person.updated","version":1,"subject":"p-4","data":{"name":5}}`, // 6 schema
		withID("p-3", "C"), // 7 duplicate
		`{"app":"contacts","type":"contacts.person.updated","version":1,"subject":"s","data":{},"x":1}`, // 8 unknown field
		`{"app":"contacts","type":"contacts.blob.stored","version":1,"subject":"big","data":"` +
			strings.Repeat("x", 70<<10) + `"}`, // 9 over MaxEventBytes + 64 KiB
		withID("p-3", "Changed"), // 10 id conflict
		ev("p-5", "Eve"),         // 11
	}
	var progress [][2]int
	sum, err := p.PublishStream(e.ctx, strings.NewReader(strings.Join(lines, "\n")+"\n"), 2,
		func(done, rejected int) { progress = append(progress, [2]int{done, rejected}) })
	if err != nil {
		t.Fatalf("PublishStream: %v", err)
	}

	if sum.Lines != 10 || sum.Accepted != 5 || sum.Duplicates != 1 || sum.Rejected != 5 {
		t.Errorf("summary counts = lines %d accepted %d duplicates %d rejected %d; want 10, 5, 1, 5",
			sum.Lines, sum.Accepted, sum.Duplicates, sum.Rejected)
	}
	wantRejections := []struct {
		line    int
		code    string
		message string
	}{
		{3, publish.CodeDataInvalid, "line 3: invalid JSON"},
		{6, publish.CodeDataInvalid, "/name: "},
		{8, publish.CodeDataInvalid, `unknown field "x"`},
		{9, publish.CodePayloadTooLarge, "line 9 is longer than 67536 bytes"},
		{10, publish.CodeIDConflict, dupID},
	}
	if len(sum.Rejections) != len(wantRejections) {
		t.Fatalf("rejections = %+v, want %d", sum.Rejections, len(wantRejections))
	}
	// Unreadable lines are settled as they are read, the others per batch,
	// so order by line before comparing.
	byLine := map[int]publish.LineRejection{}
	for _, r := range sum.Rejections {
		byLine[r.Line] = r
	}
	for _, w := range wantRejections {
		r, ok := byLine[w.line]
		if !ok || r.Code != w.code || !strings.Contains(r.Message, w.message) {
			t.Errorf("line %d: rejection %+v, want %s containing %q", w.line, r, w.code, w.message)
		}
	}
	if len(byLine[6].Errors) != 1 || byLine[6].Errors[0].Pointer != "/name" {
		t.Errorf("line 6 errors = %+v, want one at /name", byLine[6].Errors)
	}

	if len(progress) == 0 {
		t.Fatal("progress was never called")
	}
	for i := 1; i < len(progress); i++ {
		if progress[i][0] < progress[i-1][0] || progress[i][1] < progress[i-1][1] {
			t.Errorf("progress went backwards: %v", progress)
		}
	}
	if last := progress[len(progress)-1]; last != [2]int{10, 5} {
		t.Errorf("last progress = %v, want [10 5]", last)
	}

	if n := e.count("accepted"); n != 4 {
		t.Errorf("%d accepted rows, want 4", n)
	}
	if n := e.count("rejected"); n != 5 {
		t.Errorf("%d rejected rows, want 5", n)
	}
}

func TestPublishStreamStopsOnCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.publisher(publish.Options{})
	ctx, cancel := context.WithCancel(e.ctx)
	line := `{"app":"contacts","type":"contacts.person.updated","version":1,"subject":"s","data":{"name":"a"}}` + "\n"
	calls := 0
	sum, err := p.PublishStream(ctx, strings.NewReader(strings.Repeat(line, 10)), 3, func(done, rejected int) {
		calls++
		cancel()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if calls != 1 || sum.Lines != 3 || sum.Accepted != 3 {
		t.Errorf("after cancel: %d progress calls, summary %+v; want 1 call and 3 lines", calls, sum)
	}
}
