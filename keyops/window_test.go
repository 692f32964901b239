package keyops_test

import (
	"errors"
	"strings"
	"testing"

	"herald/keyops"
	"herald/store"
)

// TestQueueKeySendsInOrderedChunks: a key's events go in signals of at most
// IDsPerSignal ids, in order; the first failed signal stops the key, with
// what was sent counted.
func TestQueueKeySendsInOrderedChunks(t *testing.T) {
	t.Parallel()
	evs := make([]store.RequeuedEvent, 1201)
	for i := range evs {
		evs[i] = store.RequeuedEvent{ID: string(rune('a'+i%26)) + strings.Repeat("x", i/26), Seq: int64(i)}
	}
	k := store.KeyEvents{Subject: "person-1", Events: evs}
	keys, events := keyops.PlanWindow("billing:contacts.person.updated@1", []store.KeyEvents{k})
	if events != 1201 || len(keys) != 1 || keys[0].Result != "skipped" || keys[0].FirstSeq != 0 || keys[0].LastSeq != 1200 ||
		keys[0].WorkflowID != "deliver:billing:contacts.person.updated@1:person-1" {
		t.Fatalf("plan: %+v, %d events", keys, events)
	}

	var chunks [][]string
	told := 0
	n := keyops.QueueKey(k, &keys[0], func(ids []string) error { chunks = append(chunks, ids); return nil },
		func(m int) { told += m })
	if n != 1201 || told != 1201 || keys[0].Result != "queued" || keys[0].Signals != 3 {
		t.Fatalf("queued %d (told %d): %+v", n, told, keys[0])
	}
	if len(chunks) != 3 || len(chunks[0]) != 500 || len(chunks[1]) != 500 || len(chunks[2]) != 201 {
		t.Fatalf("chunks of 1201 ids: %d chunks", len(chunks))
	}
	i := 0
	for _, c := range chunks {
		for _, id := range c {
			if id != evs[i].ID {
				t.Fatalf("id %d of the chunks is %s, want %s (order kept)", i, id, evs[i].ID)
			}
			i++
		}
	}

	r := keyops.WindowKey{Result: "skipped"}
	calls := 0
	n = keyops.QueueKey(k, &r, func([]string) error {
		if calls++; calls == 2 {
			return errors.New("temporal unreachable")
		}
		return nil
	}, nil)
	if n != 500 || calls != 2 || r.Result != "error" || r.Error != "temporal unreachable" || r.Signals != 1 {
		t.Errorf("a failed second signal: queued %d after %d calls, %+v", n, calls, r)
	}
	// No events: no signal.
	var empty keyops.WindowKey
	if n := keyops.QueueKey(store.KeyEvents{}, &empty, func([]string) error { t.Error("a signal for no ids"); return nil }, nil); n != 0 || empty.Signals != 0 {
		t.Errorf("no events: queued %d, %+v", n, empty)
	}
}
