package publish_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"herald/internal/testkit"
	"herald/manifest"
	"herald/publish"
	"herald/store"
)

func TestPublishRejections(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var counted []string // "app code" told to Options.Rejected (metrics)
	p := e.publisher(publish.Options{Rejected: func(app, code string) { counted = append(counted, app+" "+code) }})
	with := func(f func(r *publish.Request)) publish.Request {
		r := person("person-1", "Ada")
		f(&r)
		return r
	}
	tests := []struct {
		name        string
		req         publish.Request
		wantCode    string
		wantMessage string
	}{
		{"app missing", with(func(r *publish.Request) { r.App = "" }), publish.CodeUnknownApp, "app is missing"},
		{"app unknown", with(func(r *publish.Request) { r.App = "nobody"; r.Type = "nobody.x" }), publish.CodeUnknownApp, `app "nobody" is unknown`},
		{"app removed", publish.Request{App: "gone", Type: "gone.thing.happened", Version: 1, Subject: "s", Data: json.RawMessage(`{}`)},
			publish.CodeUnknownApp, `app "gone" is unknown or removed`},
		{"herald's own app", publish.Request{App: "herald", Type: "herald.key.failed", Version: 1, Subject: "s", Data: json.RawMessage(`{}`)},
			publish.CodeUnknownApp, `only Herald publishes its operational events`},
		{"app unknown checked before type", with(func(r *publish.Request) { r.App = "nobody" }), publish.CodeUnknownApp, "unknown"},
		{"type of another app", with(func(r *publish.Request) { r.Type = "billing.invoice.paid" }), publish.CodeTypeNotOwned,
			`type "billing.invoice.paid" does not belong to app "contacts"`},
		{"type is the app name", with(func(r *publish.Request) { r.Type = "contacts" }), publish.CodeTypeNotOwned, "must start with"},
		{"type with the app as a longer prefix", with(func(r *publish.Request) { r.Type = "contactsx.person.updated" }), publish.CodeTypeNotOwned, "does not belong"},
		{"version not declared", with(func(r *publish.Request) { r.Version = 3 }), publish.CodeEventNotDeclared, `"contacts.person.updated"@3 is not declared`},
		{"version retired", with(func(r *publish.Request) { r.Version = 2 }), publish.CodeEventNotDeclared, "@2 is not declared"},
		{"version zero", with(func(r *publish.Request) { r.Version = 0 }), publish.CodeEventNotDeclared, "out of range"},
		{"version too large", with(func(r *publish.Request) { r.Version = 1000001 }), publish.CodeEventNotDeclared, "out of range"},
		{"name not declared", with(func(r *publish.Request) { r.Type = "contacts.person.created" }), publish.CodeEventNotDeclared, "not declared"},
		{"id not a UUID", with(func(r *publish.Request) { r.ID = "42" }), publish.CodeIDInvalid, `id "42" is not a UUID`},
		{"id without hyphens", with(func(r *publish.Request) { r.ID = strings.ReplaceAll(uuid.NewString(), "-", "") }), publish.CodeIDInvalid, "not a UUID"},
		{"id as URN", with(func(r *publish.Request) { r.ID = "urn:uuid:" + uuid.NewString() }), publish.CodeIDInvalid, "not a UUID"},
		{"nil id", with(func(r *publish.Request) { r.ID = uuid.Nil.String() }), publish.CodeIDInvalid, "nil UUID"},
		{"id checked before subject", with(func(r *publish.Request) { r.ID = "x"; r.Subject = "" }), publish.CodeIDInvalid, "not a UUID"},
		{"subject missing", with(func(r *publish.Request) { r.Subject = "" }), publish.CodeSubjectInvalid, "subject is missing"},
		{"subject too long", with(func(r *publish.Request) { r.Subject = strings.Repeat("é", 101) }), publish.CodeSubjectInvalid, "202 bytes, longer than 200"},
		{"subject not UTF-8", with(func(r *publish.Request) { r.Subject = "p\xff" }), publish.CodeSubjectInvalid, "not valid UTF-8"},
		{"subject with a tab", with(func(r *publish.Request) { r.Subject = "a\tb" }), publish.CodeSubjectInvalid, "U+0009 at byte 1"},
		{"subject with a newline", with(func(r *publish.Request) { r.Subject = "a\n" }), publish.CodeSubjectInvalid, "U+000A"},
		{"subject with a zero-width space", with(func(r *publish.Request) { r.Subject = "a\u200bb" }), publish.CodeSubjectInvalid, "U+200B"},
		{"subject checked before data", with(func(r *publish.Request) { r.Subject = ""; r.Data = nil }), publish.CodeSubjectInvalid, "missing"},
		{"data missing", with(func(r *publish.Request) { r.Data = nil }), publish.CodeDataInvalid, "data is missing"},
		{"data not JSON", with(func(r *publish.Request) { r.Data = json.RawMessage(`{name: 1}`) }), publish.CodeDataInvalid, "data is not valid JSON"},
		{"data with trailing bytes", with(func(r *publish.Request) { r.Data = json.RawMessage(`{"name":"a"} {}`) }), publish.CodeDataInvalid, "not valid JSON"},
		{"data not UTF-8", with(func(r *publish.Request) { r.Data = json.RawMessage("{\"name\":\"\xff\"}") }), publish.CodeDataInvalid, "not valid UTF-8"},
		{"data fails the schema", with(func(r *publish.Request) { r.Data = json.RawMessage(`{"name":5}`) }), publish.CodeDataInvalid,
			"data does not match the schema of contacts.person.updated@1: /name: "},
		{"size checked before data is parsed", publish.Request{App: "contacts", Type: "contacts.person.updated", Version: 1, Subject: "s",
			Data: json.RawMessage(`{"name":5,"pad":"` + strings.Repeat("x", 300<<10) + `"}`)}, publish.CodePayloadTooLarge,
			"data is 307219 bytes, over the limit of 262144 bytes"},
		{"payload too large", publish.Request{App: "contacts", Type: "contacts.blob.stored", Version: 1, Subject: "s",
			Data: json.RawMessage(`"` + strings.Repeat("x", 256<<10) + `"`)}, publish.CodePayloadTooLarge, "over the limit of 262144 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := p.Publish(e.ctx, tt.req)
			rej, ok := publish.IsRejection(err)
			if !ok {
				t.Fatalf("Publish = %+v, %v; want rejection %s", res, err, tt.wantCode)
			}
			if rej.Code != tt.wantCode || !strings.Contains(rej.Message, tt.wantMessage) {
				t.Errorf("rejection = %s: %s; want %s containing %q", rej.Code, rej.Message, tt.wantCode, tt.wantMessage)
			}
			if err.Error() != rej.Code+": "+rej.Message {
				t.Errorf("Error() = %q", err.Error())
			}
		})
	}

	if n := e.count("accepted"); n != 0 {
		t.Errorf("%d events accepted, want none", n)
	}
	recorded, err := e.store.LastRejections(e.ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(recorded) != len(tests) {
		t.Fatalf("%d rejections recorded, want %d", len(recorded), len(tests))
	}
	for i, tt := range tests {
		r := recorded[len(recorded)-1-i]
		if r.Code != tt.wantCode || !strings.Contains(r.Reason, tt.wantMessage) || r.SourceApp != tt.req.App || r.Type != tt.req.Type {
			t.Errorf("recorded rejection %d = %+v; want %s for %q", i, r, tt.wantCode, tt.name)
		}
	}
	// Every rejection is counted once; an app that is not declared never
	// becomes a label ("" stands for it).
	if len(counted) != len(tests) {
		t.Fatalf("%d rejections counted, want %d: %v", len(counted), len(tests), counted)
	}
	for i, tt := range tests {
		want := tt.req.App + " " + tt.wantCode
		if tt.wantCode == publish.CodeUnknownApp {
			want = " " + tt.wantCode
		}
		if counted[i] != want {
			t.Errorf("counted %q for %q, want %q", counted[i], tt.name, want)
		}
	}
}

func TestDataInvalidListsPointers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.publisher(publish.Options{})
	tests := []struct {
		name       string
		data       string
		wantErrors []string // pointers
		wantParts  []string // in the message
	}{
		{
			name:       "nested object and array item",
			data:       `{"name":"Ada","address":{"zip":"abc"},"tags":["a",2]}`,
			wantErrors: []string{"/address/zip", "/tags/1"},
			wantParts:  []string{"/address/zip: ", "/tags/1: ", "; "},
		},
		{
			name:       "missing required property at the root",
			data:       `{"tags":[]}`,
			wantErrors: []string{""},
			wantParts:  []string{"(root): ", "name"},
		},
		{
			name:       "wrong type of the data",
			data:       `[1]`,
			wantErrors: []string{""},
			wantParts:  []string{"(root): "},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := person("p", "x")
			r.Data = json.RawMessage(tt.data)
			_, err := p.Publish(e.ctx, r)
			rej, ok := publish.IsRejection(err)
			if !ok || rej.Code != publish.CodeDataInvalid {
				t.Fatalf("err = %v, want data_invalid", err)
			}
			var pointers []string
			for _, de := range rej.Errors {
				pointers = append(pointers, de.Pointer)
				if de.Message == "" {
					t.Errorf("empty message for %q", de.Pointer)
				}
			}
			if strings.Join(pointers, ",") != strings.Join(tt.wantErrors, ",") {
				t.Errorf("pointers = %q, want %q", pointers, tt.wantErrors)
			}
			for _, part := range tt.wantParts {
				if !strings.Contains(rej.Message, part) {
					t.Errorf("message %q lacks %q", rej.Message, part)
				}
			}
		})
	}
}

func TestPublishEnvelope(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.publisher(publish.Options{})
	id := "0190F8A4-7B2C-7D3E-8F40-123456789ABC"
	tests := []struct {
		name string
		req  publish.Request
		want string
	}{
		{
			name: "given id, clock time, data compacted as written",
			req: publish.Request{ID: id, App: "contacts", Type: "contacts.person.updated", Version: 1, Subject: "person-42 <&>",
				Data: json.RawMessage("{ \"name\" : \"Ada <&> \\u00e9\",\n \"address\": {\"zip\": \"12345\"}, \"tags\": [ ] }")},
			want: `{"specversion":"1.0","id":"0190f8a4-7b2c-7d3e-8f40-123456789abc","source":"app:contacts",` +
				`"type":"contacts.person.updated","subject":"person-42 <&>","time":"2026-01-02T03:04:05.000000006Z",` +
				`"datacontenttype":"application/json","dataversion":1,` +
				`"data":{"name":"Ada <&> \u00e9","address":{"zip":"12345"},"tags":[]}}`,
		},
		{
			name: "explicit time in another zone is written in UTC",
			req: publish.Request{ID: "3f1c9a52-8e1b-4d0c-9a6e-2b7d4c1e9f00", App: "billing", Type: "billing.invoice.paid", Version: 1,
				Subject: "inv-1", Data: json.RawMessage(`null`),
				Time: time.Date(2025, 6, 30, 23, 0, 0, 0, time.FixedZone("X", -2*3600))},
			want: `{"specversion":"1.0","id":"3f1c9a52-8e1b-4d0c-9a6e-2b7d4c1e9f00","source":"app:billing",` +
				`"type":"billing.invoice.paid","subject":"inv-1","time":"2025-07-01T01:00:00.000000000Z",` +
				`"datacontenttype":"application/json","dataversion":1,"data":null}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := p.Publish(e.ctx, tt.req)
			if err != nil {
				t.Fatalf("publish: %v", err)
			}
			stored, err := e.store.GetEvent(e.ctx, res.ID)
			if err != nil {
				t.Fatalf("get event: %v", err)
			}
			if string(stored.Envelope) != tt.want {
				t.Errorf("envelope\n got %s\nwant %s", stored.Envelope, tt.want)
			}
			if stored.Seq != res.Seq || stored.State != "accepted" || stored.Subject != tt.req.Subject ||
				stored.SourceApp != tt.req.App || stored.Type != tt.req.Type || stored.Version != tt.req.Version {
				t.Errorf("stored event = %+v, result = %+v", stored, res)
			}
		})
	}

	t.Run("generated id is a UUID v7", func(t *testing.T) {
		res, err := p.Publish(e.ctx, person("p-gen", "Ada"))
		if err != nil {
			t.Fatal(err)
		}
		u, err := uuid.Parse(res.ID)
		if err != nil || u.Version() != 7 || res.ID != u.String() {
			t.Errorf("generated id %q: version %d, %v", res.ID, u.Version(), err)
		}
		stored, err := e.store.GetEvent(e.ctx, res.ID)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(stored.Envelope, &doc); err != nil || doc["id"] != res.ID {
			t.Errorf("envelope id = %v (%v), want %s", doc["id"], err, res.ID)
		}
	})
}

func TestPublishIdempotency(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.publisher(publish.Options{})
	later := e.publisher(publish.Options{Now: func() time.Time { return fixedNow.Add(time.Hour) }})
	id := uuid.NewString()
	first := person("person-1", "Ada")
	first.ID = id
	first.Data = json.RawMessage(`{"name":"Ada","tags":["x"]}`)
	res, err := p.Publish(e.ctx, first)
	if err != nil || res.Duplicate || res.ID != id {
		t.Fatalf("first publish = %+v, %v", res, err)
	}
	stored, err := e.store.GetEvent(e.ctx, id)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name     string
		pub      *publish.Publisher
		change   func(r *publish.Request)
		wantCode string // empty: a duplicate
	}{
		{"same request", p, func(*publish.Request) {}, ""},
		{"same content, other formatting and key order, later clock", later, func(r *publish.Request) {
			r.Data = json.RawMessage("{ \"tags\" : [ \"x\" ],\n \"name\": \"Ada\" }")
		}, ""},
		{"same content, explicit time", p, func(r *publish.Request) { r.Time = fixedNow.Add(time.Minute) }, ""},
		{"same id in upper case", p, func(r *publish.Request) { r.ID = strings.ToUpper(id) }, ""},
		{"other data", p, func(r *publish.Request) { r.Data = json.RawMessage(`{"name":"Ada","tags":["y"]}`) }, publish.CodeIDConflict},
		{"other subject", p, func(r *publish.Request) { r.Subject = "person-2" }, publish.CodeIDConflict},
		{"other type", p, func(r *publish.Request) {
			r.Type = "contacts.blob.stored"
		}, publish.CodeIDConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := first
			tt.change(&r)
			got, err := tt.pub.Publish(e.ctx, r)
			if tt.wantCode == "" {
				if err != nil || !got.Duplicate || got.Seq != res.Seq || got.ID != id {
					t.Errorf("Publish = %+v, %v; want duplicate of seq %d", got, err, res.Seq)
				}
				return
			}
			rej, ok := publish.IsRejection(err)
			if !ok || rej.Code != tt.wantCode || !strings.Contains(rej.Message, id) {
				t.Errorf("Publish = %+v, %v; want %s naming %s", got, err, tt.wantCode, id)
			}
		})
	}

	if n := e.count("accepted"); n != 1 {
		t.Errorf("%d accepted rows, want 1", n)
	}
	again, err := e.store.GetEvent(e.ctx, id)
	if err != nil || string(again.Envelope) != string(stored.Envelope) {
		t.Errorf("stored envelope changed: %s (%v)", again.Envelope, err)
	}
	rejs, err := e.store.LastRejections(e.ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	conflicts := 0
	for _, r := range rejs {
		if r.Code == publish.CodeIDConflict && r.ID == id {
			conflicts++
		}
	}
	if conflicts != 3 {
		t.Errorf("%d id_conflict rejections recorded for %s, want 3", conflicts, id)
	}

	a, err := p.Publish(e.ctx, person("person-1", "Ada"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Publish(e.ctx, person("person-1", "Ada"))
	if err != nil {
		t.Fatal(err)
	}
	if a.ID == b.ID || a.Duplicate || b.Duplicate || b.Seq <= a.Seq {
		t.Errorf("two publishes without id: %+v then %+v; want two events", a, b)
	}
}

// blob returns a request whose envelope is exactly size bytes: the envelope of
// contacts.blob.stored with data "" is base bytes long.
func blob(size, base int) publish.Request {
	return publish.Request{ID: "8c1f3a9e-2d4b-4f6a-9b1c-0e2d3f4a5b6c", App: "contacts", Type: "contacts.blob.stored",
		Version: 1, Subject: "b", Data: json.RawMessage(`"` + strings.Repeat("x", size-base) + `"`)}
}

func TestPayloadLimitBoundary(t *testing.T) {
	t.Parallel()
	for _, limit := range []int{0, 1000} { // 0: the default of 256 KiB
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			e := newEnv(t)
			p := e.publisher(publish.Options{MaxEventBytes: limit})
			max := p.MaxEventBytes()
			if limit == 0 && max != 262144 {
				t.Fatalf("default MaxEventBytes = %d, want 262144", max)
			}
			probe := blob(0, 0)
			probe.ID = ""
			res, err := p.Publish(e.ctx, probe)
			if err != nil {
				t.Fatal(err)
			}
			stored, err := e.store.GetEvent(e.ctx, res.ID)
			if err != nil {
				t.Fatal(err)
			}
			base := len(stored.Envelope)

			at, err := p.Publish(e.ctx, blob(max, base))
			if err != nil {
				t.Fatalf("event of exactly %d bytes: %v", max, err)
			}
			stored, err = e.store.GetEvent(e.ctx, at.ID)
			if err != nil || len(stored.Envelope) != max {
				t.Fatalf("stored envelope is %d bytes (%v), want %d", len(stored.Envelope), err, max)
			}
			over := blob(max+1, base)
			over.ID = uuid.NewString()
			_, err = p.Publish(e.ctx, over)
			rej, ok := publish.IsRejection(err)
			if !ok || rej.Code != publish.CodePayloadTooLarge ||
				!strings.Contains(rej.Message, fmt.Sprintf("is %d bytes, over the limit of %d bytes", max+1, max)) {
				t.Errorf("event of %d bytes: %v; want payload_too_large", max+1, err)
			}
		})
	}
}

func TestPublishBatchMixed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.publisher(publish.Options{})
	dupID := uuid.NewString()
	withID := func(r publish.Request, id string) publish.Request { r.ID = id; return r }
	reqs := []publish.Request{
		person("a", "Ada"),
		withID(person("b", "Bob"), dupID),
		person("", "no subject"),
		{App: "nobody", Type: "nobody.x", Version: 1, Subject: "s", Data: json.RawMessage(`{}`)},
		person("c", "Cy"),
		withID(person("b", "Bob"), dupID),     // same id and content, same batch
		withID(person("b", "Changed"), dupID), // same id, other content
	}
	outs, err := p.PublishBatch(e.ctx, reqs)
	if err != nil {
		t.Fatalf("batch: %v", err)
	}
	if len(outs) != len(reqs) {
		t.Fatalf("%d outcomes for %d requests", len(outs), len(reqs))
	}
	wantCodes := []string{"", "", publish.CodeSubjectInvalid, publish.CodeUnknownApp, "", "", publish.CodeIDConflict}
	var lastSeq int64
	for i, o := range outs {
		if wantCodes[i] != "" {
			if o.Rejection == nil || o.Rejection.Code != wantCodes[i] {
				t.Errorf("outcome %d = %+v, want %s", i, o, wantCodes[i])
			}
			continue
		}
		if o.Rejection != nil || o.Result.Seq == 0 {
			t.Errorf("outcome %d = %+v, want accepted", i, o)
			continue
		}
		if i == 5 {
			if !o.Result.Duplicate || o.Result.Seq != outs[1].Result.Seq {
				t.Errorf("repeated id in the batch = %+v, want duplicate of seq %d", o.Result, outs[1].Result.Seq)
			}
			continue
		}
		if o.Result.Duplicate || o.Result.Seq <= lastSeq {
			t.Errorf("outcome %d seq %d after %d, duplicate=%v", i, o.Result.Seq, lastSeq, o.Result.Duplicate)
		}
		lastSeq = o.Result.Seq
	}
	if n := e.count("accepted"); n != 3 {
		t.Errorf("%d accepted rows, want 3", n)
	}
	if n := e.count("rejected"); n != 3 {
		t.Errorf("%d rejected rows, want 3", n)
	}
}

func TestConcurrentPublishersOfOneKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.publisher(publish.Options{Now: time.Now})

	listener, err := pgx.Connect(e.ctx, e.url)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(context.Background())
	if _, err := listener.Exec(e.ctx, "LISTEN "+store.NotifyChannel); err != nil {
		t.Fatal(err)
	}

	const publishers, perPublisher = 4, 50
	ids := make([][]string, publishers)
	var wg sync.WaitGroup
	errs := make(chan error, publishers)
	for g := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perPublisher {
				res, err := p.Publish(e.ctx, person("one-key", fmt.Sprintf("g%d-%d", g, i)))
				if err != nil {
					errs <- err
					return
				}
				ids[g] = append(ids[g], res.ID)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("publish: %v", err)
	}

	// Only a notification from this publisher's connections counts: other
	// tests publish at the same time in schemas of their own.
	waitCtx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	schema, err := testkit.Schema(e.ctx, e.store.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testkit.WaitWakeUp(waitCtx, listener, schema); err != nil {
		t.Errorf("no notification on %s from the publishing connections: %v", store.NotifyChannel, err)
	}

	rows, err := e.store.Pool.Query(e.ctx, `SELECT id::text FROM events WHERE state = 'accepted' ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	inSeqOrder, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(inSeqOrder) != publishers*perPublisher {
		t.Fatalf("%d events, want %d", len(inSeqOrder), publishers*perPublisher)
	}
	pos := map[string]int{}
	for i, id := range inSeqOrder {
		pos[id] = i
	}
	for g, list := range ids {
		for i := 1; i < len(list); i++ {
			if pos[list[i]] < pos[list[i-1]] {
				t.Errorf("publisher %d: event %d precedes event %d in seq order", g, i, i-1)
			}
		}
	}
}

func TestLookupCache(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	clock := fixedNow
	var mu sync.Mutex
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	p := e.publisher(publish.Options{Now: now, CacheTTL: time.Minute})
	noCache := e.publisher(publish.Options{Now: now, CacheTTL: -1})

	code := func(p *publish.Publisher, r publish.Request) string {
		t.Helper()
		_, err := p.Publish(e.ctx, r)
		if err == nil {
			return ""
		}
		rej, ok := publish.IsRejection(err)
		if !ok {
			t.Fatalf("publish: %v", err)
		}
		return rej.Code
	}
	created := publish.Request{App: "billing", Type: "billing.invoice.created", Version: 1, Subject: "i", Data: json.RawMessage(`{}`)}

	// Misses are not cached: a new declaration is usable at once.
	if c := code(p, created); c != publish.CodeEventNotDeclared {
		t.Fatalf("before declaring: %q, want event_not_declared", c)
	}
	e.declare("billing", "invoice.created", 1, `{"type":"object"}`)
	if c := code(p, created); c != "" {
		t.Fatalf("after declaring: %q, want accepted", c)
	}

	// Hits are: a retirement is seen once the entry expires.
	e.exec(`UPDATE declarations SET retired_at = now() WHERE type = 'billing.invoice.created'`)
	if c := code(p, created); c != "" {
		t.Errorf("retired within the TTL: %q, want accepted from the cache", c)
	}
	if c := code(noCache, created); c != publish.CodeEventNotDeclared {
		t.Errorf("retired, cache disabled: %q, want event_not_declared", c)
	}
	advance(2 * time.Minute)
	if c := code(p, created); c != publish.CodeEventNotDeclared {
		t.Errorf("retired after the TTL: %q, want event_not_declared", c)
	}

	// The same holds for apps.
	if c := code(p, person("p", "Ada")); c != "" {
		t.Fatalf("app present: %q, want accepted", c)
	}
	e.exec(`UPDATE apps SET removed_at = now() WHERE id = 'contacts'`)
	if c := code(p, person("p", "Ada")); c != "" {
		t.Errorf("removed app within the TTL: %q, want accepted from the cache", c)
	}
	advance(2 * time.Minute)
	if c := code(p, person("p", "Ada")); c != publish.CodeUnknownApp {
		t.Errorf("removed app after the TTL: %q, want unknown_app", c)
	}
}

func TestIsRejection(t *testing.T) {
	t.Parallel()
	rej := &publish.Rejection{Code: publish.CodeDataInvalid, Message: "m", Errors: []manifest.DataError{{Pointer: "/a", Message: "x"}}}
	tests := []struct {
		name string
		err  error
		want *publish.Rejection
	}{
		{"nil", nil, nil},
		{"plain error", fmt.Errorf("boom"), nil},
		{"rejection", rej, rej},
		{"wrapped rejection", fmt.Errorf("publish: %w", rej), rej},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := publish.IsRejection(tt.err)
			if got != tt.want || ok != (tt.want != nil) {
				t.Errorf("IsRejection = %v, %v; want %v", got, ok, tt.want)
			}
		})
	}
}
