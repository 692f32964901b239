package relay

import (
	"context"
	"testing"
	"time"
)

// TestRecordTurns: at most RecordParallel rounds hold a turn to write; a
// round that finds none free writes anyway after recordTurnWait, holding
// nothing; a turn given back is taken at once; no cap means no wait.
func TestRecordTurns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := &Relay{RecordParallel: 2}
	r.defaults()
	rel1, ok1 := r.takeRecordSlot(ctx)
	rel2, ok2 := r.takeRecordSlot(ctx)
	if !ok1 || !ok2 || len(r.recordSlots) != 2 {
		t.Fatalf("two turns: %v %v, %d held", ok1, ok2, len(r.recordSlots))
	}

	start := time.Now()
	rel3, ok3 := r.takeRecordSlot(ctx)
	if waited := time.Since(start); !ok3 || waited < recordTurnWait {
		t.Fatalf("a third round went after %v (ok %v), want it to wait %v for a turn", waited, ok3, recordTurnWait)
	}
	rel3() // it held no turn: giving back nothing
	if len(r.recordSlots) != 2 {
		t.Fatalf("%d turns held after the round that waited out its turn ended, want 2", len(r.recordSlots))
	}

	rel1()
	start = time.Now()
	rel4, ok4 := r.takeRecordSlot(ctx)
	if waited := time.Since(start); !ok4 || waited >= recordTurnWait/2 {
		t.Fatalf("a turn given back was taken after %v (ok %v)", waited, ok4)
	}
	rel2()
	rel4()
	if len(r.recordSlots) != 0 {
		t.Fatalf("%d turns held after every round ended", len(r.recordSlots))
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	full := &Relay{RecordParallel: 1}
	full.defaults()
	hold, _ := full.takeRecordSlot(ctx)
	defer hold()
	if _, ok := full.takeRecordSlot(cancelled); ok {
		t.Fatal("a round whose context ended got a turn")
	}

	uncapped := &Relay{RecordParallel: -1}
	uncapped.defaults()
	start = time.Now()
	for range 10 {
		if _, ok := uncapped.takeRecordSlot(ctx); !ok {
			t.Fatal("no cap: a round was refused")
		}
	}
	if waited := time.Since(start); waited >= recordTurnWait/2 {
		t.Fatalf("no cap: ten rounds waited %v", waited)
	}
}
