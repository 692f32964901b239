package workflows_test

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"
	"time"

	"herald/activities"
	"herald/store"
	"herald/workflows"
	"herald/workflows/payload"
)

// auditKeys are the metadata keys of an audit row, less the subscription
// and subject every row of a key carries.
func auditKeys(e store.AuditEntry) []string {
	var keys []string
	for k := range maps.Keys(e.Metadata) {
		if k != payload.MetaSubscription && k != payload.MetaSubject {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// checkFacts: the row's metadata keys are exactly what store reads to build
// the row's key event (payload.KeyEventFacts), and encode as want.
func checkFacts(t *testing.T, e store.AuditEntry, want string) {
	t.Helper()
	facts := slices.Sorted(slices.Values(payload.KeyEventFacts[e.Action]))
	if got := auditKeys(e); !slices.Equal(got, facts) {
		t.Errorf("%s (%s) writes the metadata keys %v; store builds its key event from %v", e.Action, e.ErrorCode, got, facts)
	}
	b, err := json.Marshal(e.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != want {
		t.Errorf("%s metadata encodes as\n%s\nwant (as recorded histories carry it)\n%s", e.Action, b, want)
	}
}

// TestAuditFactsAreWhatStoreReads: the delivery.failed, delivery.skipped
// and retention delivery.cancelled rows the workflow writes carry exactly
// the metadata keys store's key events read (store's
// TestKeyEventFactsAreReadByStore holds the other side), and their
// metadata's JSON is byte for byte what it was before the keys were named
// once in payload: the Record activity's input travels in histories.
func TestAuditFactsAreWhatStoreReads(t *testing.T) {
	t.Parallel()
	const sub = `"subject":"person-1","subscription":"billing:contacts.person.updated@1"`

	t.Run("failed and expired", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.params.HoldExpiry = 3 * time.Hour
		h.params.MaxRearms = workflows.NoRearms
		h.sub.setRespond(func(string, int, int) activities.PostResult { return fail(activities.CodeSchemaMismatch, 422) })
		h.eventsAt(time.Second, 1, 2)
		h.run()
		failed := h.store.auditsOf(workflows.AuditDeliveryFailed)
		if len(failed) == 0 {
			t.Fatal("no delivery.failed row")
		}
		checkFacts(t, failed[0], `{"attempts":1,"error":"status 422","eventId":"`+eventID(1)+
			`","lastCode":"schema_mismatch","seq":1,`+sub+`}`)
		var expired []store.AuditEntry
		for _, e := range h.store.auditsOf(workflows.AuditDeliveryCancelled) {
			if e.ErrorCode == activities.CodeRetentionExpired {
				expired = append(expired, e)
			}
		}
		if len(expired) == 0 {
			t.Fatal("no retention delivery.cancelled row")
		}
		checkFacts(t, expired[0], `{"count":2,"eventIds":["`+eventID(1)+`","`+eventID(2)+`"],"holdExpiry":"3h0m0s",`+sub+`}`)
	})

	t.Run("skipped", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.firstAttemptVersion(workflows.QueueFromLogVersion) // the rows are read at the start
		h.store.setPolicy(store.Policy{OnFailure: activities.OnFailureSkip, MaxAttempts: 2})
		h.sub.setRespond(func(id string, _, _ int) activities.PostResult {
			if id == eventID(1) {
				return fail(activities.CodeHandlerFailed, 500)
			}
			return activities.PostResult{Status: 200}
		})
		h.eventsAt(time.Second, 1, 2)
		h.run()
		skipped := h.store.auditsOf(workflows.AuditDeliverySkipped)
		if len(skipped) != 1 {
			t.Fatalf("%d delivery.skipped rows, want 1", len(skipped))
		}
		checkFacts(t, skipped[0], `{"attempts":2,"error":"status 500","eventId":"`+eventID(1)+
			`","failedCode":"attempts_exhausted","lastCode":"handler_failed","seq":1,`+sub+`}`)
	})
}
