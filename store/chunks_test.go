package store

import (
	"fmt"
	"testing"
)

// TestInsertChunks: a call's events are split, in order, into statements
// of at most insertChunkEvents events and insertChunkBytes of envelopes,
// an event larger than that alone in its statement; every event is in
// exactly one, at its place in the call.
func TestInsertChunks(t *testing.T) {
	big := make([]byte, insertChunkBytes/2+1) // two of them do not fit one statement
	huge := make([]byte, insertChunkBytes+1)
	ev := func(i int, env []byte) NewEvent {
		return NewEvent{ID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i), Version: 1, Envelope: env}
	}
	small := func(n int) []NewEvent {
		evs := make([]NewEvent, n)
		for i := range evs {
			evs[i] = ev(i, []byte("{}"))
		}
		return evs
	}
	for _, c := range []struct {
		name  string
		evs   []NewEvent
		sizes []int
	}{
		{"one", small(1), []int{1}},
		{"a statement's worth", small(insertChunkEvents), []int{insertChunkEvents}},
		{"one more", small(insertChunkEvents + 1), []int{insertChunkEvents, 1}},
		{"two and a half", small(2*insertChunkEvents + insertChunkEvents/2), []int{insertChunkEvents, insertChunkEvents, insertChunkEvents / 2}},
		{"large envelopes", []NewEvent{ev(0, big), ev(1, []byte("{}")), ev(2, big), ev(3, big)}, []int{2, 1, 1}},
		{"one beyond the bound", []NewEvent{ev(0, []byte("{}")), ev(1, huge), ev(2, []byte("{}"))}, []int{1, 1, 1}},
	} {
		chunks, err := insertChunks(c.evs)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var sizes []int
		next := 0
		for _, ch := range chunks {
			sizes = append(sizes, len(ch.evs))
			if ch.at != next || &ch.evs[0] != &c.evs[next] {
				t.Errorf("%s: a chunk at %d holds the call's events from %d", c.name, next, ch.at)
			}
			if ids, ok := ch.args[0].([]string); !ok || len(ids) != len(ch.evs) || ids[0] != ch.evs[0].ID {
				t.Errorf("%s: the chunk at %d has ids %v as its first parameter", c.name, ch.at, ch.args[0])
			}
			next += len(ch.evs)
		}
		if fmt.Sprint(sizes) != fmt.Sprint(c.sizes) || next != len(c.evs) {
			t.Errorf("%s: chunks of %v events, %d in all; want %v", c.name, sizes, next, c.sizes)
		}
	}
	if _, err := insertChunks([]NewEvent{ev(0, nil), {ID: "x", Version: 1 << 40}}); err == nil {
		t.Error("an event whose version does not fit an integer: no error")
	}
}
