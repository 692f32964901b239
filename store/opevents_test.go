package store_test

import (
	"context"
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"herald/store"
)

// docField is one field of an operational event as
// docs/operational-events.md documents it.
type docField struct {
	Type     string // string, integer, number, date-time, array of strings, string or null
	Optional bool
}

var (
	docSection = regexp.MustCompile("^### `(herald\\.[a-z_.]+)`")
	docName    = regexp.MustCompile("`([A-Za-z]+)`")
)

// operationalEventsDoc reads the field table of each event type in
// docs/operational-events.md. A row whose type is empty ("as above") takes
// the type the field had in an earlier table.
func operationalEventsDoc(t *testing.T) map[string]map[string]docField {
	t.Helper()
	raw, err := os.ReadFile("../docs/operational-events.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]docField{}
	typeOf := map[string]string{}
	var section string
	for line := range strings.Lines(string(raw)) {
		line = strings.TrimSpace(line)
		if m := docSection.FindStringSubmatch(line); m != nil {
			section = m[1]
			out[section] = map[string]docField{}
			continue
		}
		if section == "" || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 4 {
			t.Fatalf("table row %q", line)
		}
		var names []string
		for _, m := range docName.FindAllStringSubmatch(cells[1], -1) {
			names = append(names, m[1])
		}
		typ := strings.TrimSpace(cells[2])
		optional := strings.HasSuffix(typ, ", optional")
		typ = strings.TrimSuffix(typ, ", optional")
		types := strings.Split(typ, ", ")
		for i, name := range names {
			ft := typ
			if len(types) == len(names) {
				ft = types[i]
			}
			if ft == "" {
				ft = typeOf[name]
			}
			if ft == "" {
				t.Fatalf("%s: field %s has no type", section, name)
			}
			typeOf[name] = ft
			out[section][name] = docField{Type: ft, Optional: optional}
		}
	}
	return out
}

// goFields lists the JSON fields of an event's data type with the
// document's words for their types; omitempty makes a field optional.
func goFields(t *testing.T, typ reflect.Type) map[string]docField {
	t.Helper()
	out := map[string]docField{}
	for f := range typ.Fields() {
		if f.Anonymous {
			for k, v := range goFields(t, f.Type) {
				out[k] = v
			}
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		var doc string
		switch {
		case f.Type == reflect.TypeFor[store.UTCTime]():
			doc = "date-time"
		case f.Type == reflect.TypeFor[*string]():
			doc = "string or null"
		case f.Type == reflect.TypeFor[[]string]():
			doc = "array of strings"
		case f.Type.Kind() == reflect.String:
			doc = "string"
		case f.Type.Kind() == reflect.Int || f.Type.Kind() == reflect.Int64:
			doc = "integer"
		case f.Type.Kind() == reflect.Float64:
			doc = "number"
		default:
			t.Fatalf("%s.%s: no documented type for %s", typ, f.Name, f.Type)
		}
		out[name] = docField{Type: doc, Optional: opts == "omitempty"}
	}
	return out
}

// TestOperationalEventsMatchTheDoc: each operational event's Go data type
// has exactly the fields docs/operational-events.md lists for it, with
// their types, optional exactly when omitempty; the document lists no event
// type without one; and the JSON written for an empty and a full value has
// the required and all the documented fields.
func TestOperationalEventsMatchTheDoc(t *testing.T) {
	t.Parallel()
	doc := operationalEventsDoc(t)
	var docTypes, goTypes []string
	for k := range doc {
		docTypes = append(docTypes, k)
	}
	for k := range store.OperationalEventData {
		goTypes = append(goTypes, k)
	}
	sort.Strings(docTypes)
	sort.Strings(goTypes)
	if !slices.Equal(docTypes, goTypes) {
		t.Fatalf("documented event types %q, typed %q", docTypes, goTypes)
	}
	for typ, zero := range store.OperationalEventData {
		want, got := doc[typ], goFields(t, reflect.TypeOf(zero))
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the Go type's fields\n%v\nthe document's\n%v", typ, got, want)
			continue
		}
		var required, all []string
		for name, f := range want {
			all = append(all, name)
			if !f.Optional {
				required = append(required, name)
			}
		}
		sort.Strings(required)
		sort.Strings(all)
		if keys := jsonKeys(t, zero); !slices.Equal(keys, required) {
			t.Errorf("%s: an empty value writes %q, want the required fields %q", typ, keys, required)
		}
		if keys := jsonKeys(t, filled(reflect.TypeOf(zero))); !slices.Equal(keys, all) {
			t.Errorf("%s: a full value writes %q, want every field %q", typ, keys, all)
		}
	}
}

// TestOperationalEventsMatchTheSchemas: the data schemas of Herald's own
// manifest (store/herald_app.json) declare the fields of each Go type and
// require only fields it always writes.
func TestOperationalEventsMatchTheSchemas(t *testing.T) {
	t.Parallel()
	m, err := store.HeraldManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range m.Events {
		typ := m.App + "." + ev.Name
		zero, ok := store.OperationalEventData[typ]
		if !ok {
			t.Errorf("%s is declared but has no Go type", typ)
			continue
		}
		var schema struct {
			Required   []string                   `json:"required"`
			Properties map[string]json.RawMessage `json:"properties"`
		}
		if err := json.Unmarshal(ev.DataSchema, &schema); err != nil {
			t.Fatal(err)
		}
		fields := goFields(t, reflect.TypeOf(zero))
		var props, names []string
		for k := range schema.Properties {
			props = append(props, k)
		}
		for k := range fields {
			names = append(names, k)
		}
		sort.Strings(props)
		sort.Strings(names)
		if !slices.Equal(props, names) {
			t.Errorf("%s: schema properties %q, Go fields %q", typ, props, names)
		}
		for _, r := range schema.Required {
			if f, ok := fields[r]; !ok || f.Optional {
				t.Errorf("%s: the schema requires %s, which the Go type may leave out", typ, r)
			}
		}
	}
}

// jsonKeys returns the top-level keys of v's JSON, sorted.
func jsonKeys(t *testing.T, v any) []string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// filled returns a value of typ with every field set.
func filled(typ reflect.Type) any {
	v := reflect.New(typ).Elem()
	fill(v)
	return v.Interface()
}

func fill(v reflect.Value) {
	switch {
	case v.Type() == reflect.TypeFor[store.UTCTime]():
		v.Set(reflect.ValueOf(store.UTCTime(time.Unix(1, 0))))
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i))
		}
	case reflect.String:
		v.SetString("x")
	case reflect.Int, reflect.Int64:
		v.SetInt(1)
	case reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	}
}

// TestOperationalEventsOnTheWire drives each operational event through the
// store as Herald emits it and checks its data against the document: every
// key documented, every required one present.
func TestOperationalEventsOnTheWire(t *testing.T) {
	t.Parallel()
	s := heraldStore(t)
	ctx := context.Background()
	mustApply(t, s, contactsManifest(decl("person.updated", 1)))
	mustApply(t, s, billingManifest(subTo("contacts.person.updated", 1)))
	evs := []store.NewEvent{newEvent("contacts.person.updated", "p1", "a"),
		newEvent("contacts.person.updated", "p1", "b"), newEvent("contacts.person.updated", "p1", "c")}
	if _, err := s.InsertEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
	wf := "deliver:" + billingPersonSub + ":p1"
	failKey(t, s, billingPersonSub, "p1", evs[0].ID, wf)
	if err := s.RecordOutcomes(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{
		{EventID: evs[0].ID, Status: store.EventDelivered, Attempts: 4}}); err != nil {
		t.Fatal(err)
	}
	audit := []store.AuditEntry{
		{Action: store.ActionDeliverySkipped, Outcome: store.OutcomeFailed, TargetType: store.TargetDelivery,
			TargetID: wf, ErrorCode: store.CodeSkippedAfterFailure,
			Metadata: map[string]any{"eventId": evs[1].ID, "seq": float64(2), "attempts": float64(5),
				"failedCode": "attempts_exhausted", "lastCode": "handler_failed", "error": "500 <b>&</b>"}},
		{Action: store.ActionDeliveryCancelled, TargetType: store.TargetDelivery, TargetID: wf,
			ErrorCode: "retention_expired",
			Metadata:  map[string]any{"count": float64(1), "eventIds": []any{evs[2].ID}, "holdExpiry": "720h0m0s"}},
	}
	if err := s.RecordWithAudit(ctx, billingPersonSub, "p1", []store.OutcomeUpdate{
		{EventID: evs[1].ID, Status: store.EventCancelled, Code: store.CodeSkippedAfterFailure, Attempts: 5},
		{EventID: evs[2].ID, Status: store.EventExpired, Code: "retention_expired"},
	}, audit); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetSubscriptionPaused(ctx, billingPersonSub, true, "alice", "<maintenance>"); err != nil {
		t.Fatal(err)
	}
	doc := operationalEventsDoc(t)
	seen := map[string]bool{}
	for _, ev := range heraldEvents(t, s) {
		t.Logf("%s %s", ev.Type, ev.Envelope.Data)
		fields, ok := doc[ev.Type]
		if !ok {
			t.Fatalf("%s is not documented", ev.Type)
		}
		for k := range ev.Data {
			if _, ok := fields[k]; !ok {
				t.Errorf("%s writes %s, which is not documented", ev.Type, k)
			}
		}
		for k, f := range fields {
			if _, ok := ev.Data[k]; !ok && !f.Optional {
				t.Errorf("%s leaves out the required %s: %s", ev.Type, k, ev.Envelope.Data)
			}
		}
		seen[ev.Type] = true
	}
	if len(seen) != len(doc) {
		t.Fatalf("emitted %v, want every documented type", seen)
	}
}

// TestOperationalEventsDocCounts: the counts and lists of event types that
// docs/operational-events.md states in prose agree with the types Herald
// has: "its N event types", "All N are version 1", and the key events the
// loop guard names.
func TestOperationalEventsDocCounts(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docs/operational-events.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(raw)), " ")
	words := []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"}
	counts := regexp.MustCompile(`\b(?:its|All) (zero|one|two|three|four|five|six|seven|eight|nine|ten) (?:event types|are version)`)
	found := counts.FindAllStringSubmatch(doc, -1)
	if len(found) == 0 {
		t.Fatal("the document states no count of event types; update this test")
	}
	for _, m := range found {
		if n := slices.Index(words, m[1]); n != len(store.OperationalEventData) {
			t.Errorf("the document says %q; Herald has %d event types", m[0], len(store.OperationalEventData))
		}
	}
	guard := regexp.MustCompile(`emits \*\*no key events\*\* \(([^)]*)\)`).FindStringSubmatch(doc)
	if guard == nil {
		t.Fatal("the loop guard's list of key events is gone; update this test")
	}
	var named, keyTypes []string
	for _, m := range docName.FindAllStringSubmatch(guard[1], -1) {
		named = append(named, "herald.key."+m[1])
	}
	for typ := range store.OperationalEventData {
		if strings.HasPrefix(typ, "herald.key.") {
			keyTypes = append(keyTypes, typ)
		}
	}
	sort.Strings(named)
	sort.Strings(keyTypes)
	if !slices.Equal(named, keyTypes) {
		t.Errorf("the loop guard names %q; the key events are %q", named, keyTypes)
	}
}
