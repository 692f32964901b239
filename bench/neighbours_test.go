package main

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"herald/manifest"
	"herald/publish"
)

// recordingPublisher accepts every event and remembers the subjects each
// event type was published to.
type recordingPublisher struct {
	mu       sync.Mutex
	subjects map[string]map[string]bool
}

func (p *recordingPublisher) Publish(_ context.Context, r publish.Request) (publish.Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.subjects == nil {
		p.subjects = map[string]map[string]bool{}
	}
	if p.subjects[r.Type] == nil {
		p.subjects[r.Type] = map[string]bool{}
	}
	p.subjects[r.Type][r.Subject] = true
	return publish.Result{ID: r.ID}, nil
}

// keysPerType counts the distinct subjects published so far, per type.
func (p *recordingPublisher) keysPerType() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for typ, subjects := range p.subjects {
		out[typ] = len(subjects)
	}
	return out
}

// The healthy events of a comparison go out only once every neighbour key
// has had its first event (which creates its workflow): the comparison is of
// neighbours at work, not of their start-up overlapping the healthy keys'
// own (issue 26). Before, a fixed 5 s lead ended when each neighbour had
// created 25 of its 50 keys.
func TestNeighboursSeedEveryKeyBeforeTheHealthyEvents(t *testing.T) {
	n, err := startNeighbours()
	if err != nil {
		t.Fatal(err)
	}
	defer n.close()
	pub := &recordingPublisher{}
	load := neighbourLoad{Rate: 200, Keys: 40}
	ctx, cancel := context.WithCancel(context.Background())
	seeded := make(chan struct{})
	stats := make(chan *NeighbourStats, 1)
	go func() { stats <- n.drive(ctx, pub, "", "seed", load, true, seeded) }()

	wait, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	if err := awaitNeighbours(wait, seeded, 0); err != nil {
		cancel()
		t.Fatalf("neighbours never seeded their keys: %v", err)
	}
	got := pub.keysPerType()
	cancel()
	st := <-stats
	for _, name := range []string{"slow", "fail", "heavy"} {
		typ := manifest.EventType(noisyApp, name)
		if got[typ] != load.Keys {
			t.Errorf("%s: %d of %d keys published when the healthy events were let go (all: %v)", name, got[typ], load.Keys, got)
		}
		if st.Published[name] < load.Keys {
			t.Errorf("%s: stats count %d published, want at least %d", name, st.Published[name], load.Keys)
		}
	}
}

// A comparison cut short while the neighbours are still seeding stops
// waiting at once, with the context's error.
func TestAwaitNeighboursStopsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- awaitNeighbours(ctx, make(chan struct{}), time.Hour) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("awaitNeighbours = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("awaitNeighbours did not return after its context ended")
	}
}

// drive closes seeded even when it is stopped before every key was
// published, so nobody waits on it for ever.
func TestNeighboursSeededClosesWhenCutShort(t *testing.T) {
	n, err := startNeighbours()
	if err != nil {
		t.Fatal(err)
	}
	defer n.close()
	ctx, cancel := context.WithCancel(context.Background())
	seeded := make(chan struct{})
	stats := make(chan *NeighbourStats, 1)
	go func() {
		stats <- n.drive(ctx, &recordingPublisher{}, "", "short", neighbourLoad{Rate: 1, Keys: 1000}, true, seeded)
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	<-stats
	select {
	case <-seeded:
	case <-time.After(5 * time.Second):
		t.Fatal("seeded still open after drive returned")
	}
}
