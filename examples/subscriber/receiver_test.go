package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"herald/manifest"
	"herald/signing"
	"herald/subscriber"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// testEnv is a receiver for contacts, billing and audit-log with a known key.
type testEnv struct {
	t      *testing.T
	clock  *clock
	signer *signing.Signer
	rv     *receiver
	h      http.Handler
	record *bytes.Buffer
	logs   *observer.ObservedLogs
}

func newTestEnv(t *testing.T, rule *failRule) *testEnv {
	t.Helper()
	c := &clock{now: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer := signing.NewSigner(priv)
	signer.Now = c.Now
	core, logs := observer.New(zap.InfoLevel)
	var buf bytes.Buffer
	rv := newReceiver(zap.New(core), c.Now, rule, &buf)
	h, err := rv.routes(subscriber.Config{
		Audiences: audiences("contacts,billing,audit-log"),
		StaticKey: signer.PublicKey(),
		Now:       c.Now,
	}, manifest.DefaultDeliveryPath)
	if err != nil {
		t.Fatal(err)
	}
	return &testEnv{t: t, clock: c, signer: signer, rv: rv, h: h, record: &buf, logs: logs}
}

var seq int

// deliver sends a delivery of subject to app and returns the response.
func (e *testEnv) deliver(app, subject string) *httptest.ResponseRecorder {
	e.t.Helper()
	seq++
	id := fmt.Sprintf("e-%d", seq)
	body := fmt.Appendf(nil, `{"specversion":"1.0","id":%q,"source":"app:contacts","type":"contacts.person.updated",`+
		`"subject":%q,"datacontenttype":"application/json","dataversion":1,"data":{"name":"Ada"}}`, id, subject)
	tok, err := e.signer.SignDelivery(signing.DeliveryClaims{
		Audience: "app:" + app, Subject: app + ":contacts.person.updated@1", EventID: id, Attempt: 1,
		BodySHA256: signing.BodyHash(body),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, manifest.DefaultDeliveryPath, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	return rec
}

func (e *testEnv) control(method, target string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	return rec
}

func TestDeliveryIsLoggedAndRecorded(t *testing.T) {
	e := newTestEnv(t, nil)
	if resp := e.deliver("billing", "person-1"); resp.Code != http.StatusNoContent {
		t.Fatalf("status %d: %s", resp.Code, resp.Body)
	}

	var r record
	if err := json.Unmarshal(e.record.Bytes(), &r); err != nil {
		t.Fatalf("record %q: %v", e.record.String(), err)
	}
	if r.Audience != "app:billing" || r.Subscription != "billing:contacts.person.updated@1" || r.Subject != "person-1" ||
		r.Type != "contacts.person.updated" || r.Attempt != 1 || r.Status != http.StatusNoContent ||
		r.DataVersion != 1 || string(r.Data) != `{"name":"Ada"}` {
		t.Errorf("record %+v", r)
	}
	if n := strings.Count(e.record.String(), "\n"); n != 1 {
		t.Errorf("record has %d lines, want 1", n)
	}

	entries := e.logs.FilterMessage("event").All()
	if len(entries) != 1 {
		t.Fatalf("%d event log lines, want 1", len(entries))
	}
	fields := entries[0].ContextMap()
	for k, want := range map[string]any{"app": "app:billing", "subject": "person-1", "type": "contacts.person.updated",
		"subscription": "billing:contacts.person.updated@1", "id": r.ID, "attempt": int64(1)} {
		if fields[k] != want {
			t.Errorf("log field %s = %v, want %v", k, fields[k], want)
		}
	}
}

func TestRefusedDeliveryIsLogged(t *testing.T) {
	e := newTestEnv(t, nil)
	req := httptest.NewRequest(http.MethodPost, manifest.DefaultDeliveryPath, strings.NewReader("{}"))
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("status %d", rec.Code)
	}
	entries := e.logs.FilterMessage("delivery refused").All()
	if len(entries) != 1 || entries[0].ContextMap()["code"] != subscriber.CodeTokenMissing {
		t.Errorf("refusal log %+v", entries)
	}
	if e.record.Len() != 0 {
		t.Errorf("refused delivery recorded: %s", e.record)
	}
}

func TestFailureRules(t *testing.T) {
	type delivery struct {
		advance time.Duration
		subject string
		want    int
	}
	start := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name       string
		opts       options
		deliveries []delivery
	}{
		{"no rule", options{}, []delivery{{0, "person-1", 204}}},
		{"status for some subjects", options{failStatus: 500, failSubjects: "person-2, person-3"}, []delivery{
			{0, "person-1", 204}, {0, "person-2", 500}, {0, "person-3", 500}, {time.Hour, "person-2", 500},
		}},
		{"subjects default to 500", options{failSubjects: "person-2"}, []delivery{{0, "person-2", 500}}},
		{"all subjects for a while", options{failFor: 30 * time.Second}, []delivery{
			{0, "person-1", 500}, {29 * time.Second, "person-2", 500}, {time.Second, "person-1", 204}, {0, "person-2", 204},
		}},
		{"reject", options{failStatus: 422}, []delivery{{0, "x", 422}}},
		{"gone", options{failStatus: 410}, []delivery{{0, "x", 410}}},
		{"unavailable", options{failStatus: 503}, []delivery{{0, "x", 503}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, startRule(tc.opts, start))
			for i, d := range tc.deliveries {
				e.clock.Advance(d.advance)
				resp := e.deliver("contacts", d.subject)
				if resp.Code != d.want {
					t.Errorf("delivery %d (%s): status %d, want %d: %s", i, d.subject, resp.Code, d.want, resp.Body)
				}
				if d.want == http.StatusServiceUnavailable && resp.Header().Get("Retry-After") != "5" {
					t.Errorf("delivery %d: Retry-After %q, want 5", i, resp.Header().Get("Retry-After"))
				}
			}
		})
	}
}

func TestControlEndpoints(t *testing.T) {
	e := newTestEnv(t, nil)
	steps := []struct {
		name       string
		method     string
		target     string // control request, or "" to deliver
		subject    string
		advance    time.Duration
		wantStatus int
		wantBody   string
	}{
		{name: "healthy", method: "GET", target: "/healthz", wantStatus: 200, wantBody: "ok"},
		{name: "not failing", method: "GET", target: "/control", wantStatus: 200, wantBody: `"failing":false`},
		{name: "delivery ok", subject: "a", wantStatus: 204},
		{name: "fail a and b for 30s", method: "POST", target: "/control/fail?status=503&for=30s&subject=a,b", wantStatus: 200, wantBody: `"status":503`},
		{name: "shows the rule", method: "GET", target: "/control", wantStatus: 200, wantBody: `"subjects":["a","b"]`},
		{name: "a fails", subject: "a", wantStatus: 503},
		{name: "c passes", subject: "c", wantStatus: 204},
		{name: "after 30s a passes", subject: "a", advance: 30 * time.Second, wantStatus: 204},
		{name: "fail everything", method: "POST", target: "/control/fail", wantStatus: 200, wantBody: `"status":500`},
		{name: "c fails", subject: "c", advance: time.Hour, wantStatus: 500},
		{name: "ok", method: "POST", target: "/control/ok", wantStatus: 200, wantBody: `"failing":false`},
		{name: "c passes again", subject: "c", wantStatus: 204},
		{name: "bad status", method: "POST", target: "/control/fail?status=200", wantStatus: 400, wantBody: "400..599"},
		{name: "bad duration", method: "POST", target: "/control/fail?for=soon", wantStatus: 400, wantBody: "soon"},
		{name: "GET fail not allowed", method: "GET", target: "/control/fail", wantStatus: 405},
		{name: "still passing after refused changes", subject: "c", wantStatus: 204},
	}
	for _, st := range steps {
		e.clock.Advance(st.advance)
		var resp *httptest.ResponseRecorder
		if st.target == "" {
			resp = e.deliver("audit-log", st.subject)
		} else {
			resp = e.control(st.method, st.target)
		}
		if resp.Code != st.wantStatus {
			t.Errorf("%s: status %d, want %d: %s", st.name, resp.Code, st.wantStatus, resp.Body)
		}
		if !strings.Contains(resp.Body.String(), st.wantBody) {
			t.Errorf("%s: body %q does not contain %q", st.name, resp.Body, st.wantBody)
		}
	}
}

func TestParseOptions(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		env    map[string]string
		check  func(options) bool
		errHas string
	}{
		{"defaults", nil, nil, func(o options) bool {
			return o.addr == "127.0.0.1:8089" && o.jwksURL == "http://127.0.0.1:8088/.well-known/jwks.json" &&
				slices.Equal(audiences(o.apps), []string{"app:contacts", "app:billing", "app:audit-log"}) &&
				o.path == manifest.DefaultDeliveryPath && o.failStatus == 0
		}, ""},
		{"environment", nil, map[string]string{"SUBSCRIBER_ADDR": "127.0.0.1:9000", "SUBSCRIBER_FAIL_FOR": "30s", "SUBSCRIBER_APPS": "app:x"},
			func(o options) bool {
				return o.addr == "127.0.0.1:9000" && o.failFor == 30*time.Second && slices.Equal(audiences(o.apps), []string{"app:x"})
			}, ""},
		{"flag wins over environment", []string{"-addr", "127.0.0.1:9001", "-fail-status", "422"}, map[string]string{"SUBSCRIBER_ADDR": "127.0.0.1:9000"},
			func(o options) bool { return o.addr == "127.0.0.1:9001" && o.failStatus == 422 }, ""},
		{"bad status", []string{"-fail-status", "200"}, nil, nil, "400..599"},
		{"bad env duration", nil, map[string]string{"SUBSCRIBER_FAIL_FOR": "later"}, nil, "SUBSCRIBER_FAIL_FOR"},
		{"stray argument", []string{"extra"}, nil, nil, "unexpected"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseOptions(tc.args, func(k string) string { return tc.env[k] })
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("error %v, want one mentioning %q", err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(o) {
				t.Errorf("options %+v", o)
			}
		})
	}
}
