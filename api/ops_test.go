package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/publish"
	"herald/store"
	"herald/subscriber"
	"herald/workflows"
)

// opsDelivery is the part of a delivery of GET /v1/ops/deliveries the
// tests look at.
type opsDelivery struct {
	Subscription string `json:"subscription"`
	EventID      string `json:"eventId"`
	Subject      string `json:"subject"`
	Status       string `json:"status"`
	Code         string `json:"code"`
	LastError    string `json:"lastError"`
}

type opsDeliveries struct {
	Deliveries    []opsDelivery `json:"deliveries"`
	Total         int           `json:"total"`
	TotalExact    bool          `json:"totalExact"`
	Limit         int           `json:"limit"`
	NextPageToken string        `json:"nextPageToken"`
}

// decodeOK checks a 200 and decodes its body into a T.
func decodeOK[T any](t *testing.T, a answer) T {
	t.Helper()
	wantStatus(t, a, http.StatusOK)
	var v T
	if err := json.Unmarshal(a.body, &v); err != nil {
		t.Fatalf("decode: %v: %s", err, a.body)
	}
	return v
}

// TestOperationsAPIScopes: the subscriber team of billing, with only its
// app token, finds its failed delivery and sees why (the code and the
// subscriber's answer) through the deliveries listing, the event, the keys
// in status failed and the key's audit trail; another subscriber's token
// sees none of it (404 or empty lists), the publisher's token sees its
// event's deliveries to every subscriber, and an operator token sees all.
func TestOperationsAPIScopes(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	s.Sub.SetReject(func(app, subject string, n int) error {
		if app == "billing" && subject == "person-bad" {
			return subscriber.Reject(errors.New("unknown customer"))
		}
		return nil
	})
	billing, auditLog, contacts := s.token("billing", "team"), s.token("audit-log", "team"), s.token("contacts", "team")
	ops := s.operatorToken("oncall")
	bad := s.Publish("person-bad", 1)
	s.Publish("person-ok", 2)
	invoice, err := s.Publisher.Publish(context.Background(), publish.Request{App: "billing", Type: "billing.invoice.paid",
		Version: 1, Subject: "inv-1", Data: json.RawMessage(`{"invoiceId":"inv-1"}`)})
	if err != nil {
		t.Fatal(err)
	}

	// billing finds its failed delivery in the log, and why it failed.
	failed := testkit.EventuallyValue(t, 60*time.Second, "billing's failed delivery", func() (opsDeliveries, bool) {
		d := decodeOK[opsDeliveries](t, s.get("/v1/ops/deliveries?status=failed", billing))
		return d, d.Total == 1
	})
	if d := failed.Deliveries; len(d) != 1 || d[0].Subscription != system.BillingSub || d[0].Subject != "person-bad" ||
		d[0].EventID != bad.ID || d[0].Code != "schema_mismatch" || !strings.Contains(d[0].LastError, "unknown customer") || !failed.TotalExact {
		t.Fatalf("billing's failed deliveries: %+v", failed)
	}
	// Every delivery billing sees is its own; audit-log's are not listed.
	testkit.Eventually(t, 60*time.Second, "audit-log's deliveries", func() bool {
		d := decodeOK[opsDeliveries](t, s.get("/v1/ops/deliveries?status=delivered", ops))
		return d.Total == 3 // person-bad and person-ok to audit-log, person-ok to billing
	})
	all := decodeOK[opsDeliveries](t, s.get("/v1/ops/deliveries", billing))
	if all.Total != 2 || len(all.Deliveries) != 2 {
		t.Fatalf("billing sees %+v, want its 2 deliveries", all)
	}
	for _, d := range all.Deliveries {
		if d.Subscription != system.BillingSub {
			t.Errorf("billing's token lists %+v", d)
		}
	}
	if d := decodeOK[opsDeliveries](t, s.get("/v1/ops/deliveries?status=failed", auditLog)); d.Total != 0 || len(d.Deliveries) != 0 {
		t.Errorf("audit-log's token lists billing's failure: %+v", d)
	}
	if d := decodeOK[opsDeliveries](t, s.get("/v1/ops/deliveries?subscription="+url.QueryEscape(system.BillingSub), auditLog)); d.Total != 0 {
		t.Errorf("audit-log's token lists billing's subscription: %+v", d)
	}
	// The publisher sees every delivery of its events: 2 to billing, 2 to audit-log.
	if d := decodeOK[opsDeliveries](t, s.get("/v1/ops/deliveries?type=contacts.person.updated", contacts)); d.Total != 4 {
		t.Errorf("contacts sees %d deliveries of its events, want 4: %+v", d.Total, d)
	}

	// The event, with its delivery per subscription in scope.
	type event struct {
		ID         string `json:"id"`
		Deliveries []struct {
			Subscription string `json:"subscription"`
			Status       string `json:"status"`
			Attempts     int    `json:"attempts"`
			Code         string `json:"code"`
		} `json:"deliveries"`
	}
	subsOf := func(e event) []string {
		var out []string
		for _, d := range e.Deliveries {
			out = append(out, d.Subscription+"="+d.Status)
		}
		return out
	}
	evPath := "/v1/ops/events/" + bad.ID
	if got := subsOf(decodeOK[event](t, s.get(evPath, billing))); !slices.Equal(got, []string{system.BillingSub + "=failed"}) {
		t.Errorf("billing sees the event's deliveries %v", got)
	}
	if got := subsOf(decodeOK[event](t, s.get(evPath, auditLog))); !slices.Equal(got, []string{system.AuditLogSub + "=delivered"}) {
		t.Errorf("audit-log sees the event's deliveries %v", got)
	}
	want := []string{system.AuditLogSub + "=delivered", system.BillingSub + "=failed"}
	for name, tok := range map[string]string{"contacts": contacts, "operator": ops} {
		if got := subsOf(decodeOK[event](t, s.get(evPath, tok))); !slices.Equal(got, want) {
			t.Errorf("%s sees the event's deliveries %v, want %v", name, got, want)
		}
	}
	// billing's own event, handed to nobody: audit-log may not see it.
	decodeOK[event](t, s.get("/v1/ops/events/"+invoice.ID, billing))
	wantProblem(t, s.get("/v1/ops/events/"+invoice.ID, auditLog), http.StatusNotFound, "not_found")
	wantProblem(t, s.get("/v1/ops/events/not-a-uuid", ops), http.StatusNotFound, "not_found")

	// Apps: an app token sees its own app only.
	type apps struct {
		Apps []struct {
			ID            string `json:"id"`
			Subscriptions []struct {
				ID    string `json:"id"`
				State string `json:"state"`
			} `json:"subscriptions"`
			Subscribers []struct {
				ID string `json:"id"`
			} `json:"subscribers"`
		} `json:"apps"`
	}
	if a := decodeOK[apps](t, s.get("/v1/ops/apps", billing)); len(a.Apps) != 1 || a.Apps[0].ID != "billing" ||
		len(a.Apps[0].Subscriptions) != 1 || a.Apps[0].Subscriptions[0].ID != system.BillingSub || a.Apps[0].Subscriptions[0].State != "active" {
		t.Errorf("billing's apps: %+v", a)
	}
	if a := decodeOK[apps](t, s.get("/v1/ops/apps", ops)); len(a.Apps) < 3 {
		t.Errorf("the operator's apps: %+v", a)
	}
	wantProblem(t, s.get("/v1/ops/apps/contacts", billing), http.StatusNotFound, "not_found")
	wantProblem(t, s.get("/v1/ops/apps/nobody", ops), http.StatusNotFound, "not_found")
	if a := decodeOK[struct {
		Subscribers []struct{ ID string } `json:"subscribers"`
	}](t, s.get("/v1/ops/apps/contacts", ops)); len(a.Subscribers) != 2 {
		t.Errorf("contacts' subscribers: %+v", a)
	}

	// Keys in status failed, with their head.
	type keys struct {
		Keys []struct {
			Subscription string `json:"subscription"`
			Subject      string `json:"subject"`
			Head         *struct {
				EventID   string `json:"eventId"`
				Code      string `json:"code"`
				LastError string `json:"lastError"`
			} `json:"head"`
		} `json:"keys"`
	}
	k := testkit.EventuallyValue(t, 30*time.Second, "billing's failed key", func() (keys, bool) {
		k := decodeOK[keys](t, s.get("/v1/ops/keys?status=failed", billing))
		return k, len(k.Keys) == 1
	})
	if h := k.Keys[0].Head; k.Keys[0].Subject != "person-bad" || h == nil || h.EventID != bad.ID || h.Code != "schema_mismatch" ||
		!strings.Contains(h.LastError, "unknown customer") {
		t.Errorf("billing's failed key: %+v (head %+v)", k.Keys[0], h)
	}
	if k := decodeOK[keys](t, s.get("/v1/ops/keys?status=failed", auditLog)); len(k.Keys) != 0 {
		t.Errorf("audit-log sees failed keys %+v", k)
	}

	// The key's audit trail.
	target := "deliver:" + system.BillingSub + ":person-bad"
	type audit struct {
		Rows []struct {
			Action string `json:"action"`
		} `json:"rows"`
	}
	rows := decodeOK[audit](t, s.get("/v1/ops/audit?target="+url.QueryEscape(target), billing))
	if !slices.ContainsFunc(rows.Rows, func(r struct {
		Action string `json:"action"`
	}) bool {
		return r.Action == "delivery.failed"
	}) {
		t.Errorf("billing's key's audit trail: %+v", rows)
	}
	wantProblem(t, s.get("/v1/ops/audit?target="+url.QueryEscape(target), auditLog), http.StatusNotFound, "not_found")
	wantProblem(t, s.get("/v1/ops/audit?target="+url.QueryEscape(system.BillingSub), auditLog), http.StatusNotFound, "not_found")
}

// TestOperationsAPIBadInput: bad filters answer 400 naming the parameter,
// oversized pages are clamped, pages follow each other to the total, and an
// operator token may not publish.
func TestOperationsAPIBadInput(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ops := s.operatorToken("oncall")
	for i := range 5 {
		s.Publish("person-"+string(rune('a'+i)), i)
	}
	testkit.Eventually(t, 60*time.Second, "10 delivered", func() bool {
		return decodeOK[opsDeliveries](t, s.get("/v1/ops/deliveries?status=delivered", ops)).Total == 10
	})
	for _, c := range []struct{ query, param string }{
		{"status=stuck", "status"},
		{"status=delivered,nope", "status"},
		{"limit=abc", "limit"},
		{"limit=0", "limit"},
		{"since=yesterday", "since"},
		{"since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z", "until"},
		{"app=Not_An_App", "app"},
		{"subscription=billing", "subscription"},
		{"type=contacts", "type"},
		{"page_token=garbage", "page_token"},
	} {
		p := wantProblem(t, s.get("/v1/ops/deliveries?"+c.query, ops), http.StatusBadRequest, "bad_parameter")
		if p.Parameter != c.param || !strings.HasPrefix(p.Detail, c.param+":") {
			t.Errorf("%s: parameter %q, detail %q; want %q", c.query, p.Parameter, p.Detail, c.param)
		}
	}
	if d := decodeOK[opsDeliveries](t, s.get("/v1/ops/deliveries?limit=1000000", ops)); d.Limit != store.MaxDeliveryLimit || d.Total != 10 {
		t.Errorf("an oversized limit: limit %d total %d, want %d and 10", d.Limit, d.Total, store.MaxDeliveryLimit)
	}
	if d := decodeOK[opsDeliveries](t, s.get("/v1/ops/deliveries?limit=99999999999999999999999", ops)); d.Limit != store.MaxDeliveryLimit {
		t.Errorf("a huge limit: limit %d", d.Limit)
	}
	// Pages of 3 follow each other: 10 distinct deliveries, newest first.
	var seen []string
	query := "/v1/ops/deliveries?status=delivered&limit=3"
	first := decodeOK[opsDeliveries](t, s.get(query, ops))
	for page := first; ; {
		if page.Total != 10 {
			t.Fatalf("a page's total %d, want 10", page.Total)
		}
		for _, d := range page.Deliveries {
			seen = append(seen, d.Subscription+"|"+d.EventID)
		}
		if page.NextPageToken == "" {
			break
		}
		page = decodeOK[opsDeliveries](t, s.get(query+"&page_token="+page.NextPageToken, ops))
	}
	sorted := slices.Clone(seen)
	slices.Sort(sorted)
	if len(seen) != 10 || len(slices.Compact(sorted)) != 10 {
		t.Errorf("pages listed %d deliveries (%v), want 10 distinct", len(seen), seen)
	}
	// A page token of other filters is refused, not misread.
	wantProblem(t, s.get("/v1/ops/deliveries?status=failed&page_token="+first.NextPageToken, ops), http.StatusBadRequest, "bad_parameter")
	wantProblem(t, s.get("/v1/ops/keys?status=failed&page_token=%25%25", ops), http.StatusBadRequest, "bad_parameter")
	wantProblem(t, s.get("/v1/ops/audit?target=billing*", ops), http.StatusBadRequest, "bad_parameter")
	wantProblem(t, s.post(ops, "application/json", person("", "person-z", 9)), http.StatusForbidden, "forbidden")
}

// opResult is the part of a key's answer the tests look at.
type opResult struct {
	Changed bool   `json:"changed"`
	Reason  string `json:"reason"`
	Status  string `json:"status"`
}

// TestOperationsAPIActions: billing's team, with its app token, redelivers
// its failed key, pauses and resumes it and its subscription, each answered
// like the Workflow Update (409 nothing_to_do with the key's answer for a
// no-op) and audited with the token's name as actor; other apps' tokens,
// the publisher's included, may not act on billing's keys (404); malformed
// requests answer 400.
func TestOperationsAPIActions(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	s.Sub.SetReject(func(app, subject string, n int) error {
		if app == "billing" && subject == "person-bad" {
			return subscriber.Reject(errors.New("unknown customer"))
		}
		return nil
	})
	billing, auditLog, contacts := s.token("billing", "team-billing"), s.token("audit-log", "team"), s.token("contacts", "team")
	ops := s.operatorToken("oncall")
	bad := s.Publish("person-bad", 1)
	testkit.Eventually(t, 60*time.Second, "billing's key to fail", func() bool {
		return decodeOK[opsDeliveries](t, s.get("/v1/ops/deliveries?status=failed", billing)).Total == 1
	})
	key := `{"subscription":"` + system.BillingSub + `","subject":"person-bad","reason":"fixed the customer"}`
	for name, tok := range map[string]string{"audit-log": auditLog, "contacts (the publisher)": contacts} {
		if a := s.action("/v1/ops/keys/redeliver", tok, key); a.status != http.StatusNotFound {
			t.Errorf("%s redelivers billing's key: %d %s", name, a.status, a.body)
		}
	}

	s.Sub.SetReject(nil)
	res := decodeOK[opResult](t, s.action("/v1/ops/keys/redeliver", billing, key))
	if !res.Changed {
		t.Errorf("redeliver: %+v", res)
	}
	testkit.Eventually(t, 30*time.Second, "person-bad to arrive at billing", func() bool { return s.Sub.Count("billing", "person-bad") == 1 })
	target := "deliver:" + system.BillingSub + ":person-bad"
	testkit.Eventually(t, 30*time.Second, "the redelivery's audit row", func() bool {
		rows, err := s.store.ListAudit(context.Background(), store.AuditFilter{TargetID: target, Action: "delivery.redelivered"})
		return err == nil && len(rows) == 1 && rows[0].Actor == "team-billing"
	})
	// The subscriber counts the POST when it arrives; the outcome row says
	// delivered once the worker has its answer, a moment later.
	testkit.Eventually(t, 30*time.Second, "person-bad's row to say delivered", func() bool {
		d := decodeOK[opsDeliveries](t, s.get("/v1/ops/deliveries?subject=person-bad&status=delivered", billing))
		return d.Total == 1 && d.Deliveries[0].EventID == bad.ID
	})
	// Nothing to redeliver now: 409 with the key's answer.
	p := wantProblem(t, s.action("/v1/ops/keys/redeliver", billing, key), http.StatusConflict, "nothing_to_do")
	if p.Result == nil || p.Result.Changed || p.Result.Reason == "" {
		t.Errorf("a redelivery with nothing to do: %+v (result %+v)", p, p.Result)
	}

	wantOK := func(a answer) { t.Helper(); decodeOK[json.RawMessage](t, a) }
	wantOK(s.action("/v1/ops/keys/pause", billing, key))
	if p := wantProblem(t, s.action("/v1/ops/keys/pause", billing, key), http.StatusConflict, "nothing_to_do"); p.Result == nil || p.Result.Reason != "already_paused" {
		t.Errorf("pause twice: %+v", p.Result)
	}
	wantOK(s.action("/v1/ops/keys/resume", ops, key)) // an operator may act on any key
	wantProblem(t, s.action("/v1/ops/keys/resume", billing, key), http.StatusConflict, "nothing_to_do")

	// A paused key whose workflow was terminated with nothing queued: its
	// pause is kept in PostgreSQL, and the resume starts a run to take it.
	wantOK(s.action("/v1/ops/keys/pause", billing, key))
	id := workflows.DeliveryID(system.BillingSub, "person-bad")
	system.Terminate(t, s.Dial(), id)
	if r := decodeOK[opResult](t, s.action("/v1/ops/keys/resume", billing, key)); !r.Changed {
		t.Errorf("resume of a paused key without a run: %+v", r)
	}
	if paused, err := s.store.KeyPaused(context.Background(), system.BillingSub, "person-bad"); err != nil || paused {
		t.Errorf("the key's pause row after the resume: %v, %v", paused, err)
	}
	// A key of the log whose run has ended: the pause starts a run to
	// take it, which holds the key paused.
	system.Terminate(t, s.Dial(), id)
	if r := decodeOK[opResult](t, s.action("/v1/ops/keys/pause", billing, key)); !r.Changed || r.Status != workflows.StatusPaused {
		t.Errorf("pause of a key without a run: %+v", r)
	}
	if paused, err := s.store.KeyPaused(context.Background(), system.BillingSub, "person-bad"); err != nil || !paused {
		t.Errorf("the key's pause row after a pause without a run: %v, %v", paused, err)
	}
	wantOK(s.action("/v1/ops/keys/resume", billing, key))

	// Malformed requests.
	for _, c := range []struct{ path, body, code string }{
		{"/v1/ops/keys/redeliver", `{"subscription":"` + system.BillingSub + `","subject":"person-bad","eventId":"` + bad.ID + `"}`, "bad_parameter"},
		{"/v1/ops/keys/cancel", `{"subscription":"` + system.BillingSub + `","subject":"person-bad","eventId":"` + bad.ID + `","all":true}`, "bad_parameter"},
		{"/v1/ops/keys/pause", `{"subscription":"` + system.BillingSub + `"}`, "bad_parameter"},
		{"/v1/ops/keys/pause", `{"subscription":"` + system.BillingSub + `","subject":"person-bad","reason":"` + strings.Repeat("r", 1001) + `"}`, "bad_request"},
		{"/v1/ops/keys/pause", `{"subscription":"` + system.BillingSub + `","subject":"person-bad","extra":1}`, "bad_request"},
		{"/v1/ops/subscriptions/pause", `not json`, "bad_request"},
	} {
		wantProblem(t, s.action(c.path, billing, c.body), http.StatusBadRequest, c.code)
	}
	wantProblem(t, s.action("/v1/ops/keys/pause", billing, `{"subscription":"`+system.BillingSub+`","subject":"nobody"}`), http.StatusNotFound, "not_found")
	wantProblem(t, s.action("/v1/ops/keys/stop", billing, key), http.StatusNotFound, "not_found")

	// The subscription.
	sub := `{"subscription":"` + system.BillingSub + `","reason":"maintenance"}`
	wantProblem(t, s.action("/v1/ops/subscriptions/pause", auditLog, sub), http.StatusNotFound, "not_found")
	if paused := decodeOK[struct{ State string }](t, s.action("/v1/ops/subscriptions/pause", billing, sub)); paused.State != "paused" {
		t.Errorf("subscription after pause: %+v", paused)
	}
	wantProblem(t, s.action("/v1/ops/subscriptions/pause", billing, sub), http.StatusConflict, "nothing_to_do")
	if resumed := decodeOK[struct{ State string }](t, s.action("/v1/ops/subscriptions/resume", billing, sub)); resumed.State != "active" {
		t.Errorf("subscription after resume: %+v", resumed)
	}
	wantProblem(t, s.action("/v1/ops/subscriptions/resume", billing, sub), http.StatusConflict, "nothing_to_do")
	rows, err := s.store.ListAudit(context.Background(), store.AuditFilter{TargetID: system.BillingSub, Action: store.ActionSubscriptionStateChanged})
	if err != nil || len(rows) < 2 || rows[0].Actor != "team-billing" || rows[1].Actor != "team-billing" {
		t.Errorf("the subscription's audit rows: %+v, %v", rows, err)
	}

	// A replay window: the dry run lists the key, the replay delivers its
	// event again.
	type replay struct {
		Events, Queued int
		Keys           []struct{ Subject, Result string }
	}
	window := func(dry bool) string {
		return `{"subscription":"` + system.BillingSub + `","subject":"person-bad","since":"` +
			time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano) + `","dryRun":` + strconv.FormatBool(dry) + `,"reason":"replay"}`
	}
	if r := decodeOK[replay](t, s.action("/v1/ops/subscriptions/replay", billing, window(true))); r.Events != 1 || r.Queued != 0 ||
		len(r.Keys) != 1 || r.Keys[0].Subject != "person-bad" || r.Keys[0].Result != "dry-run" {
		t.Errorf("replay dry run: %+v", r)
	}
	if s.Sub.Count("billing", "person-bad") != 1 {
		t.Errorf("the dry run delivered")
	}
	wantProblem(t, s.action("/v1/ops/subscriptions/replay", auditLog, window(false)), http.StatusNotFound, "not_found")
	redelivered := func() []store.AuditRow {
		rows, err := s.store.ListAudit(context.Background(), store.AuditFilter{TargetID: target, Action: "delivery.redelivered"})
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	before := len(redelivered()) // the redelivery, and the one with nothing to do
	if r := decodeOK[replay](t, s.action("/v1/ops/subscriptions/replay", billing, window(false))); r.Events != 1 || r.Queued != 1 ||
		r.Keys[0].Result != "queued" {
		t.Errorf("replay: %+v", r)
	}
	testkit.Eventually(t, 30*time.Second, "person-bad to arrive at billing again", func() bool { return s.Sub.Count("billing", "person-bad") == 2 })
	testkit.Eventually(t, 30*time.Second, "the replay's audit row", func() bool {
		rows := redelivered()
		return len(rows) == before+1 && rows[0].Actor == "team-billing" && strings.Contains(string(rows[0].Metadata), `"replay"`)
	})
}
