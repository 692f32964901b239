package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"

	"herald/api"
	"herald/internal/testkit"
	"herald/internal/testkit/system"
)

// specURL is where the compiler files the OpenAPI document.
const specURL = "https://herald.test/openapi.json"

// openAPI is api/openapi.yaml, loaded once, and the answers seen.
var openAPI struct {
	once     sync.Once
	err      error
	doc      map[string]any
	compiler *jsonschema.Compiler

	mu      sync.Mutex
	schemas map[string]*jsonschema.Schema
	seen    map[string]bool // test name, then "POST /v1/events 202"
}

func loadOpenAPI(t *testing.T) {
	t.Helper()
	openAPI.once.Do(func() {
		raw, err := os.ReadFile("openapi.yaml")
		if err != nil {
			openAPI.err = err
			return
		}
		js, err := yaml.YAMLToJSON(raw)
		if err != nil {
			openAPI.err = fmt.Errorf("openapi.yaml: %w", err)
			return
		}
		if err := json.Unmarshal(js, &openAPI.doc); err != nil {
			openAPI.err = err
			return
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
		if err != nil {
			openAPI.err = err
			return
		}
		c := jsonschema.NewCompiler()
		c.DefaultDraft(jsonschema.Draft2020)
		if err := c.AddResource(specURL, doc); err != nil {
			openAPI.err = err
			return
		}
		openAPI.compiler = c
		openAPI.schemas = map[string]*jsonschema.Schema{}
		openAPI.seen = map[string]bool{}
	})
	if openAPI.err != nil {
		t.Fatalf("load openapi.yaml: %v", openAPI.err)
	}
}

// pointerEscape escapes one JSON pointer token.
func pointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// response returns the document's response object (a $ref to
// components.responses followed) and its JSON pointer.
func response(method, path string, status int) (map[string]any, string, error) {
	paths, _ := openAPI.doc["paths"].(map[string]any)
	path = templatePath(paths, path)
	item, ok := paths[path].(map[string]any)
	if !ok {
		// Undocumented paths are answered with the NotFound response.
		if status != http.StatusNotFound {
			return nil, "", fmt.Errorf("%s %s answered %d; undocumented paths must answer 404", method, path, status)
		}
		return ref("#/components/responses/NotFound")
	}
	op, ok := item[strings.ToLower(method)].(map[string]any)
	if !ok {
		if status != http.StatusMethodNotAllowed {
			return nil, "", fmt.Errorf("%s %s answered %d; undocumented methods must answer 405", method, path, status)
		}
		return ref("#/components/responses/MethodNotAllowed")
	}
	resps, _ := op["responses"].(map[string]any)
	resp, ok := resps[strconv.Itoa(status)].(map[string]any)
	if !ok {
		return nil, "", fmt.Errorf("%s %s answered %d, which the document does not list", method, path, status)
	}
	if r, ok := resp["$ref"].(string); ok {
		return ref(r)
	}
	return resp, "#/paths/" + pointerEscape(path) + "/" + strings.ToLower(method) + "/responses/" + strconv.Itoa(status), nil
}

// templatePath is the document's path (a template such as
// /v1/ops/events/{id}) that a request's path, query string and all,
// matches; path without its query when none does.
func templatePath(paths map[string]any, path string) string {
	path, _, _ = strings.Cut(path, "?")
	if _, ok := paths[path]; ok {
		return path
	}
	got := strings.Split(path, "/")
	for tmpl := range paths {
		want := strings.Split(tmpl, "/")
		if len(want) != len(got) {
			continue
		}
		match := true
		for i := range want {
			if want[i] != got[i] && !(strings.HasPrefix(want[i], "{") && got[i] != "") {
				match = false
				break
			}
		}
		if match {
			return tmpl
		}
	}
	return path
}

// ref follows a local $ref to a response object.
func ref(r string) (map[string]any, string, error) {
	parts := strings.Split(strings.TrimPrefix(r, "#/"), "/")
	var cur any = openAPI.doc
	for _, p := range parts {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, "", fmt.Errorf("$ref %s does not resolve", r)
		}
		cur = m[strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~")]
	}
	m, ok := cur.(map[string]any)
	if !ok {
		return nil, "", fmt.Errorf("$ref %s does not resolve", r)
	}
	return m, r, nil
}

// checkAnswer fails t unless the document lists this method, path and
// status (or the 404/405 conventions it states) with this media type, and
// the body validates against the listed schema. Every answer the tests get
// goes through it.
func checkAnswer(t *testing.T, method, path string, status int, contentType string, body []byte) {
	t.Helper()
	loadOpenAPI(t)
	resp, pointer, err := response(method, path, status)
	if err != nil {
		t.Errorf("openapi: %v", err)
		return
	}
	content, _ := resp["content"].(map[string]any)
	media, _, _ := strings.Cut(contentType, ";")
	if _, ok := content[media].(map[string]any); !ok {
		t.Errorf("openapi: %s %s %d answered %q, which %s does not list", method, path, status, contentType, pointer)
		return
	}
	loc := specURL + pointer + "/content/" + pointerEscape(media) + "/schema"
	openAPI.mu.Lock()
	sch, ok := openAPI.schemas[loc]
	if !ok {
		sch, err = openAPI.compiler.Compile(loc)
		if err == nil {
			openAPI.schemas[loc] = sch
		}
	}
	openAPI.seen[fmt.Sprintf("%s %s %s %d", t.Name(), method, templatePath(openAPI.doc["paths"].(map[string]any), path), status)] = true
	openAPI.mu.Unlock()
	if err != nil {
		t.Errorf("openapi: compile %s: %v", loc, err)
		return
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		t.Errorf("openapi: %s %s %d: body is not JSON: %v: %s", method, path, status, err, body)
		return
	}
	if err := sch.Validate(inst); err != nil {
		t.Errorf("openapi: %s %s %d: body does not match %s: %v\n%s", method, path, status, pointer, err, body)
	}
}

// TestOpenAPIMatchesServer answers every status the document lists for
// POST /v1/events (but 500, a failure of Herald, and 503, a lock another
// transaction held for api.LockTimeout: TestOpenTransactionStallsNoOtherApp
// and TestOpsActionLockWaitBounded answer it) from the running server, and
// 404 and 405; each answer is checked against the document by checkAnswer.
func TestOpenAPIMatchesServer(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	loadOpenAPI(t)
	token := s.token("contacts", "crm")
	id := "0193f1d2-6f4e-7c6b-9a10-1b2c3d4e5f60"
	s.post(token, "application/json", person(id, "person-1", 1))                                             // 202
	s.post(token, "application/json", `[`+person("", "person-2", 2)+`]`)                                     // 202
	s.post(token, "application/json", `{`)                                                                   // 400
	s.anonymous(http.MethodPost, "/v1/events", "application/json", person("", "person-1", 1))                // 401
	s.post(token, "application/json", `{"type":"billing.invoice.paid","version":1,"subject":"i","data":{}}`) // 403
	s.post(token, "application/json", person(id, "person-1", 2))                                             // 409
	s.post(token, "application/json", fmt.Sprintf(`{"type":"contacts.person.updated","version":1,"subject":"p","data":%q}`,
		strings.Repeat("x", 300<<10))) // 413
	s.post(token, "text/csv", "a,b")                                                                                                               // 415
	s.post(token, "application/x-ndjson", person("", "person-3", 3)+"\n"+`{"type":"contacts.person.updated","version":1,"subject":"p","data":{}}`) // 422
	s.do(http.MethodDelete, "/v1/events", token, "", nil)                                                                                          // 405
	s.do(http.MethodGet, "/", "", "", nil)                                                                                                         // 404

	// The operations API, with an app's token and an operator's.
	ops := s.operatorToken("ops")
	s.post(ops, "application/json", person("", "person-4", 4)) // 403: an operator token publishes nothing
	opsPaths := []string{"/v1/ops/apps", "/v1/ops/apps/contacts", "/v1/ops/events/" + id, "/v1/ops/deliveries",
		"/v1/ops/keys?status=failed", "/v1/ops/keys?status=exhausted", "/v1/ops/audit?target=contacts"}
	for _, p := range opsPaths {
		wantStatus(t, s.get(p, token), http.StatusOK) // 200
		wantStatus(t, s.get(p, ops), http.StatusOK)
		s.anonymous(http.MethodGet, p, "", "") // 401
	}
	s.get("/v1/ops/apps/billing", token)                                                    // 404: out of scope
	s.get("/v1/ops/events/0193f1d2-0000-7000-8000-000000000000", ops)                       // 404: unknown
	s.get("/v1/ops/audit?target=billing", token)                                            // 404: out of scope
	s.get("/v1/ops/events/"+id+"?app=Not-An-App", ops)                                      // 400
	s.get("/v1/ops/deliveries?status=stuck", ops)                                           // 400
	s.get("/v1/ops/keys?status=idle", ops)                                                  // 400
	s.get("/v1/ops/audit", ops)                                                             // 400
	s.do(http.MethodPost, "/v1/ops/apps", ops, "application/json", strings.NewReader("{}")) // 405
	s.get("/v1/ops/keys/pause", ops)                                                        // 405

	// Actions: a key's pause and resume, a subscription's.
	key := `{"subscription":"` + system.BillingSub + `","subject":"person-1"}`
	testkit.Eventually(t, 30*time.Second, "billing's key of person-1 to pause", func() bool {
		return s.action("/v1/ops/keys/pause", ops, key).status == http.StatusOK // 200 (404 while it starts)
	})
	s.action("/v1/ops/keys/pause", ops, key)                                               // 409
	wantStatus(t, s.action("/v1/ops/keys/resume", ops, key), http.StatusOK)                // 200
	s.action("/v1/ops/keys/pause", token, key)                                             // 404: not contacts' subscription
	s.action("/v1/ops/keys/pause", ops, `{"subscription":"billing","subject":"person-1"}`) // 400
	s.anonymous(http.MethodPost, "/v1/ops/keys/pause", "application/json", key)            // 401
	sub := `{"subscription":"` + system.BillingSub + `","reason":"openapi"}`
	wantStatus(t, s.action("/v1/ops/subscriptions/pause", ops, sub), http.StatusOK) // 200
	s.action("/v1/ops/subscriptions/pause", ops, sub)                               // 409
	wantStatus(t, s.action("/v1/ops/subscriptions/resume", ops, sub), http.StatusOK)
	s.action("/v1/ops/subscriptions/pause", token, sub)                                  // 404
	s.action("/v1/ops/subscriptions/pause", ops, "{")                                    // 400
	s.anonymous(http.MethodPost, "/v1/ops/subscriptions/pause", "application/json", sub) // 401
	since := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	window := `{"subscription":"` + system.BillingSub + `","since":"` + since + `","dryRun":true}`
	wantStatus(t, s.action("/v1/ops/subscriptions/replay", ops, window), http.StatusOK) // 200
	s.action("/v1/ops/subscriptions/replay", ops, `{"subscription":"`+system.BillingSub+`","since":"`+
		time.Now().Add(-2*time.Hour).UTC().Format(time.RFC3339)+`","until":"`+since+`"}`) // 409: no events
	s.action("/v1/ops/subscriptions/replay", ops, `{"subscription":"`+system.BillingSub+`"}`) // 400: no since
	s.action("/v1/ops/subscriptions/replay", token, window)                                   // 404
	s.anonymous(http.MethodPost, "/v1/ops/subscriptions/replay", "application/json", window)  // 401

	for range api.DefaultAuthFailureBurst + 1 {
		s.post("hrld_0000000000000000_"+strings.Repeat("A", 43), "application/json", "{}") // 401, then 429
	}
	badToken := "hrld_0000000000000000_" + strings.Repeat("B", 43)
	for _, p := range append(opsPaths, "/v1/ops/keys/pause", "/v1/ops/subscriptions/pause", "/v1/ops/subscriptions/replay") {
		// 429: the address is throttled (it regains one try a second, so
		// a slow run may see a 401 first).
		for range 3 {
			var a answer
			if strings.HasSuffix(p, "/pause") || strings.HasSuffix(p, "/replay") {
				a = s.action(p, badToken, "{}")
			} else {
				a = s.get(p, badToken)
			}
			if a.status == http.StatusTooManyRequests {
				break
			}
		}
	}

	paths, _ := openAPI.doc["paths"].(map[string]any)
	var missing []string
	openAPI.mu.Lock() // the other tests, in parallel, record their answers too
	defer openAPI.mu.Unlock()
	for path, item := range paths {
		for method, op := range item.(map[string]any) {
			resps, _ := op.(map[string]any)["responses"].(map[string]any)
			for status := range resps {
				key := fmt.Sprintf("%s %s %s", strings.ToUpper(method), path, status)
				if status != "500" && status != "503" && !openAPI.seen[t.Name()+" "+key] {
					missing = append(missing, key)
				}
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("documented but never answered in this test: %v", missing)
	}
}
