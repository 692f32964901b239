package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"herald/config"
	"herald/internal/testenv"
	"herald/manifest"
	"herald/publish"
	"herald/service"
	"herald/subscriber"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// system is one running Herald: worker service, subscriber, publisher.
type system struct {
	t         *testing.T
	cfg       config.Worker
	svc       *service.Service
	sub       *recorder
	subURL    string
	publisher *publish.Publisher
	// stopWorker stops the running worker service.
	stopWorker func()
}

// start brings up a worker in its own database schema and Temporal
// namespace, and a verifying subscriber.
func start(t *testing.T, tune func(*config.Worker)) *system {
	t.Helper()
	cfg := testenv.WorkerConfig(t)
	if tune != nil {
		tune(&cfg)
	}
	// A fixed port, so that a restarted worker keeps its JWKS URL.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTPAddr = ln.Addr().String()
	ln.Close()
	s := &system{t: t, cfg: cfg, sub: newRecorder()}
	s.run()
	h, err := subscriber.New(subscriber.Config{
		Audiences:         []string{"app:billing", "app:audit-log"},
		JWKSURL:           "http://" + cfg.HTTPAddr + "/.well-known/jwks.json",
		AllowLoopbackHTTP: true, // the worker serves its JWKS on loopback
		OnFailure:         s.sub.onFailure,
	}, s.sub.handle)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	s.subURL = srv.URL
	t.Cleanup(func() {
		s.stopWorker()
		srv.Close()
	})
	return s
}

// run starts the worker service with s.cfg.
func (s *system) run() {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	log := zaptest.NewLogger(s.t, zaptest.Level(zap.WarnLevel))
	svc, err := service.New(ctx, s.cfg, log)
	if err != nil {
		cancel()
		s.t.Fatalf("start service: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := svc.Run(ctx); err != nil {
			s.t.Errorf("service: %v", err)
		}
	}()
	s.svc = svc
	s.publisher = publish.New(svc.Store, publish.Options{})
	s.stopWorker = func() {
		cancel()
		<-done
	}
}

// restart stops the worker gracefully and starts it again with s.cfg.
func (s *system) restart() {
	s.t.Helper()
	s.stopWorker()
	s.run()
}

// apply applies the example-like manifests pointing at the test subscriber.
func (s *system) apply() {
	s.t.Helper()
	schema := json.RawMessage(`{"type":"object","required":["name","n"],"properties":{"name":{"type":"string"},"n":{"type":"integer"}}}`)
	ms := []*manifest.Manifest{
		{App: "contacts", Endpoint: s.subURL, Events: []manifest.Event{
			{Name: "person.updated", Version: 1, Subject: "person", DataSchema: schema},
		}},
		{App: "billing", Endpoint: s.subURL, Subscribes: []manifest.Subscription{{Type: "contacts.person.updated", Version: 1}}},
		{App: "audit-log", Endpoint: s.subURL, Subscribes: []manifest.Subscription{{Type: "contacts.person.updated", Version: 1}}},
	}
	for _, m := range ms {
		if err := m.Validate(); err != nil {
			s.t.Fatal(err)
		}
		if _, err := s.svc.Store.ApplyManifest(context.Background(), m, "e2e"); err != nil {
			s.t.Fatal(err)
		}
	}
}

// publish publishes event n of a subject key.
func (s *system) publish(subject string, n int) publish.Result {
	s.t.Helper()
	res, err := s.publisher.Publish(context.Background(), publishRequest(subject, fmt.Sprintf(`{"name":%q,"n":%d}`, dataMarker, n)))
	if err != nil {
		s.t.Fatalf("publish %s #%d: %v", subject, n, err)
	}
	return res
}

// dataMarker is in every event's data; Temporal histories must never hold it.
const dataMarker = "marker-of-event-data-7f3c"

// publishRequest is a contacts.person.updated event of a subject key.
func publishRequest(subject, data string) publish.Request {
	return publish.Request{App: "contacts", Type: "contacts.person.updated", Version: 1, Subject: subject,
		Data: json.RawMessage(data)}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// arrival is one delivery the subscriber accepted.
type arrival struct {
	N       int
	Attempt int
	ID      string
}

// recorder is the subscriber's handler: it records accepted deliveries per
// (audience, subject) and can be told to fail some.
type recorder struct {
	mu       sync.Mutex
	got      map[string][]arrival
	failures []subscriber.Failure
	// reject, when it returns a non-nil error for a delivery, answers with it.
	reject func(audience, subject string, n int) error
}

func newRecorder() *recorder { return &recorder{got: map[string][]arrival{}} }

func (r *recorder) handle(_ context.Context, ev subscriber.Event) error {
	var data struct {
		N int `json:"n"`
	}
	if err := ev.DecodeData(&data); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reject != nil {
		if err := r.reject(ev.Audience, ev.Subject, data.N); err != nil {
			return err
		}
	}
	k := ev.Audience + "|" + ev.Subject
	r.got[k] = append(r.got[k], arrival{N: data.N, Attempt: ev.Attempt, ID: ev.ID})
	return nil
}

func (r *recorder) onFailure(_ *http.Request, f subscriber.Failure) {
	r.mu.Lock()
	r.failures = append(r.failures, f)
	r.mu.Unlock()
}

func (r *recorder) setReject(fn func(audience, subject string, n int) error) {
	r.mu.Lock()
	r.reject = fn
	r.mu.Unlock()
}

func (r *recorder) arrivals(audience, subject string) []arrival {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]arrival(nil), r.got["app:"+audience+"|"+subject]...)
}

func (r *recorder) count(audience, subject string) int { return len(r.arrivals(audience, subject)) }

// verificationFailures are the 401/400 answers: forged or broken deliveries.
func (r *recorder) verificationFailures() []subscriber.Failure {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []subscriber.Failure
	for _, f := range r.failures {
		if f.Status == http.StatusUnauthorized || f.Status == http.StatusBadRequest {
			out = append(out, f)
		}
	}
	return out
}
