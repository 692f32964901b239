package api_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"herald/api"
	"herald/publish"
	"herald/store"
)

func TestTokenRevokeTakesEffect(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	first := s.token("contacts", "crm")
	second := s.token("contacts", "batch-job")
	wantAccepted(t, s.post(first, "application/json", person("", "person-1", 1)), 1)

	// A live name is unique per app; an unknown app gets no token.
	if code, _, errOut := s.run("apps", "token", "create", "contacts", "--name", "crm"); code != 2 || !strings.Contains(errOut, "already has a live token") {
		t.Fatalf("duplicate name: exit %d %s", code, errOut)
	}
	if code, _, errOut := s.run("apps", "token", "create", "nobody"); code != 2 || !strings.Contains(errOut, "unknown") {
		t.Fatalf("unknown app: exit %d %s", code, errOut)
	}

	out := s.starter("apps", "token", "revoke", "contacts", "crm")
	if !strings.Contains(out, "revoked") {
		t.Fatalf("revoke: %s", out)
	}
	s.waitRevoked(first)
	wantProblem(t, s.post(first, "application/json", person("", "person-2", 2)), http.StatusUnauthorized, "unauthorized")
	wantAccepted(t, s.post(second, "application/json", person("", "person-3", 3)), 1)
	if code, _, errOut := s.run("apps", "token", "revoke", "contacts", "crm"); code != 2 || !strings.Contains(errOut, "no live token") {
		t.Fatalf("second revoke by name: exit %d %s", code, errOut)
	}

	var toks []store.APIToken
	if err := json.Unmarshal([]byte(s.starter("apps", "token", "list", "contacts", "--json")), &toks); err != nil {
		t.Fatal(err)
	}
	if len(toks) != 2 || toks[0].Name != "crm" || toks[0].RevokedAt == nil || toks[0].RevokedBy != "tester" ||
		toks[1].Name != "batch-job" || toks[1].RevokedAt != nil || toks[0].CreatedBy != "tester" {
		t.Fatalf("tokens %+v", toks)
	}
	// Revoking by id works too, once.
	s.starter("apps", "token", "revoke", "contacts", toks[1].ID)
	s.waitRevoked(second)
	wantProblem(t, s.post(second, "application/json", person("", "person-4", 4)), http.StatusUnauthorized, "unauthorized")
	if code, _, errOut := s.run("apps", "token", "revoke", "contacts", toks[1].ID); code != 2 || !strings.Contains(errOut, "already revoked") {
		t.Fatalf("second revoke by id: exit %d %s", code, errOut)
	}
	// Text listing, no secret in it.
	list := s.starter("apps", "token", "list")
	if !strings.Contains(list, "batch-job") || strings.Contains(list, first[len(api.TokenPrefix)+17:]) {
		t.Fatalf("list:\n%s", list)
	}

	// Every create and revoke is audited, with the token's id and name.
	var rows []store.AuditRow
	if err := json.Unmarshal([]byte(s.starter("audit", "--target", "contacts", "--json")), &rows); err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, r := range rows {
		if r.Action != store.ActionAPITokenCreated && r.Action != store.ActionAPITokenRevoked {
			continue
		}
		var meta struct{ TokenID, Name string }
		if err := json.Unmarshal(r.Metadata, &meta); err != nil || meta.TokenID == "" || meta.Name == "" || r.Actor != "tester" {
			t.Errorf("audit row %+v", r)
		}
		if strings.Contains(string(r.Metadata), "hrld_") {
			t.Errorf("audit row holds a token: %s", r.Metadata)
		}
		count[r.Action]++
	}
	if count[store.ActionAPITokenCreated] != 2 || count[store.ActionAPITokenRevoked] != 2 {
		t.Fatalf("audit counts %v", count)
	}
	// Only hashes are stored.
	var leaked int
	if err := s.store.Pool.QueryRow(t.Context(), `SELECT count(*) FROM api_tokens WHERE hash = $1 OR hash = $2 OR id = $3`,
		[]byte(first), []byte(second), first).Scan(&leaked); err != nil || leaked != 0 {
		t.Fatalf("stored tokens: %d (%v)", leaked, err)
	}
}

// waitRevoked waits until the API refuses a revoked token: a worker that
// saw it live lately keeps taking it for at most the token cache's TTL.
func (s *server) waitRevoked(token string) {
	s.t.Helper()
	start := time.Now()
	for {
		a := s.post(token, "text/plain", "x") // 415 while the token is taken
		if a.status == http.StatusUnauthorized {
			return
		}
		if time.Since(start) > api.DefaultTokenCacheTTL+2*time.Second {
			s.t.Fatalf("a revoked token still taken after %v: status %d", time.Since(start), a.status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// countingReader produces n bytes of an endless JSON string, counting what
// was read.
type countingReader struct {
	n, read int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	if r.read >= r.n {
		return 0, io.EOF
	}
	k := min(int64(len(p)), r.n-r.read)
	for i := range p[:k] {
		p[i] = 'x'
	}
	atomic.AddInt64(&r.read, k)
	return int(k), nil
}

// TestOversizedBodyRefusedWhileReading sends a body far over the limit over a
// raw connection and gets 413 before it has sent it all: the server stops
// reading at the limit.
func TestOversizedBodyRefusedWhileReading(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	token := s.token("contacts", "crm")
	const total = 256 << 20 // 16 times the limit
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	fmt.Fprintf(conn, "POST /v1/events HTTP/1.1\r\nHost: herald\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n[\"", token, total)
	body := &countingReader{n: total - 2}
	go func() { _, _ = io.Copy(conn, body) }()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	checkAnswer(t, http.MethodPost, "/v1/events", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), publish.CodePayloadTooLarge) {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	_ = conn.Close()
	if sent := atomic.LoadInt64(&body.read); sent >= total/2 {
		t.Fatalf("the client had sent %d of %d bytes before the answer", sent, total)
	}
}

func TestTooManyEvents(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	token := s.token("contacts", "crm")
	var b strings.Builder
	for i := range api.MaxBatchEvents + 1 {
		b.WriteString(person("", fmt.Sprintf("person-%d", i), i))
		b.WriteByte('\n')
	}
	for _, ct := range []string{"application/x-ndjson", "application/json"} {
		body := b.String()
		if ct == "application/json" {
			body = "[" + strings.ReplaceAll(strings.TrimSuffix(body, "\n"), "\n", ",") + "]"
		}
		p := wantProblem(t, s.post(token, ct, body), http.StatusRequestEntityTooLarge, publish.CodePayloadTooLarge)
		if !strings.Contains(p.Detail, "1000") {
			t.Fatalf("detail %q", p.Detail)
		}
	}
	var n int
	if err := s.store.Pool.QueryRow(t.Context(), `SELECT count(*) FROM events WHERE source_app <> 'herald'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d events recorded (%v), want none", n, err)
	}
}
