package cli

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/workflows"
)

// TestRecoverFailedKeys drives two keys into failed, finds them with
// deliveries and inspect, and recovers one with redeliver and the other with
// cancel: the held events arrive in order and each action leaves one audit
// row with its actor and reason.
func TestRecoverFailedKeys(t *testing.T) {
	t.Parallel()
	h := startHerald(t)
	h.rejectIf(func(app, subject string, n int) bool {
		return app == "billing" && n == 1 && (subject == "k-cancel" || subject == "k-redeliver")
	})
	h.publish([]string{"k-redeliver", "k-cancel", "k-ok"}, 1, 2, 3)
	h.waitArrivals("billing", "k-ok", 1, 2, 3)
	h.waitArrivals("audit-log", "k-cancel", 1, 2, 3)

	// deliveries --status failed lists exactly the failed keys.
	h.waitListed([]string{"k-cancel", "k-redeliver"}, "--status", "failed")
	out := decode[deliveriesJSON](t, mustRun(t, h.env, "deliveries", "--status", "failed", "--json").stdout)
	if out.More || !strings.Contains(out.Query, `HeraldStatus = "failed"`) {
		t.Errorf("deliveries --json: more %v, query %q", out.More, out.Query)
	}
	for _, k := range out.Keys {
		if k.Subscription != billingSub || k.Status != workflows.StatusFailed || k.App != "billing" ||
			k.WorkflowID != workflows.DeliveryID(billingSub, k.Subject) || k.Queued != 3 ||
			k.Head == nil || k.Head.Code != "schema_mismatch" || k.StateError != "" {
			t.Errorf("failed key listed as %+v (head %+v)", k, k.Head)
		}
	}
	text := mustRun(t, h.env, "deliveries", "--status", "failed").stdout
	wantContains(t, "deliveries text", text, "SUBSCRIPTION", "LAST ERROR", billingSub, "k-cancel", "k-redeliver", "schema_mismatch: HTTP 422")
	if strings.Contains(text, "k-ok") {
		t.Errorf("deliveries --status failed lists a healthy key:\n%s", text)
	}
	h.waitListed([]string{"k-cancel", "k-ok", "k-redeliver"}, "--app", "audit-log", "--status", "idle")
	h.waitListed([]string{"k-ok"}, "--subscription", billingSub, "--status", "idle")
	if got := h.listed("--limit", "2"); len(got) != 2 {
		t.Errorf("deliveries --limit 2 listed %v", got)
	}
	if out := decode[deliveriesJSON](t, mustRun(t, h.env, "deliveries", "--limit", "5", "--json").stdout); len(out.Keys) != 5 || !out.More {
		t.Errorf("deliveries --limit 5 over 6 keys: %d keys, more %v", len(out.Keys), out.More)
	}

	// inspect shows the failed head with its code and the events it holds.
	id := workflows.DeliveryID(billingSub, "k-redeliver")
	st := h.state(billingSub, "k-redeliver")
	if st.Status != workflows.StatusFailed || st.Head == nil || st.Head.Code != "schema_mismatch" || st.Head.Attempt != 1 ||
		len(st.Queued) != 2 || st.Queued[0].HeldBy != st.Head.EventID || st.Counters.Failed != 1 {
		t.Fatalf("inspect --json: %+v (head %+v)", st, st.Head)
	}
	text = mustRun(t, h.env, "inspect", id).stdout
	wantContains(t, "inspect text", text, id, "status        failed", st.Head.EventID, "schema_mismatch: HTTP 422",
		"Queued behind the head: 2", "Counters: delivered 0, failed 1", "Recover: starter redeliver --subscription "+billingSub+" --subject k-redeliver")

	// redeliver after the fix delivers the held events in order.
	h.rejectIf(func(app, subject string, n int) bool {
		return app == "billing" && n == 1 && subject == "k-cancel"
	})
	r := mustRun(t, h.env, "redeliver", "--subscription", billingSub, "--subject", "k-redeliver", "--reason", "handler fixed", "--actor", "alice")
	wantContains(t, "redeliver output", r.stdout, "redeliver "+id+": done",
		"requeued:  1 event ("+st.Head.EventID+")", "key now:   delivering, 3 events queued",
		"temporal workflow update execute --address "+h.Cfg.TemporalAddress+" --namespace "+h.Cfg.TemporalNamespace+" --workflow-id "+id+
			` --name redeliver --input '{"actor":"alice","reason":"handler fixed"}'`)
	h.waitArrivals("billing", "k-redeliver", 1, 2, 3)
	h.wantAudit(workflows.AuditDeliveryRedelivered, billingSub, "k-redeliver", "alice", "handler fixed")

	// cancel drops the head; the rest arrive. The actor defaults to $USER.
	head := h.state(billingSub, "k-cancel").Head
	r = mustRun(t, h.env, "cancel", "--subscription", billingSub, "--subject", "k-cancel", "--reason", "bad data", "--json")
	sent := decode[opJSON](t, r.stdout)
	if sent.Update != "cancel" || sent.WorkflowID != workflows.DeliveryID(billingSub, "k-cancel") || sent.Result == nil ||
		!sent.Result.Changed || !slices.Equal(sent.Result.Cancelled, []string{head.EventID}) || sent.Result.Queued != 2 ||
		!strings.HasPrefix(sent.TemporalCommand, "temporal workflow update execute") ||
		!strings.Contains(sent.TemporalCommand, `--name cancel --input '{"actor":"tester","reason":"bad data"}'`) ||
		!strings.HasPrefix(sent.SignalCommand, "temporal workflow signal") {
		t.Errorf("cancel --json = %+v (result %+v)", sent, sent.Result)
	}
	h.waitArrivals("billing", "k-cancel", 2, 3)
	h.wantAudit(workflows.AuditDeliveryCancelled, billingSub, "k-cancel", "tester", "bad data")
	if st := h.state(billingSub, "k-cancel"); st.Counters.Cancelled != 1 || st.Counters.Delivered != 2 || st.Head != nil {
		t.Errorf("k-cancel after cancel: %+v", st)
	}
	h.waitListed(nil, "--status", "failed")
}

// TestPauseResumeKey holds one key with pause, checks it queues without
// delivering, and releases it with resume; both leave an audit row.
func TestPauseResumeKey(t *testing.T) {
	t.Parallel()
	h := startHerald(t)
	h.publish([]string{"k-p"}, 1)
	h.waitArrivals("billing", "k-p", 1)
	// The subscriber has the event before the workflow hears back from
	// the attempt: wait until the key holds nothing.
	testkit.Eventually(t, 10*time.Second, "k-p to hold nothing after its delivery", func() bool {
		st := h.state(billingSub, "k-p")
		return st.Head == nil && len(st.Queued) == 0
	})

	r := mustRun(t, h.env, "pause", "--subscription", billingSub, "--subject", "k-p", "--reason", "maintenance", "--actor", "bob")
	wantContains(t, "pause output", r.stdout, "pause "+workflows.DeliveryID(billingSub, "k-p")+": done", "key now:   paused, 0 events queued",
		`update execute --address `+h.Cfg.TemporalAddress+` --namespace `+h.Cfg.TemporalNamespace+` --workflow-id `+workflows.DeliveryID(billingSub, "k-p")+
			` --name pause --input '{"actor":"bob","reason":"maintenance"}'`)
	// heldBehindPause checks that the key's run holds it paused (what: the
	// run), then publishes event n and waits for it to queue behind the
	// pause.
	heldBehindPause := func(what string, n int) {
		t.Helper()
		if st := h.state(billingSub, "k-p"); st.Status != workflows.StatusPaused || !st.KeyPaused {
			t.Fatalf("%s: status %s, key paused %v", what, st.Status, st.KeyPaused)
		}
		h.publish([]string{"k-p"}, n)
		testkit.Eventually(t, 10*time.Second, fmt.Sprintf("event %d to queue behind the pause", n), func() bool {
			st := h.state(billingSub, "k-p")
			return st.Head != nil && st.Head.Seq > 0 && st.Status == workflows.StatusPaused
		})
	}
	// The update answered once applied: the key is paused now.
	heldBehindPause("after pause answered", 2)
	text := mustRun(t, h.env, "inspect", "--subscription", billingSub, "--subject", "k-p").stdout
	wantContains(t, "inspect of a paused key", text, "status        paused", "Release: starter resume")
	h.waitListed([]string{"k-p"}, "--status", "paused")
	if got := h.Sub.Ns("billing", "k-p"); !slices.Equal(got, []int{1}) {
		t.Fatalf("a paused key delivered %v", got)
	}
	h.wantAudit(workflows.AuditDeliveryPaused, billingSub, "k-p", "bob", "maintenance")

	mustRun(t, h.env, "resume", "--subscription", billingSub, "--subject", "k-p", "--reason", "done", "--actor", "bob")
	h.waitArrivals("billing", "k-p", 1, 2)
	h.wantAudit(workflows.AuditDeliveryResumed, billingSub, "k-p", "bob", "done")

	// Paused again, then its workflow terminated with nothing queued: the
	// pause is kept in PostgreSQL, and resume starts a run to take it.
	id := workflows.DeliveryID(billingSub, "k-p")
	testkit.Eventually(t, 10*time.Second, "k-p to hold nothing after its second delivery", func() bool {
		st := h.state(billingSub, "k-p")
		return st.Head == nil && len(st.Queued) == 0
	})
	mustRun(t, h.env, "pause", "--subscription", billingSub, "--subject", "k-p", "--reason", "again", "--actor", "bob")
	tc := h.Dial()
	system.Terminate(t, tc, id)
	if paused, err := h.Svc.Store.KeyPaused(context.Background(), billingSub, "k-p"); err != nil || !paused {
		t.Fatalf("after the terminate the key's pause row: %v, %v", paused, err)
	}
	r = mustRun(t, h.env, "resume", "--subscription", billingSub, "--subject", "k-p", "--reason", "gone run", "--actor", "bob")
	wantContains(t, "resume of a paused key without a run", r.stdout, "resume "+id+": done",
		"temporal workflow execute-update-with-start", "--id-conflict-policy UseExisting")
	if paused, err := h.Svc.Store.KeyPaused(context.Background(), billingSub, "k-p"); err != nil || paused {
		t.Fatalf("after the resume the key's pause row: %v, %v", paused, err)
	}
	if rows := h.audit(workflows.AuditDeliveryResumed, billingSub, "k-p"); len(rows) != 2 || !strings.Contains(string(rows[0].Metadata), `"gone run"`) {
		t.Fatalf("delivery.resumed rows of k-p %+v; want two, the newest for the resume without a run", rows)
	}
	// A key neither paused nor running: nothing to resume, no run started.
	mustRun(t, h.env, "pause", "--subscription", billingSub, "--subject", "k-p", "--actor", "bob")
	mustRun(t, h.env, "resume", "--subscription", billingSub, "--subject", "k-p", "--actor", "bob")
	system.Terminate(t, tc, id)
	if r := run(t, h.env, "resume", "--subscription", billingSub, "--subject", "k-p", "--actor", "bob"); r.code == ExitOK {
		t.Fatalf("resume of a key neither paused nor running exited 0:\n%s", r.stdout)
	}
	if d, err := tc.DescribeWorkflow(context.Background(), id, ""); err != nil ||
		d.RawResponse.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("a resume of a key neither paused nor running started a run (%v)", err)
	}

	// Its run gone, the key of the log is paused all the same: the pause
	// starts a run, which holds the key's next event until the resume.
	r = mustRun(t, h.env, "pause", "--subscription", billingSub, "--subject", "k-p", "--reason", "no run", "--actor", "bob")
	wantContains(t, "pause of a key without a run", r.stdout, "pause "+id+": done", "key now:   paused",
		"temporal workflow execute-update-with-start", "--id-conflict-policy UseExisting")
	if paused, err := h.Svc.Store.KeyPaused(context.Background(), billingSub, "k-p"); err != nil || !paused {
		t.Fatalf("after the pause without a run the key's pause row: %v, %v", paused, err)
	}
	heldBehindPause("the run the pause started", 3)
	if got := h.Sub.Ns("billing", "k-p"); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("a key paused without a run delivered %v", got)
	}
	mustRun(t, h.env, "resume", "--subscription", billingSub, "--subject", "k-p", "--actor", "bob")
	h.waitArrivals("billing", "k-p", 1, 2, 3)

	// A database that does not answer whether the key is of the log: the
	// pause says so, and is not blamed on Temporal or a worker.
	system.Terminate(t, tc, id)
	silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers: the connection's deadline runs out
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	offline := h.env.with("HERALD_DATABASE_URL", "postgres://herald@"+silent.Addr().String()+"/herald?sslmode=disable&connect_timeout=2")
	if r := run(t, offline, "pause", "--subscription", billingSub, "--subject", "k-p", "--actor", "bob"); r.code != ExitError ||
		!strings.Contains(r.stderr, "PostgreSQL: ") || strings.Contains(r.stderr, "worker") {
		t.Fatalf("pause with PostgreSQL unreachable: exit %d, stderr %q; want %d naming PostgreSQL, no worker", r.code, r.stderr, ExitError)
	}

	// A subject the log has no event of: nothing paused, no run started.
	none := workflows.DeliveryID(billingSub, "k-none")
	r = run(t, h.env, "pause", "--subscription", billingSub, "--subject", "k-none", "--actor", "bob")
	if r.code != ExitInvalid || !strings.Contains(r.stderr, "the log holds no event of this key") {
		t.Fatalf("pause of a key the log has no event of: exit %d, stderr %q; want %d, the log holds no event", r.code, r.stderr, ExitInvalid)
	}
	if _, err := tc.DescribeWorkflow(context.Background(), none, ""); err == nil {
		t.Fatal("a pause of a key the log has no event of started a run")
	}
	if paused, err := h.Svc.Store.KeyPaused(context.Background(), billingSub, "k-none"); err != nil || paused {
		t.Fatalf("a pause of a key the log has no event of wrote its pause row: %v, %v", paused, err)
	}
}

// TestBulkRecovery recovers every failed key of a subscription with
// --all-failed, redeliver first and cancel second; the other subscription's
// failed key is left alone, and a re-run finds nothing to do.
func TestBulkRecovery(t *testing.T) {
	t.Parallel()
	h := startHerald(t)
	reject := func(fixed bool) func(app, subject string, n int) bool {
		return func(app, subject string, n int) bool {
			switch {
			case n != 1:
				return false
			case app == "billing" && strings.HasPrefix(subject, "r-"):
				return !fixed
			case app == "billing" && strings.HasPrefix(subject, "c-"):
				return true
			}
			return app == "audit-log" && subject == "c-1"
		}
	}
	h.rejectIf(reject(false))
	h.publish([]string{"r-1", "r-2"}, 1, 2)
	h.waitListed([]string{"r-1", "r-2"}, "--status", "failed", "--subscription", billingSub)

	h.rejectIf(reject(true))
	r := mustRun(t, h.env, "redeliver", "--subscription", billingSub, "--all-failed", "--reason", "subscriber fixed", "--json")
	bulk := decode[bulkJSON](t, r.stdout)
	if len(bulk.Keys) != 2 || bulk.Keys[0].Subject != "r-1" || bulk.Keys[1].Subject != "r-2" ||
		bulk.Changed != 2 || bulk.Nothing != 0 || bulk.Gone != 0 || bulk.Errors != 0 || bulk.Update != "redeliver" ||
		!strings.Contains(bulk.TemporalCommand, `AND HeraldStatus IN ("failed", "exhausted")' --name redeliver`) {
		t.Fatalf("redeliver --all-failed --json = %+v", bulk)
	}
	for _, k := range bulk.Keys {
		if k.Result != bulkChanged || k.Answer == nil || len(k.Answer.Requeued) != 1 || k.Answer.Queued != 2 {
			t.Errorf("redeliver --all-failed, key %s: %+v (answer %+v)", k.Subject, k, k.Answer)
		}
	}
	for _, k := range []string{"r-1", "r-2"} {
		h.waitArrivals("billing", k, 1, 2)
		h.wantAudit(workflows.AuditDeliveryRedelivered, billingSub, k, "tester", "subscriber fixed")
	}

	h.publish([]string{"c-1", "c-2"}, 1, 2)
	h.waitListed([]string{"c-1", "c-2"}, "--status", "failed", "--subscription", billingSub)
	h.waitListed([]string{"c-1"}, "--status", "failed", "--subscription", auditLogSub)
	r = mustRun(t, h.env, "cancel", "--subscription", billingSub, "--all-failed", "--reason", "bad batch", "--actor", "carol")
	wantContains(t, "cancel --all-failed", r.stdout, "cancel on the failed keys of "+billingSub,
		"c-1", "c-2", "changed", "2 changed, 0 with nothing to do, 0 gone, 0 failed", "temporal workflow signal", "--yes")
	for _, k := range []string{"c-1", "c-2"} {
		h.waitArrivals("billing", k, 2)
		h.wantAudit(workflows.AuditDeliveryCancelled, billingSub, k, "carol", "bad batch")
	}
	if st := h.state(auditLogSub, "c-1"); st.Status != workflows.StatusFailed {
		t.Errorf("the other subscription's failed key is %s, want it left failed", st.Status)
	}

	// Safe to re-run: once the list catches up, nothing is left to do.
	h.waitListed(nil, "--status", "failed", "--subscription", billingSub)
	r = run(t, h.env, "cancel", "--subscription", billingSub, "--all-failed", "--reason", "again")
	if r.code != ExitInvalid {
		t.Errorf("re-run with nothing to do: exit %d, want %d", r.code, ExitInvalid)
	}
	wantContains(t, "re-run", r.stdout, "no failed keys in "+billingSub+": nothing to do")
	if rows := h.audit(workflows.AuditDeliveryCancelled, billingSub, "c-1"); len(rows) != 1 {
		t.Errorf("the re-run wrote %d cancel audit rows for c-1, want still 1", len(rows))
	}
}

// TestUnknownWorkflowAndStatus covers the exit codes for keys without a
// workflow, and starter status's per-status counts and worker readiness.
func TestUnknownWorkflowAndStatus(t *testing.T) {
	t.Parallel()
	h := startHerald(t)
	h.rejectIf(func(app, subject string, n int) bool { return app == "billing" && subject == "k-bad" })
	h.publish([]string{"k-bad", "k-good"}, 1)
	h.waitArrivals("billing", "k-good", 1)
	h.waitListed([]string{"k-bad"}, "--status", "failed")

	unknown := workflows.DeliveryID(billingSub, "nobody")
	for _, args := range [][]string{
		{"inspect", unknown},
		{"inspect", "--subscription", billingSub, "--subject", "nobody"},
		{"redeliver", "--subscription", billingSub, "--subject", "nobody"},
		{"cancel", "--subscription", billingSub, "--subject", "nobody", "--all"},
		{"resume", "--subscription", "billing:contacts.person.updated@2", "--subject", "k-good"},
	} {
		r := run(t, h.env, args...)
		if r.code != ExitInvalid {
			t.Errorf("%v: exit %d, want %d\nstderr: %s", args, r.code, ExitInvalid, r.stderr)
		}
		wantContains(t, strings.Join(args, " "), r.stderr, "no delivery workflow deliver:", "it may have completed after being idle")
	}
	// A pause of a key with no run starts one only for a key of the log.
	if r := run(t, h.env, "pause", "--subscription", billingSub, "--subject", "nobody"); r.code != ExitInvalid {
		t.Errorf("pause of an unknown key: exit %d, want %d\nstderr: %s", r.code, ExitInvalid, r.stderr)
	} else {
		wantContains(t, "pause of an unknown key", r.stderr, "no delivery workflow "+unknown, "the log holds no event of this key")
	}

	var got statusJSON
	testkit.Eventually(t, 30*time.Second, "status to count the keys", func() bool {
		got = decode[statusJSON](t, mustRun(t, h.env, "status", "--json").stdout)
		return got.Keys.ByStatus[workflows.StatusFailed] == 1 && got.Keys.ByStatus[workflows.StatusIdle] == 3
	})
	if got.Keys.Error != "" || !got.Keys.Reachable || got.Keys.Total != 4 || got.Keys.Namespace != h.Cfg.TemporalNamespace || got.Worker.State != workerReady {
		t.Errorf("status --json: keys %+v, worker %+v", got.Keys, got.Worker)
	}
	text := mustRun(t, h.env, "status").stdout
	wantContains(t, "status text", text, "Relay", "Delivery keys (running delivery workflows in Temporal "+h.Cfg.TemporalAddress,
		"failed       1", "idle         3", "total        4", "1 failed key held: starter deliveries --status failed",
		"Worker (http://"+h.Svc.Addr()+"/readyz): ready")

	// A namespace Temporal does not know: status says so and still exits 0.
	r := mustRun(t, h.env.with("TEMPORAL_NAMESPACE", "no-such-namespace"), "status")
	wantContains(t, "status in an unknown namespace", r.stdout, "could not count them: count delivery workflows in namespace no-such-namespace")
	r = run(t, h.env.with("TEMPORAL_NAMESPACE", "no-such-namespace"), "deliveries")
	if r.code != ExitError || !strings.Contains(r.stderr, "no-such-namespace") {
		t.Errorf("deliveries in an unknown namespace: exit %d\n%s", r.code, r.stderr)
	}

	// With the worker stopped, deliveries still lists the keys, without
	// heads, after one query timeout; status reports the worker unreachable.
	// The stopped worker's kept socket would still accept connections;
	// status is pointed at a port that refuses them, as a dead worker's does.
	h.Stop()
	h.env["HERALD_WORKER_URL"] = "http://" + testkit.ReservePort(t).Addr()
	start := time.Now()
	out := decode[deliveriesJSON](t, mustRun(t, h.env, "deliveries", "--json").stdout)
	if took := time.Since(start); took > 2*listQueryTimeout+5*time.Second {
		t.Errorf("deliveries without a worker took %v", took)
	}
	if len(out.Keys) != 4 {
		t.Fatalf("deliveries without a worker listed %d keys, want 4", len(out.Keys))
	}
	for _, k := range out.Keys {
		if k.Head != nil || k.StateError == "" {
			t.Errorf("key %s without a worker: head %+v, state error %q", k.WorkflowID, k.Head, k.StateError)
		}
	}
	text = mustRun(t, h.env, "deliveries", "--status", "failed").stdout
	wantContains(t, "deliveries without a worker", text, "k-bad", "(no head for 1 key: the state query failed: no answer in time (is a Herald worker running?))")
	wantContains(t, "status without a worker", mustRun(t, h.env, "status").stdout, "/readyz): unreachable (")
}
