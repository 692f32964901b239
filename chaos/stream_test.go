package chaos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"herald/manifest"
	"herald/publish"
	"herald/store"
)

// The apps of the suite: contacts publishes, billing and audit-log subscribe.
const (
	eventType = "contacts.person.updated"
)

// subscriptionIDs are the subscriptions every event must reach.
var subscriptionIDs = []string{
	manifest.SubscriptionID("audit-log", eventType, 1),
	manifest.SubscriptionID("billing", eventType, 1),
}

// applyManifests declares the event and both subscriptions, all pointing at
// the recording subscriber.
func applyManifests(ctx context.Context, st *store.Store, endpoint string) error {
	schema := json.RawMessage(`{"type":"object","required":["name","n"],"properties":{"name":{"type":"string"},"n":{"type":"integer"}}}`)
	ms := []*manifest.Manifest{
		{App: "contacts", Endpoint: endpoint, Events: []manifest.Event{
			{Name: "person.updated", Version: 1, Subject: "person", DataSchema: schema},
		}},
		{App: "billing", Endpoint: endpoint, Subscribes: []manifest.Subscription{{Type: eventType, Version: 1}}},
		{App: "audit-log", Endpoint: endpoint, Subscribes: []manifest.Subscription{{Type: eventType, Version: 1}}},
	}
	for _, m := range ms {
		if err := m.Validate(); err != nil {
			return fmt.Errorf("manifest %s: %w", m.App, err)
		}
		if _, err := st.ApplyManifest(ctx, m, "chaos"); err != nil {
			return fmt.Errorf("apply manifest %s: %w", m.App, err)
		}
	}
	subs, err := st.ListSubscriptions(ctx, "")
	if err != nil {
		return err
	}
	active := 0
	for _, s := range subs {
		if s.State == store.StateActive {
			active++
		}
	}
	if active != len(subscriptionIDs) {
		return fmt.Errorf("%d active subscriptions after applying, want %d: %+v", active, len(subscriptionIDs), subs)
	}
	return nil
}

// published is one accepted event.
type published struct {
	Key string
	N   int // the event's number within its key, from 1
	ID  string
	Seq int64
	At  time.Time // when Publish returned
}

// stream publishes a steady round-robin stream of events over many keys
// through publish.Publisher, one event at a time so that each key's events
// are accepted in order. A publish that fails (the database restarting) is
// retried with the same event id until it is accepted: publishing is
// idempotent by id, so an attempt that committed before its answer was lost
// is not published twice.
type stream struct {
	pub  *publish.Publisher
	keys []string
	rate float64 // events per second

	mu      sync.Mutex
	events  []published
	retries int
	next    map[string]int
}

func newStream(st *store.Store, keys int, rate float64) *stream {
	s := &stream{pub: publish.New(st, publish.Options{}), rate: rate, next: map[string]int{}}
	for i := range keys {
		s.keys = append(s.keys, fmt.Sprintf("person-%02d", i))
	}
	return s
}

// run publishes until ctx ends or the duration is over; it returns the first
// error that retrying could not overcome.
func (s *stream) run(ctx context.Context, d time.Duration) error {
	end := time.Now().Add(d)
	tick := time.NewTicker(time.Duration(float64(time.Second) / s.rate))
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if time.Now().After(end) {
			return nil
		}
		if err := s.publishNext(ctx, s.keys[i%len(s.keys)]); err != nil {
			return err
		}
	}
}

func (s *stream) publishNext(ctx context.Context, key string) error {
	s.mu.Lock()
	s.next[key]++
	n := s.next[key]
	s.mu.Unlock()
	req := publish.Request{
		ID: uuid.Must(uuid.NewV7()).String(), App: "contacts", Type: eventType, Version: 1, Subject: key,
		Data: json.RawMessage(fmt.Sprintf(`{"name":"p","n":%d}`, n)),
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		res, err := s.pub.Publish(ctx, req)
		if err == nil {
			s.mu.Lock()
			s.events = append(s.events, published{Key: key, N: n, ID: res.ID, Seq: res.Seq, At: time.Now()})
			s.mu.Unlock()
			return nil
		}
		if _, ok := publish.IsRejection(err); ok {
			return fmt.Errorf("publish %s #%d rejected: %w", key, n, err)
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("publish %s #%d: %w", key, n, err)
		}
		s.mu.Lock()
		s.retries++
		s.mu.Unlock()
		time.Sleep(200 * time.Millisecond)
	}
}

// accepted returns every accepted event so far.
func (s *stream) accepted() []published {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]published(nil), s.events...)
}

func (s *stream) ids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.events))
	for i, e := range s.events {
		out[i] = e.ID
	}
	return out
}
