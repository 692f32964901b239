package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"herald/api"
	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/store"
)

// slowSignals is a Temporal client whose SignalWithStart takes delay more,
// counting the calls in flight at once.
type slowSignals struct {
	api.TemporalClient
	delay          time.Duration
	inFlight, most atomic.Int64
}

func (s *slowSignals) SignalWithStartWorkflow(ctx context.Context, id, name string, arg any,
	opts client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for m := s.most.Load(); n > m && !s.most.CompareAndSwap(m, n); m = s.most.Load() {
	}
	time.Sleep(s.delay)
	return s.TemporalClient.SignalWithStartWorkflow(ctx, id, name, arg, opts, wf, args...)
}

// TestReplayWindowKeysInParallelWithinABudget: a replay window's keys are
// signalled several at once (a window of 10,000 one-event keys took one
// signal after another and could outrun the server's write timeout), and
// keys not begun within the replay's budget are answered skipped, with
// queued below events, rather than cut off mid-answer.
func TestReplayWindowKeysInParallelWithinABudget(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	const keys = 40
	for i := range keys {
		s.Publish(fmt.Sprintf("replay-%02d", i), 1)
	}
	ops := s.operatorToken("ops")
	testkit.Eventually(t, 60*time.Second, "every key delivered to billing", func() bool {
		page, err := s.store.ListDeliveries(context.Background(), store.DeliveryFilter{
			Subscription: system.BillingSub, Statuses: []string{"delivered"}, Limit: 100})
		return err == nil && page.Total >= keys
	})
	window := `{"subscription":"` + system.BillingSub + `","since":"` + time.Now().Add(-time.Hour).UTC().Format(time.RFC3339) + `"}`
	replay := func(h http.Handler) api.ReplayResult {
		t.Helper()
		r := httptest.NewRequest(http.MethodPost, "/v1/ops/subscriptions/replay", strings.NewReader(window))
		r.RemoteAddr = "192.0.2.1:1"
		r.Header.Set("Authorization", "Bearer "+ops)
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("replay: %d %s", w.Code, w.Body)
		}
		var out api.ReplayResult
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
		return out
	}

	slow := &slowSignals{TemporalClient: s.Dial(), delay: 50 * time.Millisecond}
	h := api.New(s.store, api.Options{Temporal: slow, Namespace: s.Cfg.TemporalNamespace})
	out := replay(h)
	if out.Events != keys || out.Queued != keys {
		t.Fatalf("replay: %d of %d events queued: %+v", out.Queued, out.Events, out.Keys)
	}
	if m := slow.most.Load(); m < 2 || m > 16 {
		t.Fatalf("at most %d signals in flight at once, want between 2 and 16", m)
	}

	// A budget that runs out: the keys begun are queued whole, the others
	// skipped, and the answer says so.
	slow.delay = 300 * time.Millisecond
	api.SetReplayBudget(h, 100*time.Millisecond)
	out = replay(h)
	queued, skipped := 0, 0
	for _, k := range out.Keys {
		switch k.Result {
		case "queued":
			queued += k.Events
		case "skipped":
			skipped += k.Events
		default:
			t.Errorf("key %s: result %q", k.Subject, k.Result)
		}
	}
	if out.Queued != queued || queued+skipped != keys || skipped == 0 || queued == 0 {
		t.Fatalf("replay over its budget: queued %d (keys say %d), skipped %d, of %d", out.Queued, queued, skipped, keys)
	}
}

// blockedSignals is a Temporal client whose SignalWithStart waits until
// release is closed (or its context ends), counting the calls begun.
type blockedSignals struct {
	api.TemporalClient
	release chan struct{}
	begun   atomic.Int64
}

func (b *blockedSignals) SignalWithStartWorkflow(ctx context.Context, _, _ string, _ any,
	_ client.StartWorkflowOptions, _ any, _ ...any) (client.WorkflowRun, error) {
	b.begun.Add(1)
	select {
	case <-b.release:
		return nil, errors.New("not sent: the test is over")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestReplaysHoldNoReadSlotWhileTheySignal: a replay reads its window under
// one of the operations API's read slots (the API's connections but one)
// and gives it back before it signals, which may take most of the write
// timeout. Three replays of one app, signalling, leave another app's reads
// their slots, and their own app's: before, they took every read slot and
// every slot of their app until their signals ended.
func TestReplaysHoldNoReadSlotWhileTheySignal(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	s.Publish("replay-slot", 1)
	testkit.Eventually(t, 60*time.Second, "the event delivered to billing", func() bool {
		page, err := s.store.ListDeliveries(context.Background(), store.DeliveryFilter{
			Subscription: system.BillingSub, Statuses: []string{"delivered"}, Limit: 10})
		return err == nil && page.Total >= 1
	})
	// A pool of 4: three read slots, and billing may hold three requests.
	small, err := store.Open(context.Background(), s.Cfg.DatabaseURL, store.Options{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(small.Close)
	blocked := &blockedSignals{TemporalClient: s.Dial(), release: make(chan struct{})}
	t.Cleanup(func() { close(blocked.release) })
	h := api.New(small, api.Options{Temporal: blocked, Namespace: s.Cfg.TemporalNamespace})
	serve := func(method, path, token, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		r.RemoteAddr = "192.0.2.1:1"
		r.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			r.Header.Set("Content-Type", "application/json")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	billing, contacts := s.token("billing", "replays"), s.token("contacts", "reads")
	window := `{"subscription":"` + system.BillingSub + `","since":"` + time.Now().Add(-time.Hour).UTC().Format(time.RFC3339) + `"}`
	for range 3 {
		go serve(http.MethodPost, "/v1/ops/subscriptions/replay", billing, window)
	}
	testkit.Eventually(t, 10*time.Second, "three replays signalling", func() bool { return blocked.begun.Load() >= 3 })

	answered := make(chan int, 1)
	go func() { answered <- serve(http.MethodGet, "/v1/ops/apps", contacts, "").Code }()
	select {
	case code := <-answered:
		if code != http.StatusOK {
			t.Fatalf("contacts' read answered %d, want 200", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("contacts' read waited 5 s behind billing's replays, which were only signalling")
	}
	// Nor do they hold billing's own slots (HERALD_API_APP_CONCURRENCY, 3
	// here): its next read is answered, not 429 app_busy.
	if code := serve(http.MethodGet, "/v1/ops/apps", billing, "").Code; code != http.StatusOK {
		t.Fatalf("billing's read beside its three signalling replays answered %d, want 200", code)
	}
}
