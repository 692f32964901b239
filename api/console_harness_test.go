package api_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"herald/config"
	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/publish"
	"herald/subscriber"
	"herald/workflows"
)

// temporalUI is the Temporal UI base URL the console tests configure.
const temporalUI = "http://temporal-ui.test:8233"

// consoleFixture is a running worker whose billing subscriber refused one
// event (a failed delivery and a failed key), with tokens of each side.
type consoleFixture struct {
	*server
	bad     publish.Result // person-bad: failed at billing, delivered to audit-log
	invoice publish.Result // billing's own event, which no one subscribes to
	// failedKey is billing's failed key's workflow id.
	failedKey                   string
	billing, auditLog, operator string
}

func startConsole(t *testing.T) *consoleFixture {
	t.Helper()
	s := startServer(t, system.Config(func(c *config.Worker) { c.TemporalUIURL = temporalUI + "/" }))
	s.Sub.SetReject(func(app, subject string, n int) error {
		if app == "billing" && subject == "person-bad" {
			return subscriber.Reject(errors.New("unknown customer"))
		}
		return nil
	})
	f := &consoleFixture{server: s, billing: s.token("billing", "team"), auditLog: s.token("audit-log", "team"),
		operator: s.operatorToken("oncall"), failedKey: workflows.DeliveryID(system.BillingSub, "person-bad")}
	f.bad = s.Publish("person-bad", 1)
	var err error
	f.invoice, err = s.Publisher.Publish(context.Background(), publish.Request{App: "billing", Type: "billing.invoice.paid",
		Version: 1, Subject: "inv-1", Data: []byte(`{"invoiceId":"inv-1"}`)})
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the failure is in the log and in Temporal's visibility,
	// and audit-log's delivery is done.
	testkit.Eventually(t, 60*time.Second, "billing's failed key listed", func() bool {
		k := decodeOK[struct {
			Keys []struct {
				WorkflowID string `json:"workflowId"`
			} `json:"keys"`
		}](t, s.get("/v1/ops/keys?status=failed", f.operator))
		return len(k.Keys) == 1 && k.Keys[0].WorkflowID == f.failedKey
	})
	testkit.Eventually(t, 60*time.Second, "audit-log's delivery", func() bool {
		return decodeOK[opsDeliveries](t, s.get("/v1/ops/deliveries?status=delivered", f.operator)).Total == 1
	})
	return f
}

// browserish is an HTTP client that keeps cookies and does not follow
// redirects, as a browser would be seen from the server.
type browserish struct {
	t    *testing.T
	base string
	c    *http.Client
}

func (f *consoleFixture) client() *browserish {
	jar, err := cookiejar.New(nil)
	if err != nil {
		f.t.Fatal(err)
	}
	return &browserish{t: f.t, base: f.base, c: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// page is one answer of the console.
type page struct {
	status int
	header http.Header
	body   string
}

func (b *browserish) do(req *http.Request) page {
	b.t.Helper()
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	return page{status: resp.StatusCode, header: resp.Header, body: string(body)}
}

func (b *browserish) get(path string) page {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.base+path, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	return b.do(req)
}

// post submits a form to path, with the headers given as name, value pairs.
func (b *browserish) post(path string, form url.Values, headers ...string) page {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return b.do(req)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the CSRF field of the page's form.
func csrf(t *testing.T, p page) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("no csrf field in the page:\n%s", p.body)
	}
	return m[1]
}

// signIn signs b in with token through the sign-in form.
func (b *browserish) signIn(token string) page {
	b.t.Helper()
	form := b.get("/console/sign-in")
	if form.status != http.StatusOK {
		b.t.Fatalf("sign-in form: %d\n%s", form.status, form.body)
	}
	p := b.post("/console/sign-in", url.Values{"csrf": {csrf(b.t, form)}, "token": {token}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/console/apps" {
		b.t.Fatalf("sign in: %d %v\n%s", p.status, p.header, p.body)
	}
	return p
}

// wantPage fails t unless p has status and holds every string of want.
func wantPage(t *testing.T, what string, p page, status int, want ...string) {
	t.Helper()
	if p.status != status {
		t.Fatalf("%s: status %d, want %d\n%s", what, p.status, status, p.body)
	}
	for _, w := range want {
		if !strings.Contains(p.body, w) {
			t.Errorf("%s: the page lacks %q\n%s", what, w, p.body)
		}
	}
}

// wantNot fails t when p holds any string of unwanted.
func wantNot(t *testing.T, what string, p page, unwanted ...string) {
	t.Helper()
	for _, u := range unwanted {
		if strings.Contains(p.body, u) {
			t.Errorf("%s: the page shows %q\n%s", what, u, p.body)
		}
	}
}

// keyPath is the console's page of a key.
func keyPath(workflowID string) string { return "/console/keys/" + url.PathEscape(workflowID) }
