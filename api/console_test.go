package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/store"
	"herald/workflows"
)

// TestConsoleSignIn: the console asks for a token through a form with a
// CSRF field, refuses a form without it and an unknown token, and starts
// a session in an HttpOnly, SameSite=Strict cookie that is not the token
// (Secure when the browser came over https); signing out needs the
// session's CSRF field and clears the cookie; a revoked token's session
// ends. Every page carries a Content-Security-Policy without script.
func TestConsoleSignIn(t *testing.T) {
	t.Parallel()
	f := startConsole(t)
	b := f.client()

	p := b.get("/console/apps")
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/console/sign-in" {
		t.Fatalf("signed out: %d %v", p.status, p.header)
	}
	form := b.get("/console/sign-in")
	wantPage(t, "sign-in", form, http.StatusOK, `<html lang="en">`, `<label for="token">`, `id="token"`, `name="viewport"`)
	csp := form.header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script-src") || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	field := csrf(t, form)

	// Another site's form has no CSRF field, or a wrong one, or its Origin.
	wantPage(t, "no csrf", b.post("/console/sign-in", url.Values{"token": {f.billing}}), http.StatusForbidden, "expired or came from another page")
	wantPage(t, "wrong csrf", b.post("/console/sign-in", url.Values{"csrf": {field + "x"}, "token": {f.billing}}), http.StatusForbidden)
	wantPage(t, "other origin", b.post("/console/sign-in", url.Values{"csrf": {csrf(t, b.get("/console/sign-in"))}, "token": {f.billing}},
		"Origin", "https://evil.example"), http.StatusForbidden)
	wantPage(t, "unknown token", b.post("/console/sign-in", url.Values{"csrf": {csrf(t, b.get("/console/sign-in"))},
		"token": {"hrld_0123456789abcdef_" + strings.Repeat("A", 43)}}), http.StatusUnauthorized, "unknown or revoked")

	signedIn := b.signIn(f.billing)
	var session *http.Cookie
	for _, c := range (&http.Response{Header: signedIn.header}).Cookies() {
		if c.Name == "herald_console" {
			session = c
		}
	}
	if session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Secure ||
		session.Path != "/console" || session.MaxAge <= 0 {
		t.Fatalf("session cookie %+v", session)
	}
	// hrld_<id>_<secret>: the secret's base64url alphabet has '_' too.
	if secret := strings.SplitN(f.billing, "_", 3)[2]; len(secret) < 40 || strings.Contains(session.Value, secret) {
		t.Fatalf("the session cookie holds the token")
	}
	wantPage(t, "apps", b.get("/console/apps"), http.StatusOK, `token &#34;team&#34; of app billing`, system.BillingSub)

	// Behind a TLS proxy the cookie is Secure.
	tls := f.client()
	tlsForm := tls.get("/console/sign-in")
	tlsIn := tls.post("/console/sign-in", url.Values{"csrf": {csrf(t, tlsForm)}, "token": {f.billing}}, "X-Forwarded-Proto", "https")
	if c := (&http.Response{Header: tlsIn.header}).Cookies(); tlsIn.status != http.StatusSeeOther || len(c) == 0 || !c[0].Secure {
		t.Errorf("over TLS: %d, cookies %+v", tlsIn.status, c)
	}

	// Sign-out: a form without the session's CSRF field is refused.
	apps := b.get("/console/apps")
	wantPage(t, "foreign sign-out", b.post("/console/sign-out", url.Values{"csrf": {"x"}}), http.StatusForbidden)
	out := b.post("/console/sign-out", url.Values{"csrf": {csrf(t, apps)}})
	if out.status != http.StatusSeeOther || !strings.Contains(out.header.Get("Set-Cookie"), "herald_console=;") {
		t.Fatalf("sign out: %d %v", out.status, out.header)
	}
	if p := b.get("/console/apps"); p.status != http.StatusSeeOther {
		t.Fatalf("after sign-out: %d", p.status)
	}

	// A revoked token's session ends (within the token cache's TTL).
	b.signIn(f.billing)
	f.starter("apps", "token", "revoke", "billing", "team")
	testkit.Eventually(t, 15*time.Second, "the revoked token's session ends", func() bool {
		return b.get("/console/apps").status == http.StatusSeeOther
	})

	if p := b.get("/console/style.css"); p.status != http.StatusOK || !strings.HasPrefix(p.header.Get("Content-Type"), "text/css") {
		t.Errorf("style.css: %d %v", p.status, p.header)
	}
}

// TestConsoleScopes: an app token sees its side only (the same 404 page
// for another app's key, event, app or audit trail as for an unknown one),
// the publisher its event's deliveries to every subscriber, an operator
// token everything; the failed key links its workflow in the Temporal UI
// and shows its audit trail with the readable labels.
func TestConsoleScopes(t *testing.T) {
	t.Parallel()
	f := startConsole(t)
	billing, auditLog, ops := f.client(), f.client(), f.client()
	billing.signIn(f.billing)
	auditLog.signIn(f.auditLog)
	ops.signIn(f.operator)

	uiLink := temporalUI + "/namespaces/" + f.Cfg.TemporalNamespace + "/workflows/" + url.PathEscape(f.failedKey) + "/"
	keys := billing.get("/console/keys")
	wantPage(t, "billing's failed keys", keys, http.StatusOK, "person-bad", "schema_mismatch", "unknown customer",
		`href="`+uiLink)
	key := billing.get(keyPath(f.failedKey))
	wantPage(t, "billing's failed key", key, http.StatusOK, "<h1>Key person-bad of "+system.BillingSub+"</h1>", "failed",
		"schema_mismatch", "unknown customer", f.bad.ID, "Open the workflow in the Temporal UI", uiLink,
		store.AuditLabel("delivery.failed"))
	ev := billing.get("/console/events/" + f.bad.ID)
	wantPage(t, "billing's view of the event", ev, http.StatusOK, system.BillingSub, "schema_mismatch", "unknown customer")
	wantNot(t, "billing's view of the event", ev, system.AuditLogSub)
	wantPage(t, "billing's app", billing.get("/console/apps/billing"), http.StatusOK, system.BillingSub)
	wantPage(t, "billing's deliveries", billing.get("/console/deliveries?status=failed"), http.StatusOK, "Matching deliveries: 1,", "person-bad")
	wantPage(t, "billing's audit", billing.get("/console/audit?target="+url.QueryEscape(f.failedKey)), http.StatusOK,
		store.AuditLabel("delivery.failed"))

	// audit-log sees none of billing's side: the 404 of an unknown id.
	for _, path := range []string{keyPath(f.failedKey), "/console/events/" + f.invoice.ID, "/console/apps/billing",
		"/console/audit?target=" + url.QueryEscape(system.BillingSub), "/console/events/00000000-0000-4000-8000-000000000000"} {
		p := auditLog.get(path)
		wantPage(t, "audit-log: "+path, p, http.StatusNotFound, "unknown, or not visible to this token")
		wantNot(t, "audit-log: "+path, p, "unknown customer", "schema_mismatch")
	}
	wantPage(t, "audit-log's deliveries of billing", auditLog.get("/console/deliveries?subscription="+url.QueryEscape(system.BillingSub)),
		http.StatusOK, "Matching deliveries: 0,")
	wantNot(t, "audit-log's failed keys", auditLog.get("/console/keys?status=failed"), "person-bad")
	alEv := auditLog.get("/console/events/" + f.bad.ID)
	wantPage(t, "audit-log's view of the event", alEv, http.StatusOK, system.AuditLogSub, "delivered")
	wantNot(t, "audit-log's view of the event", alEv, system.BillingSub, "unknown customer")

	// A subject key with a "/" keeps it in its key's page.
	f.Publish("org/42", 2)
	slashKey := keyPath(workflows.DeliveryID(system.BillingSub, "org/42"))
	if !strings.Contains(slashKey, "org%2F42") {
		t.Fatalf("key path %s", slashKey)
	}
	testkit.Eventually(t, 60*time.Second, "org/42's delivery on its key's page", func() bool {
		p := billing.get(slashKey)
		return p.status == http.StatusOK && strings.Contains(p.body, "<h1>Key org/42 of "+system.BillingSub+"</h1>") &&
			strings.Contains(p.body, "state-delivered")
	})

	// A subject key with quotes: its running workflow is found (a describe,
	// not a visibility query whose syntax the quotes would break) and
	// linked.
	quoted := `o'brien "jr"`
	quotedID := workflows.DeliveryID(system.BillingSub, quoted)
	f.Publish(quoted, 3)
	testkit.Eventually(t, 60*time.Second, "the quoted key's running workflow on its page", func() bool {
		p := billing.get(keyPath(quotedID))
		return p.status == http.StatusOK && strings.Contains(p.body, "state-delivered") &&
			strings.Contains(p.body, "Open the workflow in the Temporal UI") &&
			strings.Contains(p.body, url.PathEscape(quotedID))
	})

	// The operator sees both deliveries of the event, and every app.
	wantPage(t, "operator's event", ops.get("/console/events/"+f.bad.ID), http.StatusOK, system.BillingSub, system.AuditLogSub, "unknown customer")
	wantPage(t, "operator's apps", ops.get("/console/apps"), http.StatusOK, "contacts", "billing", "audit-log", "operator token &#34;oncall&#34;")
}

// TestConsoleBadInput: a bad filter is a 400 page naming the parameter, an
// unknown id or page a 404 page, a POST to a page 405; none of them leaks
// into another page's markup (the page escapes what it repeats).
func TestConsoleBadInput(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	f := &consoleFixture{server: s, operator: s.operatorToken("oncall")}
	b := f.client()
	b.signIn(f.operator)
	for q, param := range map[string]string{
		"status=bogus": "status", "since=yesterday": "since", "limit=0": "limit", "subscription=nope": "subscription",
		"type=x": "type", "page_token=%25": "page_token", "since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z": "until",
	} {
		wantPage(t, q, b.get("/console/deliveries?"+q), http.StatusBadRequest, "The parameter &#34;"+param+"&#34; is wrong")
	}
	wantPage(t, "keys status", b.get("/console/keys?status=idle"), http.StatusBadRequest, "&#34;status&#34;")
	wantPage(t, "audit without target", b.get("/console/audit"), http.StatusBadRequest, "&#34;target&#34;")
	for _, path := range []string{"/console/events/not-an-id", "/console/apps/nope", keyPath("deliver:nope"),
		keyPath("deliver:billing:contacts.person.updated@1"), "/console/nothing", "/console/apps/a/b"} {
		wantPage(t, path, b.get(path), http.StatusNotFound, "<h1>Not found</h1>")
	}
	wantPage(t, "script in a filter", b.get("/console/deliveries?subject="+url.QueryEscape(`<script>x</script>`)), http.StatusOK, "&lt;script&gt;")
	p := b.post("/console/apps", url.Values{})
	if p.status != http.StatusMethodNotAllowed || p.header.Get("Allow") != http.MethodGet {
		t.Errorf("POST a page: %d %v", p.status, p.header)
	}
}

// TestConsoleSessionIsNotAToken: what the console caches of a signed-in
// session's token can never be presented as a token. A session's token
// was cached under the hash of "console session\x00" and the token's id,
// in the cache of presented tokens, and the sign-in form takes any text:
// another app that learnt the id (an audit row's actor names a token) and
// presented that text while the session was cached was signed in as it.
func TestConsoleSessionIsNotAToken(t *testing.T) {
	t.Parallel()
	f := startConsole(t)
	victim := f.client()
	victim.signIn(f.billing)
	wantPage(t, "the victim's apps", victim.get("/console/apps"), http.StatusOK, system.BillingSub) // its session cached
	id := strings.SplitN(f.billing, "_", 3)[1]
	for _, presented := range []string{"console session\x00" + id, id} {
		b := f.client()
		p := b.post("/console/sign-in", url.Values{"csrf": {csrf(t, b.get("/console/sign-in"))}, "token": {presented}})
		for _, c := range (&http.Response{Header: p.header}).Cookies() {
			if c.Name == "herald_console" && c.Value != "" {
				t.Fatalf("signing in with %q started a session (%d): the cached session's token was taken", presented, p.status)
			}
		}
		wantPage(t, fmt.Sprintf("sign-in with %q", presented), p, http.StatusUnauthorized, "unknown or revoked")
		// Nor does the bearer header (which cannot carry a NUL).
		if !strings.ContainsRune(presented, 0) {
			if a := f.get("/v1/ops/apps", presented); a.status != http.StatusUnauthorized {
				t.Fatalf("%q as a bearer token: %d, want 401", presented, a.status)
			}
		}
	}
}

// TestConsoleKeyPageIsOneKeys: a key's page shows that key's audit rows
// only, even when its subject key ends in "*", which the audit trail's
// filter otherwise takes as a prefix: the page of "person-*" is not the
// failed key person-bad's.
func TestConsoleKeyPageIsOneKeys(t *testing.T) {
	t.Parallel()
	f := startConsole(t)
	b := f.client()
	b.signIn(f.operator)
	failed := b.get(keyPath(f.failedKey))
	wantPage(t, "the failed key", failed, http.StatusOK, "person-bad", f.bad.ID)
	star := strings.TrimSuffix(f.failedKey, "bad") + "*"
	p := b.get(keyPath(star))
	wantNot(t, "the key person-*", p, "person-bad", f.bad.ID)

	// A Retention workflow started under the key's workflow id writes rows
	// of its own type under that id: an app's key page leaves them out.
	if err := f.store.Audit(context.Background(), store.AuditEntry{Action: store.ActionRetentionPurged, Actor: store.ActorSystem,
		TargetType: store.TargetRetention, TargetID: f.failedKey, Metadata: map[string]any{"note": "a retention row"}}); err != nil {
		t.Fatal(err)
	}
	wantPage(t, "the failed key, to an operator", b.get(keyPath(f.failedKey)), http.StatusOK, "a retention row")
	app := f.client()
	app.signIn(f.billing)
	wantPage(t, "the failed key, to billing", app.get(keyPath(f.failedKey)), http.StatusOK, "person-bad")
	wantNot(t, "the failed key, to billing", app.get(keyPath(f.failedKey)), "a retention row")
}
