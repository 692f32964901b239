package api

import (
	"bytes"
	"html"
	"regexp"
	"testing"

	"herald/workflows"
)

// TestConsoleKeyCommandIsShellQuoted: without a Temporal UI link the key's
// page shows the command that shows its running workflow, for an operator
// to copy into a shell. The subject key is the publisher's (any printable
// text), so a key named x'; touch pwned; echo ' made that command run
// whatever the publisher wrote. The workflow id is quoted for a POSIX
// shell. (Rendered directly: Temporal's dev server does not find a
// workflow id holding a ' with WorkflowId = "...", so its page says "not
// running" and shows no command.)
func TestConsoleKeyCommandIsShellQuoted(t *testing.T) {
	c := New(nil, Options{}).console
	const subject = `x'; touch /tmp/herald-pwned; echo '`
	id := workflows.DeliveryID("billing:contacts.person.updated@1", subject)
	var buf bytes.Buffer
	err := c.pages["key"].Execute(&buf, view{Title: "Key", Data: keyView{WorkflowID: id,
		Subscription: "billing:contacts.person.updated@1", Subject: subject, Running: true, Status: workflows.StatusFailed}})
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`<code>(temporal workflow show [^<]*)</code>`).FindStringSubmatch(buf.String())
	if m == nil {
		t.Fatalf("no command on the key's page:\n%s", buf.String())
	}
	want := `temporal workflow show --workflow-id 'deliver:billing:contacts.person.updated@1:x'\''; touch /tmp/herald-pwned; echo '\'''`
	if got := html.UnescapeString(m[1]); got != want {
		t.Fatalf("the key's page shows\n  %s\nwant the workflow id quoted for a shell:\n  %s", got, want)
	}
}
