package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"herald/api"
	"herald/internal/testkit/system"
	"herald/publish"
	"herald/store"
)

// person is a valid contacts.person.updated@1 event.
func person(id, subject string, n int) string {
	idField := ""
	if id != "" {
		idField = fmt.Sprintf(`"id":%q,`, id)
	}
	return fmt.Sprintf(`{%s"type":"contacts.person.updated","version":1,"subject":%q,"data":{"id":%q,"name":"Person %d","n":%d}}`,
		idField, subject, subject, n, n)
}

// eventRow reads what the event log holds of an accepted event.
func eventRow(t *testing.T, st *store.Store, id string) (app, via, token string) {
	t.Helper()
	var tok *string
	err := st.Pool.QueryRow(context.Background(), `SELECT source_app, coalesce(published_via, ''), published_token
		FROM events WHERE id = $1 AND state <> 'rejected'`, id).Scan(&app, &via, &tok)
	if err != nil {
		t.Fatalf("event %s: %v", id, err)
	}
	if tok != nil {
		token = *tok
	}
	return app, via, token
}

func TestPublishOneEvent(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	token := s.token("contacts", "crm")
	acc := wantAccepted(t, s.post(token, "application/json", person("", "person-1", 1)), 1)
	if acc[0].Duplicate || acc[0].Index != 0 {
		t.Fatalf("accepted %+v", acc[0])
	}
	if app, via, name := eventRow(t, s.store, acc[0].ID); app != "contacts" || via != publish.ViaHTTP || name != "crm" {
		t.Fatalf("event row: app %q via %q token %q", app, via, name)
	}
	if out := s.starter("events", "show", acc[0].ID); !strings.Contains(out, "published    http (token crm)") {
		t.Fatalf("events show:\n%s", out)
	}
	// The media type may carry parameters.
	wantAccepted(t, s.post(token, "application/json; charset=utf-8", person("", "person-2", 2)), 1)

	// The CLI and the library record how they published, without a token.
	id := uuid.NewString()
	s.starter("publish", "--app", "contacts", "--type", "contacts.person.updated", "--version", "1",
		"--subject", "person-3", "--data", `{"id":"person-3","name":"Three","n":3}`, "--id", id)
	if app, via, name := eventRow(t, s.store, id); app != "contacts" || via != publish.ViaCLI || name != "" {
		t.Fatalf("CLI event row: app %q via %q token %q", app, via, name)
	}
	res, err := publish.New(s.store, publish.Options{}).Publish(context.Background(), publish.Request{
		App: "contacts", Type: "contacts.person.updated", Version: 1, Subject: "person-4",
		Data: []byte(`{"id":"person-4","name":"Four","n":4}`)})
	if err != nil {
		t.Fatal(err)
	}
	if app, via, name := eventRow(t, s.store, res.ID); app != "contacts" || via != publish.ViaLibrary || name != "" {
		t.Fatalf("library event row: app %q via %q token %q", app, via, name)
	}
}

func TestUnauthorized(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	token := s.token("contacts", "crm")
	body := person("", "person-1", 1)

	a := s.post("", "application/json", body)
	wantProblem(t, a, http.StatusUnauthorized, "unauthorized")
	if got := a.header.Get("WWW-Authenticate"); got != `Bearer realm="herald"` {
		t.Fatalf("WWW-Authenticate %q", got)
	}
	// A token of the right form whose secret is wrong, and one of no known
	// form: both refused, the challenge saying the token is invalid.
	forged := token[:len(token)-4] + "AAAA"
	if forged == token {
		forged = token[:len(token)-4] + "BBBB"
	}
	for _, bad := range []string{forged, "not-a-herald-token", "hrld_0000000000000000_" + strings.Repeat("A", 43)} {
		a := s.post(bad, "application/json", body)
		wantProblem(t, a, http.StatusUnauthorized, "unauthorized")
		if got := a.header.Get("WWW-Authenticate"); !strings.Contains(got, `error="invalid_token"`) {
			t.Fatalf("WWW-Authenticate %q", got)
		}
	}
	// Basic credentials are not bearer credentials.
	req, _ := http.NewRequest(http.MethodPost, s.base+"/v1/events", strings.NewReader(body))
	req.SetBasicAuth("contacts", token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("basic auth: status %d", resp.StatusCode)
	}
	var n int
	if err := s.store.Pool.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE source_app <> 'herald'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("events after refused requests: %d (%v)", n, err)
	}
}

func TestOnlyOwnEvents(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	token := s.token("contacts", "crm")
	invoice := `{"type":"billing.invoice.paid","version":1,"subject":"invoice-1",
		"data":{"invoiceId":"invoice-1","personId":"person-1","amount":100,"currency":"EUR"}}`
	p := wantProblem(t, s.post(token, "application/json", invoice), http.StatusForbidden, publish.CodeTypeNotOwned)
	if len(p.Events) != 1 || p.Events[0].Code != publish.CodeTypeNotOwned || p.Events[0].Status != http.StatusForbidden {
		t.Fatalf("events %+v", p.Events)
	}
	// Naming another app in the event does not help.
	asBilling := strings.Replace(invoice, `{"type"`, `{"app":"billing","type"`, 1)
	wantProblem(t, s.post(token, "application/json", asBilling), http.StatusForbidden, publish.CodeTypeNotOwned)
	// The token's own app may be named.
	own := strings.Replace(person("", "person-1", 1), `{"type"`, `{"app":"contacts","type"`, 1)
	wantAccepted(t, s.post(token, "application/json", own), 1)
	// The refusals are recorded with the token, like any rejection.
	var n int
	err := s.store.Pool.QueryRow(context.Background(), `SELECT count(*) FROM events
		WHERE state = 'rejected' AND code = 'type_not_owned' AND published_via = 'http' AND published_token = 'crm'`).Scan(&n)
	if err != nil || n != 2 {
		t.Fatalf("recorded rejections: %d (%v)", n, err)
	}
	// Both are recorded under the token's own app, never under the app an
	// event names: one token must not fill another app's rejections (and
	// push its real ones out of `starter status`).
	var others int
	err = s.store.Pool.QueryRow(context.Background(), `SELECT count(*) FROM events
		WHERE state = 'rejected' AND published_token = 'crm' AND source_app <> 'contacts'`).Scan(&others)
	if err != nil || others != 0 {
		t.Fatalf("rejections of the contacts token recorded under another app: %d (%v)", others, err)
	}
	// A removed app publishes nothing: removing it revoked its tokens, and
	// applying it again does not bring them back.
	s.starter("apps", "remove", "contacts")
	time.Sleep(api.DefaultTokenCacheTTL) // the worker's token cache forgets the token was live
	wantProblem(t, s.post(token, "application/json", person("", "person-2", 2)), http.StatusUnauthorized, api.CodeUnauthorized)
	s.starter("apps", "apply", system.WriteManifests(t, s.SubURL))
	wantProblem(t, s.post(token, "application/json", person("", "person-3", 3)), http.StatusUnauthorized, api.CodeUnauthorized)

	// The worker counts each refusal under the token's app, never under the
	// app an event names.
	metrics := s.metrics()
	for _, want := range []string{
		`herald_publish_rejections_total{app="contacts",code="type_not_owned"} 2`,
	} {
		if !strings.Contains(metrics, "\n"+want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(metrics, `herald_publish_rejections_total{app="billing"`) {
		t.Error("a rejection was counted under the app the event named")
	}
}

// metrics returns the worker's /metrics page.
func (s *server) metrics() string {
	s.t.Helper()
	resp, err := http.Get("http://" + s.Svc.Addr() + "/metrics")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		s.t.Fatalf("GET /metrics: %d (%v)", resp.StatusCode, err)
	}
	return string(body)
}

func TestRejectionCodes(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	token := s.token("contacts", "crm")
	big := fmt.Sprintf(`{"type":"contacts.person.updated","version":1,"subject":"p","data":{"id":"p","name":%q,"n":1}}`,
		strings.Repeat("x", publish.DefaultMaxEventBytes))
	for _, tc := range []struct {
		name, body, code string
		status           int
	}{
		{"not declared", `{"type":"contacts.person.updated","version":7,"subject":"p","data":{}}`, publish.CodeEventNotDeclared, 422},
		{"subject", `{"type":"contacts.person.updated","version":1,"subject":"","data":{"id":"p","name":"P","n":1}}`, publish.CodeSubjectInvalid, 422},
		{"data", `{"type":"contacts.person.updated","version":1,"subject":"p","data":{"name":42}}`, publish.CodeDataInvalid, 422},
		{"unknown field", `{"type":"contacts.person.updated","version":1,"subject":"p","data":{},"colour":"red"}`, publish.CodeDataInvalid, 422},
		{"too large", big, publish.CodePayloadTooLarge, 413},
		{"not JSON", `{"type":`, publish.CodeDataInvalid, 400},
		{"empty array", `[]`, publish.CodeDataInvalid, 400},
		{"scalar", `42`, publish.CodeDataInvalid, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := wantProblem(t, s.post(token, "application/json", tc.body), tc.status, tc.code)
			if p.Detail == "" {
				t.Fatal("problem without detail")
			}
			if tc.code == publish.CodeDataInvalid && tc.name == "data" && len(p.Errors) == 0 {
				t.Fatalf("data_invalid without schema errors: %+v", p)
			}
		})
	}
	wantProblem(t, s.post(token, "text/plain", person("", "p", 1)), http.StatusUnsupportedMediaType, "unsupported_media_type")
	wantProblem(t, s.post(token, "", person("", "p", 1)), http.StatusUnsupportedMediaType, "unsupported_media_type")
	a := s.do(http.MethodGet, "/v1/events", token, "", nil)
	wantProblem(t, a, http.StatusMethodNotAllowed, "method_not_allowed")
	if a.header.Get("Allow") != http.MethodPost {
		t.Fatalf("Allow %q", a.header.Get("Allow"))
	}
	wantProblem(t, s.do(http.MethodPost, "/v1/other", token, "application/json", strings.NewReader("{}")), http.StatusNotFound, "not_found")
}

func TestBatchIsSettledPerEvent(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	token := s.token("contacts", "crm")
	okID, badID := uuid.NewString(), uuid.NewString()
	batch := "[" + strings.Join([]string{
		person(okID, "person-1", 1),
		`{"type":"contacts.person.updated","version":1,"subject":"person-2","id":"` + badID + `","data":{"name":42}}`,
		`{"type":"contacts.person.updated","version":9,"subject":"person-3","data":{}}`,
		`"not an object"`,
		person("", "person-5", 5),
	}, ",") + "]"
	p := wantProblem(t, s.post(token, "application/json", batch), http.StatusUnprocessableEntity, "events_rejected")
	got := map[int]string{}
	for _, e := range p.Events {
		got[e.Index] = e.Code
		if e.Status != http.StatusUnprocessableEntity || e.Detail == "" {
			t.Errorf("event problem %+v", e)
		}
	}
	want := map[int]string{1: publish.CodeDataInvalid, 2: publish.CodeEventNotDeclared, 3: publish.CodeDataInvalid}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("refused %v, want %v", got, want)
	}
	if len(p.Accepted) != 2 || p.Accepted[0].Index != 0 || p.Accepted[0].ID != okID || p.Accepted[1].Index != 4 {
		t.Fatalf("accepted %+v", p.Accepted)
	}
	// Per event: the valid events are in the log, the refused one is not.
	eventRow(t, s.store, okID)
	eventRow(t, s.store, p.Accepted[1].ID)
	if _, err := s.store.GetEvent(context.Background(), badID); err == nil {
		t.Fatal("the refused event was accepted")
	}
	// A batch of one status keeps it: two events of another app, 403.
	other := `[{"type":"billing.invoice.paid","version":1,"subject":"i","data":{}},{"type":"billing.x","version":1,"subject":"i","data":{}}]`
	p = wantProblem(t, s.post(token, "application/json", other), http.StatusForbidden, publish.CodeTypeNotOwned)
	if len(p.Events) != 2 || len(p.Accepted) != 0 {
		t.Fatalf("problem %+v", p)
	}
	// An all-valid batch is 202 with every id, in order.
	acc := wantAccepted(t, s.post(token, "application/json",
		"["+person("", "person-6", 6)+","+person("", "person-7", 7)+","+person("", "person-8", 8)+"]"), 3)
	for i, a := range acc {
		if a.Index != i || (i > 0 && a.Seq <= acc[i-1].Seq) {
			t.Fatalf("accepted %+v", acc)
		}
	}
}

func TestNDJSON(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	token := s.token("contacts", "crm")
	body := person("", "person-1", 1) + "\n\n" + person("", "person-2", 2) + "\r\n" + person("", "person-3", 3)
	acc := wantAccepted(t, s.post(token, "application/x-ndjson", body), 3)
	if acc[2].Index != 2 {
		t.Fatalf("accepted %+v", acc)
	}
	body = person("", "person-4", 4) + "\n{not json\n" + `{"type":"contacts.person.updated","version":1,"subject":"p","data":{"id":""}}` + "\n"
	p := wantProblem(t, s.post(token, "application/x-ndjson", body), http.StatusUnprocessableEntity, publish.CodeDataInvalid)
	if len(p.Events) != 2 || p.Events[0].Line != 2 || p.Events[0].Index != 1 || p.Events[1].Line != 3 {
		t.Fatalf("events %+v", p.Events)
	}
	if len(p.Accepted) != 1 || p.Accepted[0].Index != 0 {
		t.Fatalf("accepted %+v", p.Accepted)
	}
}

func TestIdempotentByEventID(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	token := s.token("contacts", "crm")
	id := uuid.NewString()
	first := wantAccepted(t, s.post(token, "application/json", person(id, "person-1", 1)), 1)[0]
	again := wantAccepted(t, s.post(token, "application/json", person(id, "person-1", 1)), 1)[0]
	if first.Duplicate || !again.Duplicate || again.ID != id || again.Seq != first.Seq {
		t.Fatalf("first %+v, again %+v", first, again)
	}
	// Twice in one batch: the second is the duplicate.
	id2 := uuid.NewString()
	acc := wantAccepted(t, s.post(token, "application/json", "["+person(id2, "person-2", 2)+","+person(id2, "person-2", 2)+"]"), 2)
	if acc[0].Duplicate || !acc[1].Duplicate || acc[0].Seq != acc[1].Seq {
		t.Fatalf("accepted %+v", acc)
	}
	p := wantProblem(t, s.post(token, "application/json", person(id, "person-1", 99)), http.StatusConflict, publish.CodeIDConflict)
	if !strings.Contains(p.Detail, id) {
		t.Fatalf("detail %q", p.Detail)
	}
	var n int
	if err := s.store.Pool.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE state <> 'rejected' AND source_app <> 'herald'`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d events accepted (%v), want 2", n, err)
	}
}
