package workflows_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	historypb "go.temporal.io/api/history/v1"

	"herald/activities"
	"herald/workflows"
)

var updatePayloadGolden = flag.Bool("update-payload-golden", false, "rewrite testdata/payload-encoding.golden")

// historyTypes are the types that travel inside the histories of Herald's
// workflows (inputs, results, signal and update payloads, carried state).
var historyTypes = []any{
	workflows.Params{}, workflows.Carry{}, workflows.StartInput{}, workflows.StartResult{},
	workflows.EventSignal{}, workflows.RedeliverSignal{}, workflows.CancelSignal{},
	workflows.ControlSignal{}, workflows.SubscriptionSignal{}, workflows.OpResult{},
	workflows.RetentionParams{},
	activities.DeliverInput{}, activities.DeliverResult{}, activities.FailureDetails{},
	activities.AttemptReport{}, activities.RecordInput{}, activities.RequeueInput{},
	activities.RequeueResult{}, activities.BacklogInput{}, activities.BacklogEvent{},
	activities.QueueInput{}, activities.QueueResult{}, activities.ErrorPolicy{},
	activities.AuditEntry{}, activities.PurgeInput{}, activities.PurgeResult{},
	activities.ForgetPauseInput{},
}

// TestHistoryTypesAreNotTheStores checks that no type that travels in a
// workflow history is, or holds, one of store's: a change to the database
// schema must not change what recorded histories decode into.
func TestHistoryTypesAreNotTheStores(t *testing.T) {
	t.Parallel()
	for _, v := range historyTypes {
		walkTypes(reflect.TypeOf(v), map[reflect.Type]bool{}, func(path string, ty reflect.Type) {
			if strings.HasPrefix(ty.PkgPath(), "herald/store") {
				t.Errorf("%s travels in workflow histories but is %s, a store type", path, ty)
			}
		})
	}
}

// walkTypes calls fn for ty and every type reachable through its fields,
// elements and pointers.
func walkTypes(ty reflect.Type, seen map[reflect.Type]bool, fn func(path string, ty reflect.Type)) {
	var walk func(path string, ty reflect.Type)
	walk = func(path string, ty reflect.Type) {
		fn(path, ty)
		if seen[ty] {
			return
		}
		seen[ty] = true
		switch ty.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array:
			walk(path+"[]", ty.Elem())
		case reflect.Map:
			walk(path+"{}", ty.Elem())
		case reflect.Struct:
			for f := range ty.Fields() {
				if f.IsExported() {
					walk(path+"."+f.Name, f.Type)
				}
			}
		}
	}
	walk(ty.String(), ty)
}

// TestPayloadEncodingGolden pins the JSON encoding of every type that
// travels in histories (each field's JSON name, options and kind, through
// nested types) against testdata/payload-encoding.golden. A change here
// changes what recorded histories decode into: it needs a GetVersion or a
// note in the CHANGELOG, never a silent golden update. Regenerate with
// go test ./workflows -run PayloadEncodingGolden -update-payload-golden.
func TestPayloadEncodingGolden(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	seen := map[reflect.Type]bool{}
	for _, v := range historyTypes {
		describeEncoding(&b, reflect.TypeOf(v), seen)
	}
	golden := filepath.Join("testdata", "payload-encoding.golden")
	if *updatePayloadGolden {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != string(want) {
		t.Errorf("the JSON encoding of the history types changed; got:\n%s\nwant (%s):\n%s", got, golden, want)
	}
}

// describeEncoding writes, once per struct type, its JSON fields: name,
// tag options and JSON form (jsonForm), so that moving or renaming a type
// without changing its encoding leaves the golden file as it is.
func describeEncoding(b *strings.Builder, ty reflect.Type, seen map[reflect.Type]bool) {
	for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice || ty.Kind() == reflect.Map || ty.Kind() == reflect.Array {
		ty = ty.Elem()
	}
	if ty.Kind() != reflect.Struct || seen[ty] || ty.PkgPath() == "time" {
		return
	}
	seen[ty] = true
	fmt.Fprintf(b, "%s\n", ty.Name())
	var nested []reflect.Type
	for f := range ty.Fields() {
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "" {
			tag = f.Name
		}
		fmt.Fprintf(b, "\t%s %s\n", tag, jsonForm(f.Type))
		nested = append(nested, f.Type)
	}
	for _, n := range nested {
		describeEncoding(b, n, seen)
	}
}

// jsonForm names how a field's type encodes: its kind, or a struct's name.
func jsonForm(ty reflect.Type) string {
	switch {
	case ty == reflect.TypeFor[time.Time]():
		return "time"
	case ty == reflect.TypeFor[time.Duration]():
		return "duration"
	}
	switch ty.Kind() {
	case reflect.Pointer:
		return "*" + jsonForm(ty.Elem())
	case reflect.Slice, reflect.Array:
		return "[]" + jsonForm(ty.Elem())
	case reflect.Map:
		return "map[" + jsonForm(ty.Key()) + "]" + jsonForm(ty.Elem())
	case reflect.Struct:
		return ty.Name()
	}
	return ty.Kind().String()
}

// TestRecordedPayloadsRoundTrip decodes every payload of every recorded
// history into its type, strictly (no field the type lacks), and encodes it
// again: the result must be the same JSON. It proves that the types the
// workflow now uses read the histories recorded with the old ones.
func TestRecordedPayloadsRoundTrip(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no recorded histories in testdata")
	}
	checked := 0
	for _, f := range files {
		checked += roundTripHistory(t, filepath.Base(f), loadHistory(t, f))
	}
	if checked < 90 {
		t.Errorf("checked only %d payloads in %d histories", checked, len(files))
	}
}

// Payload types by activity, signal and update name.
var (
	activityInputs = map[string]func() any{
		"Deliver":           func() any { return new(activities.DeliverInput) },
		"Record":            func() any { return new(activities.RecordInput) },
		"Requeue":           func() any { return new(activities.RequeueInput) },
		"Backlog":           func() any { return new(activities.BacklogInput) },
		"DropBacklog":       func() any { return new(activities.BacklogInput) },
		"KeyQueue":          func() any { return new(activities.QueueInput) },
		"SubscriptionState": func() any { return new(string) },
		"Audit":             func() any { return new(activities.AuditEntry) },
		"ErrorPolicy":       func() any { return new(string) },
		"PurgeEvents":       func() any { return new(activities.PurgeInput) },
		"DeliveryStart":     func() any { return new(workflows.StartInput) },
		"ForgetPause":       func() any { return new(activities.ForgetPauseInput) },
	}
	activityResults = map[string]func() any{
		"Deliver":           func() any { return new(activities.DeliverResult) },
		"Requeue":           func() any { return new(activities.RequeueResult) },
		"Backlog":           func() any { return new([]activities.BacklogEvent) },
		"DropBacklog":       func() any { return new(int) },
		"KeyQueue":          func() any { return new(activities.QueueResult) },
		"SubscriptionState": func() any { return new(string) },
		"ErrorPolicy":       func() any { return new(activities.ErrorPolicy) },
		"PurgeEvents":       func() any { return new(activities.PurgeResult) },
		"DeliveryStart":     func() any { return new(workflows.StartResult) },
		"DeliverySettings":  func() any { return new(workflows.Params) },
		"ForgetPause":       func() any { return new(bool) },
	}
	signalPayloads = map[string]func() any{
		workflows.SignalEvent:        func() any { return new(workflows.EventSignal) },
		workflows.SignalRedeliver:    func() any { return new(workflows.RedeliverSignal) },
		workflows.SignalCancel:       func() any { return new(workflows.CancelSignal) },
		workflows.SignalPause:        func() any { return new(workflows.ControlSignal) },
		workflows.SignalResume:       func() any { return new(workflows.ControlSignal) },
		workflows.SignalAttempt:      func() any { return new(activities.AttemptReport) },
		workflows.SignalSubscription: func() any { return new(workflows.SubscriptionSignal) },
	}
)

// undecodableHistory is the replay history whose cancel and resume signals
// do not decode into their types, on purpose.
const undecodableHistory = "delivery-history-corrupt-signal.json"

// roundTripHistory checks every payload of h and returns how many.
func roundTripHistory(t *testing.T, name string, h *historypb.History) int {
	t.Helper()
	n := 0
	check := func(what string, p *commonpb.Payloads, newValue func() any) {
		for i, pl := range p.GetPayloads() {
			n++
			if err := roundTrip(pl.GetData(), newValue()); err != nil {
				t.Errorf("%s: %s payload %d: %v", name, what, i, err)
			}
		}
	}
	lookup := func(m map[string]func() any, kind, key string) func() any {
		return func() any {
			if f, ok := m[key]; ok {
				return f()
			}
			t.Errorf("%s: %s %q has no payload type in this test: add it", name, kind, key)
			return new(any)
		}
	}
	scheduled := map[int64]string{}
	for _, e := range h.GetEvents() {
		switch {
		case e.GetWorkflowExecutionStartedEventAttributes() != nil:
			check("start input", e.GetWorkflowExecutionStartedEventAttributes().GetInput(), func() any { return new(workflows.Params) })
		case e.GetWorkflowExecutionContinuedAsNewEventAttributes() != nil:
			check("continue-as-new input", e.GetWorkflowExecutionContinuedAsNewEventAttributes().GetInput(), func() any { return new(workflows.Params) })
		case e.GetActivityTaskScheduledEventAttributes() != nil:
			a := e.GetActivityTaskScheduledEventAttributes()
			scheduled[e.GetEventId()] = a.GetActivityType().GetName()
			check("input of "+a.GetActivityType().GetName(), a.GetInput(), lookup(activityInputs, "activity", a.GetActivityType().GetName()))
		case e.GetActivityTaskCompletedEventAttributes() != nil:
			a := e.GetActivityTaskCompletedEventAttributes()
			act := scheduled[a.GetScheduledEventId()]
			check("result of "+act, a.GetResult(), lookup(activityResults, "activity", act))
		case e.GetWorkflowExecutionSignaledEventAttributes() != nil:
			a := e.GetWorkflowExecutionSignaledEventAttributes()
			if a.GetSignalName() == workflows.SignalReachable {
				continue // no payload
			}
			if name == undecodableHistory {
				// Its cancel and resume were sent not to decode
				// (TestSignalThatDoesNotDecodeIsDropped): they must not.
				if a.GetSignalName() == workflows.SignalCancel || a.GetSignalName() == workflows.SignalResume {
					for _, pl := range a.GetInput().GetPayloads() {
						n++
						if roundTrip(pl.GetData(), lookup(signalPayloads, "signal", a.GetSignalName())()) == nil {
							t.Errorf("%s: signal %s decodes; the history wants one that does not", name, a.GetSignalName())
						}
					}
					continue
				}
			}
			check("signal "+a.GetSignalName(), a.GetInput(), lookup(signalPayloads, "signal", a.GetSignalName()))
		case e.GetWorkflowExecutionUpdateAcceptedEventAttributes() != nil:
			in := e.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetInput()
			check("update "+in.GetName(), in.GetArgs(), lookup(signalPayloads, "update", in.GetName()))
		case e.GetWorkflowExecutionUpdateCompletedEventAttributes() != nil:
			check("update result", e.GetWorkflowExecutionUpdateCompletedEventAttributes().GetOutcome().GetSuccess(), func() any { return new(workflows.OpResult) })
		case e.GetMarkerRecordedEventAttributes().GetMarkerName() == "LocalActivity":
			d := e.GetMarkerRecordedEventAttributes().GetDetails()
			var marker struct{ ActivityType string }
			if ps := d["data"].GetPayloads(); len(ps) == 1 {
				if err := json.Unmarshal(ps[0].GetData(), &marker); err != nil {
					t.Errorf("%s: local activity marker: %v", name, err)
				}
			}
			check("local result of "+marker.ActivityType, d["result"], lookup(activityResults, "local activity", marker.ActivityType))
		}
	}
	return n
}

// roundTrip decodes data into v, refusing fields v lacks, encodes v and
// compares the two as JSON values.
func roundTrip(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode into %T: %w", v, err)
	}
	again, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %T: %w", v, err)
	}
	if path, ok := covers(jsonValue(data), jsonValue(again), "$"); !ok {
		return fmt.Errorf("%T encodes %s differently:\nrecorded %s\nnow      %s", v, path, data, again)
	}
	return nil
}

// covers reports whether now encodes everything recorded holds, the same;
// a field recorded before it existed may appear in now with its zero value
// only. It returns the path of the first difference.
func covers(recorded, now any, path string) (string, bool) {
	switch r := recorded.(type) {
	case map[string]any:
		n, ok := now.(map[string]any)
		if !ok {
			return path, false
		}
		for k, rv := range r {
			nv, ok := n[k]
			if !ok {
				return path + "." + k, false
			}
			if p, ok := covers(rv, nv, path+"."+k); !ok {
				return p, false
			}
		}
		for k, nv := range n {
			if _, ok := r[k]; !ok && !isZeroJSON(nv) {
				return path + "." + k, false
			}
		}
		return "", true
	case []any:
		n, ok := now.([]any)
		if !ok || len(n) != len(r) {
			return path, false
		}
		for i := range r {
			if p, ok := covers(r[i], n[i], fmt.Sprintf("%s[%d]", path, i)); !ok {
				return p, false
			}
		}
		return "", true
	}
	return path, reflect.DeepEqual(recorded, now)
}

// isZeroJSON reports whether v is the encoding of a Go zero value.
func isZeroJSON(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case bool:
		return !v
	case string:
		return v == "" || v == "0001-01-01T00:00:00Z"
	case json.Number:
		return v == "0"
	case []any:
		return len(v) == 0
	case map[string]any:
		for _, e := range v {
			if !isZeroJSON(e) {
				return false
			}
		}
		return true
	}
	return false
}

func jsonValue(data []byte) any {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return err.Error()
	}
	return v
}
