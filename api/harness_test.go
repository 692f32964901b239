package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"herald/api"
	"herald/cli"
	"herald/internal/testenv"
	"herald/internal/testkit/system"
	"herald/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// server is a running worker with the publishing API on (internal/testkit's
// System), with the fixture manifests applied.
type server struct {
	*system.System
	t     *testing.T
	env   map[string]string
	base  string // http://host:port of the API
	store *store.Store
}

func startServer(t *testing.T, opts ...system.Option) *server {
	t.Helper()
	opts = append([]system.Option{system.API(), system.DBConns(6), system.LogLevel(zapcore.ErrorLevel)}, opts...)
	sys := system.Start(t, opts...)
	s := &server{System: sys, t: t, base: "http://" + sys.Svc.APIAddr(), store: sys.Svc.Store, env: sys.Env()}
	s.starter("apps", "apply", system.WriteManifests(t, sys.SubURL))
	return s
}

// run runs starter and returns its exit code and output.
func (s *server) run(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := cli.Run(context.Background(), args, strings.NewReader(""), &out, &errOut,
		func(k string) string { return s.env[k] })
	return code, out.String(), errOut.String()
}

// starter runs starter and fails the test unless it exits 0.
func (s *server) starter(args ...string) string {
	s.t.Helper()
	code, out, errOut := s.run(args...)
	if code != 0 {
		s.t.Fatalf("starter %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// token creates a token of app named name and returns it.
func (s *server) token(app, name string) string {
	s.t.Helper()
	var created struct {
		Token string `json:"token"`
		Name  string `json:"name"`
	}
	if err := json.Unmarshal([]byte(s.starter("apps", "token", "create", app, "--name", name, "--json")), &created); err != nil {
		s.t.Fatal(err)
	}
	if !strings.HasPrefix(created.Token, "hrld_") || created.Name != name {
		s.t.Fatalf("created token: %+v", created)
	}
	return created.Token
}

// operatorToken creates an operator token named name and returns it.
func (s *server) operatorToken(name string) string {
	s.t.Helper()
	var created struct {
		Token    string `json:"token"`
		Operator bool   `json:"operator"`
	}
	if err := json.Unmarshal([]byte(s.starter("tokens", "create", "--operator", "--name", name, "--json")), &created); err != nil {
		s.t.Fatal(err)
	}
	if !strings.HasPrefix(created.Token, "hrld_") || !created.Operator {
		s.t.Fatalf("created operator token: %+v", created)
	}
	return created.Token
}

// get sends GET path (with its query) with token.
func (s *server) get(path, token string) answer {
	s.t.Helper()
	return s.do(http.MethodGet, path, token, "", nil)
}

// action sends POST path with a JSON body and token.
func (s *server) action(path, token, body string) answer {
	s.t.Helper()
	return s.do(http.MethodPost, path, token, "application/json", strings.NewReader(body))
}

// wantStatus fails t unless a has status.
func wantStatus(t *testing.T, a answer, status int) {
	t.Helper()
	if a.status != status {
		t.Fatalf("status %d, want %d: %s", a.status, status, a.body)
	}
}

// answer is one response of the API, its body read.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// anonymous sends a request without a token and wants 401. Every refused
// authentication spends one of the client address's tries, and a test that
// checks the 401 of each documented path spends more than the burst; so a
// 429 is waited out (its Retry-After) and the request sent again.
func (s *server) anonymous(method, path, contentType, body string) answer {
	s.t.Helper()
	for range api.DefaultAuthFailureBurst {
		a := s.do(method, path, "", contentType, strings.NewReader(body))
		if a.status != http.StatusTooManyRequests {
			wantStatus(s.t, a, http.StatusUnauthorized)
			return a
		}
		wait, err := strconv.Atoi(a.header.Get("Retry-After"))
		if err != nil || wait <= 0 {
			s.t.Fatalf("%s %s: 429 with Retry-After %q", method, path, a.header.Get("Retry-After"))
		}
		time.Sleep(time.Duration(wait) * time.Second)
	}
	s.t.Fatalf("%s %s: still throttled", method, path)
	return answer{}
}

// post sends body to POST /v1/events.
func (s *server) post(token, contentType, body string) answer {
	s.t.Helper()
	return s.do(http.MethodPost, "/v1/events", token, contentType, strings.NewReader(body))
}

func (s *server) do(method, path, token, contentType string, body io.Reader) answer {
	s.t.Helper()
	req, err := http.NewRequest(method, s.base+path, body)
	if err != nil {
		s.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	checkAnswer(s.t, method, path, resp.StatusCode, resp.Header.Get("Content-Type"), b)
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

// problem is the part of a problem+json answer the tests look at.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
	// Parameter names the query parameter of a bad_parameter problem.
	Parameter string `json:"parameter"`
	// Result is a key's answer to an action that changed nothing.
	Result *struct {
		Changed bool   `json:"changed"`
		Reason  string `json:"reason"`
	} `json:"result"`
	Errors   []struct{ Pointer, Message string }
	Events   []eventProblem `json:"events"`
	Accepted []accepted     `json:"accepted"`
}

type eventProblem struct {
	Index  int    `json:"index"`
	Line   int    `json:"line"`
	Code   string `json:"code"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

type accepted struct {
	Index     int    `json:"index"`
	ID        string `json:"id"`
	Seq       int64  `json:"seq"`
	Duplicate bool   `json:"duplicate"`
}

// wantProblem checks a's status and media type and decodes the problem.
func wantProblem(t *testing.T, a answer, status int, code string) problem {
	t.Helper()
	if a.status != status {
		t.Fatalf("status %d, want %d: %s", a.status, status, a.body)
	}
	if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	var p problem
	if err := json.Unmarshal(a.body, &p); err != nil {
		t.Fatalf("problem: %v: %s", err, a.body)
	}
	if p.Status != status || p.Code != code || p.Type != "urn:herald:problem:"+code || p.Title == "" {
		t.Fatalf("problem %+v, want status %d code %s", p, status, code)
	}
	return p
}

// wantAccepted checks a 202 and returns its accepted events.
func wantAccepted(t *testing.T, a answer, n int) []accepted {
	t.Helper()
	if a.status != http.StatusAccepted {
		t.Fatalf("status %d, want 202: %s", a.status, a.body)
	}
	var r struct {
		Accepted []accepted `json:"accepted"`
	}
	if err := json.Unmarshal(a.body, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Accepted) != n {
		t.Fatalf("%d accepted, want %d: %s", len(r.Accepted), n, a.body)
	}
	for i, acc := range r.Accepted {
		if acc.ID == "" || acc.Seq <= 0 {
			t.Fatalf("accepted[%d] = %+v", i, acc)
		}
	}
	return r.Accepted
}
