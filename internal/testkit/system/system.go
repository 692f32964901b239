// Package system is a running Herald for a test: a worker service in its
// own database schema and Temporal namespace, serving on a listener the
// test keeps across restarts; a verifying recording subscriber; the one set
// of fixture manifests; a publisher; and the environment of the starter
// CLI. The e2e, cli and api tests share it.
package system

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"herald/config"
	"herald/internal/testenv"
	"herald/internal/testkit"
	"herald/publish"
	"herald/service"
	"herald/subscriber"
)

// System is one running Herald for a test: a worker service in its own
// database schema and Temporal namespace (testenv.WorkerConfig) serving on
// a Listener the test keeps, a verifying recording subscriber that every
// fixture app has as its endpoint, and a publisher.
type System struct {
	t testing.TB
	// Cfg is the worker's configuration; Restart starts it again with Cfg.
	Cfg config.Worker
	// Svc is the running worker service (a new one after Restart).
	Svc *service.Service
	// Sub records what the subscriber accepted and refused.
	Sub *Recorder
	// SubURL is the subscriber's base URL, the fixture apps' endpoint.
	SubURL string
	// Publisher publishes through Svc's store.
	Publisher *publish.Publisher

	ln       *testkit.Listener
	logLevel zapcore.Level
	stop     func()
}

// Option changes how Start sets a System up.
type Option func(*System)

// Config lets fn change the worker's configuration before it starts.
func Config(fn func(*config.Worker)) Option { return func(s *System) { fn(&s.Cfg) } }

// API turns the publishing API on, on a free loopback port (Svc.APIAddr;
// a Restart listens on a new one).
func API() Option { return func(s *System) { s.Cfg.APIAddr = "127.0.0.1:0" } }

// Schedule sets the worker's retry schedule (testenv's default is two
// retries of 200 ms).
func Schedule(d ...time.Duration) Option { return func(s *System) { s.Cfg.Schedule = d } }

// DBConns sets the worker's PostgreSQL pool size.
func DBConns(n int) Option { return func(s *System) { s.Cfg.DBMaxConns = n } }

// LogLevel is the lowest level of the worker's log lines that reach the
// test's log (default warn).
func LogLevel(l zapcore.Level) Option { return func(s *System) { s.logLevel = l } }

// Start starts a System; the test's cleanup stops it. The fixture
// manifests are not applied: Apply does, or a test applies them through
// the CLI (WriteManifests).
func Start(t testing.TB, opts ...Option) *System {
	t.Helper()
	s := &System{t: t, Cfg: testenv.WorkerConfig(t), Sub: NewRecorder(), logLevel: zapcore.WarnLevel}
	for _, o := range opts {
		o(s)
	}
	s.ln = testkit.Listen(t)
	s.Cfg.HTTPAddr = s.ln.Addr().String()
	h, err := subscriber.New(subscriber.Config{
		Audiences:         []string{"app:billing", "app:audit-log"},
		JWKSURL:           s.WorkerURL() + "/.well-known/jwks.json",
		AllowLoopbackHTTP: true, // the worker serves its JWKS on loopback
		OnFailure:         s.Sub.onFailure,
	}, s.Sub.Handle)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	s.SubURL = srv.URL
	t.Cleanup(srv.Close)
	s.run()
	t.Cleanup(func() { s.stop() })
	return s
}

// run starts the worker service with s.Cfg on a new view of the listener.
func (s *System) run() {
	s.t.Helper()
	s.Svc, s.stop = RunWorker(s.t, s.Cfg, s.logLevel, service.WithListener(s.ln.View()))
	s.Publisher = publish.New(s.Svc.Store, publish.Options{})
}

// RunWorker starts a worker service with cfg in the background, logging
// from level on into the test's log, and returns it and a function that
// stops it gracefully and waits for it (the caller's cleanup must call it).
func RunWorker(t testing.TB, cfg config.Worker, level zapcore.Level, opts ...service.Option) (*service.Service, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := service.New(ctx, cfg, zaptest.NewLogger(t, zaptest.Level(level)), opts...)
	if err != nil {
		cancel()
		t.Fatalf("start the worker: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := svc.Run(ctx); err != nil {
			t.Errorf("worker: %v", err) // Errorf: not the test's goroutine
		}
	}()
	return svc, func() {
		cancel()
		<-done
	}
}

// Restart stops the worker gracefully and starts it again with Cfg, on the
// same address.
func (s *System) Restart() {
	s.t.Helper()
	s.stop()
	s.run()
}

// Stop stops the worker (the subscriber keeps running); Restart starts it
// again. Stopping a stopped worker does nothing. The worker's address keeps
// accepting connections (they wait for a restart), so a test of what
// clients see of a dead worker points them at testkit.ReservePort instead.
func (s *System) Stop() {
	s.stop()
	s.stop = func() {}
}

// WorkerURL is the worker's HTTP base URL (health, metrics, JWKS).
func (s *System) WorkerURL() string { return "http://" + s.ln.Addr().String() }

// Apply applies the fixture manifests through the store.
func (s *System) Apply() {
	s.t.Helper()
	for _, m := range Manifests(s.SubURL) {
		if err := m.Validate(); err != nil {
			s.t.Fatal(err)
		}
		if _, err := s.Svc.Store.ApplyManifest(context.Background(), m, "testkit"); err != nil {
			s.t.Fatal(err)
		}
	}
}

// Dial connects a Temporal client to the System's namespace; the test's
// cleanup closes it.
func (s *System) Dial() client.Client {
	s.t.Helper()
	c, err := client.Dial(client.Options{HostPort: s.Cfg.TemporalAddress, Namespace: s.Cfg.TemporalNamespace})
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(c.Close)
	return c
}

// Terminate terminates the running run of workflow id, as an operator
// would, and returns its run id once the server reports it terminated.
func Terminate(t testing.TB, c client.Client, id string) string {
	t.Helper()
	ctx := context.Background()
	d, err := c.DescribeWorkflow(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	run := d.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	if err := c.TerminateWorkflow(ctx, id, run, "test: an operator terminates the key's workflow"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the run of "+id+" to be terminated", func() bool {
		d, err := c.DescribeWorkflow(ctx, id, run)
		return err == nil && d.RawResponse.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED
	})
	return run
}

// Env is the environment the starter CLI needs to work on this System.
func (s *System) Env() map[string]string {
	return map[string]string{
		"HERALD_DATABASE_URL":   s.Cfg.DatabaseURL,
		"TEMPORAL_ADDRESS":      s.Cfg.TemporalAddress,
		"TEMPORAL_NAMESPACE":    s.Cfg.TemporalNamespace,
		"HERALD_WORKER_URL":     s.WorkerURL(),
		"HERALD_ALLOW_NETWORKS": "127.0.0.0/8",
		"USER":                  "tester",
	}
}

// DataMarker is in the data of every event Publish publishes; tests check
// that Temporal histories never hold it.
const DataMarker = "marker-of-event-data-7f3c"

// Publish publishes event n (data {"name": DataMarker, "n": n}) of a
// contacts.person.updated subject key.
func (s *System) Publish(subject string, n int) publish.Result {
	s.t.Helper()
	res, err := s.Publisher.Publish(context.Background(), PersonRequest(subject, fmt.Sprintf(`{"name":%q,"n":%d}`, DataMarker, n)))
	if err != nil {
		s.t.Fatalf("publish %s #%d: %v", subject, n, err)
	}
	return res
}

// PersonRequest is a contacts.person.updated@1 event of a subject key.
func PersonRequest(subject, data string) publish.Request {
	return publish.Request{App: "contacts", Type: PersonUpdated, Version: 1, Subject: subject,
		Data: json.RawMessage(data)}
}
