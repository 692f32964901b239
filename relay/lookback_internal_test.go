package relay

import (
	"testing"
	"time"
)

// TestLookBack: after is the newest top seen at least the window before
// now; -1 while no top seen is that old.
func TestLookBack(t *testing.T) {
	const window = time.Second
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var b lookBack
	if got := b.after(at(0), window); got != -1 {
		t.Fatalf("nothing seen: after %d, want -1", got)
	}
	b.saw(at(0), 10)
	b.saw(at(400), 12)
	b.saw(at(900), 15)
	for _, tc := range []struct {
		ms   int
		want int64
	}{
		{999, -1},   // no top a second old yet
		{1000, 10},  // the first one is, exactly
		{1399, 10},  // the second is not yet
		{1400, 12},  // now it is
		{1899, 12},  //
		{1900, 15},  // the newest is a second old: nothing newer was seen
		{60000, 15}, // and stays the answer while the log is idle
	} {
		if got := b.after(at(tc.ms), window); got != tc.want {
			t.Errorf("at %d ms: after %d, want %d", tc.ms, got, tc.want)
		}
	}
	if len(b) != 1 {
		t.Errorf("%d tops kept after a long idle, want the newest alone", len(b))
	}
	b.saw(at(60500), 20)
	if got := b.after(at(61000), window); got != 15 {
		t.Errorf("half a second after a new top: after %d, want the old one, 15", got)
	}
	if got := b.after(at(61500), window); got != 20 {
		t.Errorf("a second after a new top: after %d, want 20", got)
	}
}
