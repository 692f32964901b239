package cli

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"herald/workflows"
)

func TestQuoteQuery(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"failed", `"failed"`},
		{"billing:contacts.person.updated@1", `"billing:contacts.person.updated@1"`},
		{`a"b`, `"a\"b"`},
		{`a\b`, `"a\\b"`},
		{`a\") OR true OR ("`, `"a\\\") OR true OR (\""`},
		{"it's", `"it's"`},
	}
	for _, tt := range tests {
		if got := quoteQuery(tt.in); got != tt.want {
			t.Errorf("quoteQuery(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestDeliveryFilterQuery(t *testing.T) {
	t.Parallel()
	base := `WorkflowType = "Delivery" AND ExecutionStatus = "Running"`
	tests := []struct {
		f    deliveryFilter
		want string
	}{
		{deliveryFilter{}, base},
		{deliveryFilter{Status: "failed"}, base + ` AND HeraldStatus = "failed"`},
		{deliveryFilter{EventType: "contacts.person.updated", Status: "idle"},
			base + ` AND HeraldEventType = "contacts.person.updated" AND HeraldStatus = "idle"`},
		{deliveryFilter{Subscription: billingSub, App: "billing", Status: "paused"},
			base + ` AND HeraldSubscription = "` + billingSub + `" AND HeraldApp = "billing" AND HeraldStatus = "paused"`},
	}
	for _, tt := range tests {
		if got := tt.f.query(); got != tt.want {
			t.Errorf("%+v: query\n%s\nwant\n%s", tt.f, got, tt.want)
		}
	}
}

// TestShellQuote checks that a POSIX shell reads each quoted string back as
// the original.
func TestShellQuote(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"deliver:billing:contacts.person.updated@1:person-42", "deliver:billing:contacts.person.updated@1:person-42"},
		{`{"actor":"al"}`, `'{"actor":"al"}'`},
		{"it's", `'it'\''s'`},
		{"two words", "'two words'"},
		{"", "''"},
		{"$HOME `x` \\ ;|&", "'$HOME `x` \\ ;|&'"},
	}
	for _, tt := range tests {
		got := shellQuote(tt.in)
		if got != tt.want {
			t.Errorf("shellQuote(%q) = %s, want %s", tt.in, got, tt.want)
		}
		out, err := exec.Command("sh", "-c", "printf %s "+got).Output()
		if err != nil {
			t.Fatalf("sh: %v", err)
		}
		if string(out) != tt.in {
			t.Errorf("the shell read %s as %q, want %q", got, out, tt.in)
		}
	}
}

func TestSplitDeliveryID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id, wantSub, wantSubject string
		ok                       bool
	}{
		{"deliver:billing:contacts.person.updated@1:person-42", billingSub, "person-42", true},
		{"deliver:audit-log:contacts.person.updated@12:a:b@3:c", "audit-log:contacts.person.updated@12", "a:b@3:c", true},
		{"deliver:billing:contacts.person.updated@1:", "", "", false},
		{"deliver:billing:contacts.person.updated@x:k", "", "", false},
		{"deliver:billing:contacts.person.updated:k", "", "", false},
		{"retention", "", "", false},
	}
	for _, tt := range tests {
		sub, subject, ok := splitDeliveryID(tt.id)
		if sub != tt.wantSub || subject != tt.wantSubject || ok != tt.ok {
			t.Errorf("splitDeliveryID(%q) = %q, %q, %v; want %q, %q, %v", tt.id, sub, subject, ok, tt.wantSub, tt.wantSubject, tt.ok)
		}
	}
	if got := subjectOf("deliver:"+billingSub+":x@1:y", billingSub); got != "x@1:y" {
		t.Errorf("subjectOf = %q", got)
	}
}

func TestValidSubscriptionID(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]bool{
		billingSub: true,
		"audit-log:contacts.person.updated@1000000": true,
		"billing:contacts.person.updated@0":         false,
		"billing:contacts.person.updated@01":        false,
		"billing:contacts@1":                        false,
		"billing:Contacts.person.updated@1":         false,
		`billing:contacts.person"x@1`:               false,
		"billing":                                   false,
		"":                                          false,
	} {
		if got := validSubscriptionID(id); got != want {
			t.Errorf("validSubscriptionID(%q) = %v, want %v", id, got, want)
		}
	}
}

// TestDeliveryCommandUsage checks the flag rules, which are enforced before
// starter talks to Temporal (none is configured here).
func TestDeliveryCommandUsage(t *testing.T) {
	t.Parallel()
	e := env{"TEMPORAL_ADDRESS": "127.0.0.1:1"}
	tests := []struct {
		args       []string
		wantStderr string
	}{
		{[]string{"deliveries", "--status", "broken"}, `unknown --status "broken"`},
		{[]string{"deliveries", "--limit", "0"}, "--limit must be from 1 to 10000"},
		{[]string{"deliveries", "--subscription", "billing"}, `--subscription "billing" is not a subscription id`},
		{[]string{"deliveries", "--app", "Billing"}, `--app "Billing" is not an app id`},
		{[]string{"deliveries", "--type", "contacts"}, `--type "contacts" is not an event type`},
		{[]string{"deliveries", "--type", "Contacts.person.updated"}, `--type "Contacts.person.updated" is not an event type`},
		{[]string{"deliveries", "extra"}, `deliveries: unexpected argument "extra"`},
		{[]string{"inspect"}, "inspect: --subscription and --subject are required"},
		{[]string{"inspect", "x", "y"}, `inspect: unexpected argument "y"`},
		{[]string{"inspect", "wf-1"}, `"wf-1" is not a delivery workflow id`},
		{[]string{"inspect", "deliver:a:b.c@1:k", "--subject", "k"}, "give WORKFLOW-ID or --subscription and --subject, not both"},
		{[]string{"redeliver", "--subscription", billingSub}, "redeliver: --subscription and --subject are required"},
		{[]string{"redeliver", "--subject", "k"}, "redeliver: --subscription and --subject are required"},
		{[]string{"redeliver", "--subscription", billingSub, "--subject", "k", "--all"}, "flag provided but not defined: -all"},
		{[]string{"redeliver", "--all-failed"}, "--all-failed needs --subscription"},
		{[]string{"redeliver", "--subscription", billingSub, "--all-failed", "--subject", "k"}, "it takes no --subject, --event or --all"},
		{[]string{"cancel", "--subscription", billingSub, "--all-failed", "--all"}, "it takes no --subject, --event or --all"},
		{[]string{"cancel", "--subscription", billingSub, "--subject", "k", "--all", "--event", "e"}, "give --event or --all, not both"},
		{[]string{"cancel", "--subscription", billingSub, "--subject", "bad\x01key"}, "--subject has a control or non-printable character"},
		{[]string{"cancel", "--subscription", billingSub, "--subject", strings.Repeat("k", 201)}, "--subject is longer than 200 bytes"},
		{[]string{"pause", "--subscription", billingSub, "--subject", "k", "--all-failed"}, "flag provided but not defined: -all-failed"},
		{[]string{"resume", "--subscription", billingSub, "--subject", "k", "--event", "e"}, "flag provided but not defined: -event"},
		{[]string{"pause", "--subscription", billingSub, "--subject", "k", "surplus"}, `pause: unexpected argument "surplus"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := run(t, e, tt.args...)
			if r.code != ExitInvalid {
				t.Fatalf("exit %d, want %d\nstderr:\n%s", r.code, ExitInvalid, r.stderr)
			}
			wantContains(t, "stderr", r.stderr, tt.wantStderr)
		})
	}
}

// TestTemporalUnreachable: the delivery commands exit 1 with the address;
// status still reports the database part and exits 0. (The manifests are
// applied: redeliver reads the subscription's state before Temporal.)
func TestTemporalUnreachable(t *testing.T) {
	t.Parallel()
	e := appliedEnv(t).with("TEMPORAL_ADDRESS", "127.0.0.1:1").with("HERALD_WORKER_URL", "http://127.0.0.1:1")
	for _, args := range [][]string{
		{"deliveries"},
		{"inspect", "deliver:" + billingSub + ":k"},
		{"redeliver", "--subscription", billingSub, "--subject", "k"},
		{"cancel", "--subscription", billingSub, "--all-failed"},
	} {
		r := run(t, e, args...)
		if r.code != ExitError {
			t.Errorf("%v: exit %d, want %d\nstderr:\n%s", args, r.code, ExitError, r.stderr)
		}
		wantContains(t, "stderr", r.stderr, "connect to Temporal at 127.0.0.1:1")
	}
	r := mustRun(t, e, "status")
	wantContains(t, "status", r.stdout, "undispatched events: 0", "Temporal unreachable: connect to Temporal at 127.0.0.1:1",
		"Worker (http://127.0.0.1:1/readyz): unreachable (")
	st := decode[statusJSON](t, mustRun(t, e, "status", "--json").stdout)
	if st.Keys.Error == "" || st.Keys.Reachable || st.Keys.ByStatus != nil || st.Keys.Address != "127.0.0.1:1" || st.Worker.State != workerUnreachable {
		t.Errorf("status --json: keys %+v, worker %+v", st.Keys, st.Worker)
	}
}

func TestCheckWorker(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		status    int
		body      string
		wantState string
		wantText  string
	}{
		{"ready", 200, `{"database":"ok","temporal":"ok","relayLeader":"true"}`, workerReady, "ready"},
		{"temporal down", 503, `{"database":"ok","temporal":"context deadline exceeded","relayLeader":"false"}`,
			workerNotReady, "not ready (temporal: context deadline exceeded)"},
		{"both down", 503, `{"database":"refused","temporal":"refused"}`, workerNotReady, "not ready (database: refused; temporal: refused)"},
		{"not JSON", 500, `oops`, workerNotReady, "not ready (HTTP 500 Internal Server Error)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/readyz" {
					http.NotFound(w, r)
					return
				}
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			got := checkWorker(t.Context(), srv.URL)
			if got.State != tt.wantState || got.text() != tt.wantText || got.URL != srv.URL+"/readyz" {
				t.Errorf("checkWorker = %+v (%q), want %s (%q)", got, got.text(), tt.wantState, tt.wantText)
			}
		})
	}
	inv := &invocation{getenv: env{"HERALD_WORKER_URL": "http://w:9/"}.getenv}
	if got := inv.workerURL(); got != "http://w:9" {
		t.Errorf("workerURL = %q", got)
	}
	inv.getenv = env{}.getenv
	if got := inv.workerURL(); got != defaultWorkerURL {
		t.Errorf("default workerURL = %q", got)
	}
}

func TestPrintState(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	next := now.Add(90 * time.Second)
	st := workflows.State{
		Subscription: billingSub, Subject: "person 42", Status: workflows.StatusRetrying,
		Head: &workflows.HeadState{EventID: "e-1", Seq: 7, Type: "contacts.person.updated", Attempt: 3,
			Code: "handler_failed", LastError: "HTTP 500\nboom", NextAttemptAt: &next},
		Queued:   []workflows.QueuedEvent{{EventID: "e-2", Seq: 9, Type: "contacts.person.updated", HeldBy: "e-1"}},
		Counters: workflows.Counters{Delivered: 5, Failed: 1, Cancelled: 2, Rearms: 1},
		Outcomes: []workflows.Outcome{{EventID: "e-0", Seq: 6, Result: "delivered", Attempts: 1, At: now.Add(-time.Minute)}},
	}
	var b bytes.Buffer
	printState(&b, workflows.DeliveryID(billingSub, "person 42"), st, now)
	wantContains(t, "state view", b.String(),
		"deliver:"+billingSub+":person 42", "status        retrying",
		"event         e-1 (seq 7, contacts.person.updated)", "attempt       3",
		"last error    handler_failed: HTTP 500 boom", "next attempt  in 1m30s",
		"Queued behind the head: 1", "e-2", "Counters: delivered 5, failed 1, cancelled 2, re-armed 1",
		"Last outcomes (oldest first): 1", "delivered")

	st.Status = workflows.StatusFailed
	b.Reset()
	printState(&b, "id", st, now)
	wantContains(t, "failed view", b.String(), "next attempt  in 1m30s (", ", when the key re-arms itself)",
		"Recover: starter redeliver --subscription "+billingSub+" --subject 'person 42'",
		"or: starter cancel --subscription "+billingSub+" --subject 'person 42'")

	b.Reset()
	printState(&b, "id", workflows.State{Subscription: billingSub, Subject: "k", Status: workflows.StatusIdle}, now)
	wantContains(t, "idle view", b.String(), "none (nothing queued)", "Queued behind the head: 0")
	if strings.Contains(b.String(), "Recover") {
		t.Errorf("an idle key got a recovery hint:\n%s", b.String())
	}
}

func TestRelativeTimeAndErrorText(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for d, want := range map[time.Duration]string{
		4 * time.Second: "in 4s", -2*time.Minute - 10*time.Second: "2m10s ago", 300 * time.Millisecond: "now",
		2 * time.Hour: "in 2h0m0s",
	} {
		if got := relativeTime(now.Add(d), now); got != want {
			t.Errorf("relativeTime(%v) = %q, want %q", d, got, want)
		}
	}
	tests := []struct {
		code, msg string
		width     int
		want      string
	}{
		{"schema_mismatch", "HTTP 422", 0, "schema_mismatch: HTTP 422"},
		{"", "boom", 0, "boom"},
		{"throttled", "", 0, "throttled"},
		{"c", "ééééé", 5, "c: é…"},
	}
	for _, tt := range tests {
		if got := errorText(tt.code, tt.msg, tt.width); got != tt.want {
			t.Errorf("errorText(%q, %q, %d) = %q, want %q", tt.code, tt.msg, tt.width, got, tt.want)
		}
	}
}
