// Package service is the worker process: it wires PostgreSQL, Temporal, the
// signer, the address guard, the Delivery workflow and its activities, the
// relay and the HTTP endpoints together, and runs them until stopped.
package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"herald/activities"
	"herald/config"
	"herald/internal/tracing"
	"herald/internal/zaplog"
	"herald/metrics"
	"herald/netguard"
	"herald/relay"
	"herald/signing"
	"herald/store"
	"herald/workflows"
)

// Service is a running worker process.
type Service struct {
	cfg      config.Worker
	log      *zap.Logger
	Store    *store.Store
	Temporal client.Client
	Keys     *signing.KeySet
	Metrics  *metrics.Metrics
	Relay    *relay.Relay
	worker   worker.Worker
	listener net.Listener
	server   *http.Server
	api      *apiServer // nil when HERALD_API_ADDR is empty

	metricsCloser io.Closer
}

// Option changes how New builds a Service.
type Option func(*Service)

// WithListener makes the HTTP server (health, metrics, JWKS) serve on ln
// instead of listening on HERALD_HTTP_ADDR. Run closes ln when it stops (an
// error of New leaves it to the caller); a caller that restarts a worker on
// one port passes a listener whose Close leaves the socket open (tests keep
// a worker's JWKS URL so).
func WithListener(ln net.Listener) Option {
	return func(s *Service) { s.listener = ln }
}

// New connects to PostgreSQL (applying migrations) and Temporal, loads the
// signing keys and builds every part; Run starts them.
func New(ctx context.Context, cfg config.Worker, log *zap.Logger, opts ...Option) (*Service, error) {
	cfg = cfg.WithDefaults()
	s := &Service{cfg: cfg, log: log, Metrics: metrics.New()}
	for _, o := range opts {
		o(s)
	}
	keys, err := signing.LoadKeys(cfg.SigningKey)
	if err != nil {
		return nil, fmt.Errorf("signing keys: %w", err)
	}
	s.Keys = keys
	box, err := signing.LoadSecretBox(cfg.SecretKey)
	if err != nil {
		return nil, err
	}
	buildID := cfg.BuildID
	if buildID == "" {
		if buildID, err = processBuildID(); err != nil {
			return nil, fmt.Errorf("the Temporal worker's build id: %w (set HERALD_BUILD_ID)", err)
		}
	}
	if s.Store, err = store.Open(ctx, cfg.DatabaseURL, store.Options{MaxConns: int32(cfg.DBMaxConns), MinConns: int32(cfg.DBMinConns)}); err != nil {
		return nil, err
	}
	if applied, err := s.Store.Migrate(ctx); err != nil {
		s.Store.Close()
		return nil, err
	} else if len(applied) > 0 {
		log.Info("applied migrations", zap.Ints("versions", applied))
	}
	// Herald's own app and its operational events (herald.key.failed, ...);
	// writes nothing when already declared.
	if res, err := s.Store.EnsureHeraldApp(ctx); errors.Is(err, store.ErrHeraldAppTaken) {
		// A user's app of that name from before: not taken over; the
		// worker runs, without operational events.
		log.Warn("operational events are off", zap.Error(err))
	} else if err != nil {
		s.Store.Close()
		return nil, err
	} else if !res.Unchanged {
		log.Info("declared herald's operational events", zap.Int("added", res.DeclarationsAdded),
			zap.Int("updated", res.DeclarationsUpdated))
	}
	copts, err := cfg.TemporalClientOptions()
	if err != nil {
		s.Store.Close()
		return nil, err
	}
	handler, closer := s.Metrics.TemporalHandler()
	s.metricsCloser = closer
	copts.Logger = zaplog.ForTemporal(log.Named("temporal"))
	copts.MetricsHandler = handler
	// Tracing (when enabled) follows an event's trace through its signal
	// into the Delivery workflow and its activities.
	ics, err := tracing.TemporalInterceptors()
	if err != nil {
		s.Store.Close()
		return nil, err
	}
	copts.Interceptors = append(copts.Interceptors, ics...)
	s.Temporal, err = client.Dial(copts)
	if err != nil {
		s.Store.Close()
		return nil, fmt.Errorf("connect to Temporal at %s: %w", cfg.TemporalAddress, err)
	}

	guard := netguard.New(cfg.Allow)
	poster := &activities.Poster{
		Client:    netguard.NewHTTPClient(guard, netguard.ClientOptions{Proxy: cfg.Proxy}),
		Signer:    signerAdapter{s: keys.Signer(), issuer: cfg.Issuer},
		Symmetric: newSecretSigner(s.Store, box),
	}
	if !cfg.NoV1A {
		poster.Webhook = signerAdapter{s: keys.Signer(), issuer: cfg.Issuer}
	}
	acts := &activities.Activities{
		Poster:   poster,
		Store:    s.Store,
		Signaler: s.Temporal,
		Observer: s.Metrics,
		Waker:    newWaker(s.Temporal, log.Named("waker")),
		Logger:   log.Named("activities"),
		// A Retention run never deletes anything newer than this, whatever
		// its input (docs/design.md#retention).
		Retention: cfg.Retention,
	}
	// Each cached key workflow costs some 50 KB; the cache bounds the
	// worker's memory however many keys are live (an evicted workflow is
	// replayed from its short history when it next has work).
	worker.SetStickyWorkflowCacheSize(cfg.WorkflowCacheSize)
	// The build id this process's worker stamps its tasks with, which the
	// relay's starts name in BuildIds (relay.Relay.BuildID). Process-wide:
	// the SDK reads it as worker.New builds its pollers.
	worker.SetBinaryChecksum(buildID)
	s.worker = worker.New(s.Temporal, workflows.TaskQueue, workerOptions(cfg))
	settings := cfg.DeliveryParams()
	workflows.Register(s.worker, acts, func() (workflows.Params, error) { return settings, nil })

	s.Relay = &relay.Relay{
		Store:    s.Store,
		Temporal: s.Temporal,
		Logger:   log.Named("relay"),
		Params:   cfg.DeliveryParams(),
		Observer: s.Metrics,
		// Each failed signal and each event given up on is counted.
		MaxAttempts: cfg.RelayMaxAttempts,
		IdlePoll:    cfg.RelayPollInterval,
		// The worker's own client: an eager start hands the new workflow's
		// first task to this worker.
		StartNewKeys: !cfg.RelaySignalOnly,
		// No more runs waiting idle than the worker's cache holds.
		IdleRuns: cfg.WorkflowCacheSize,
		OnRound:  func(r relay.Round) { s.Metrics.RelayRound(r.Failed, r.Dead) },
		// The worker's build id: an eager start's first task goes to it.
		BuildID: buildID,
	}
	s.Metrics.RelayLag(s.Store.RelayLag)
	s.Metrics.RelayPartitions(func() int { return len(s.Relay.Partitions()) })
	s.Metrics.Held(s.Store.HeldPerSubscription)
	s.Metrics.Unreachable(s.Store.UnreachableApps)
	// A started worker polls only while Temporal answers.
	s.Metrics.ReadyCheck(func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := s.Temporal.CheckHealth(ctx, &client.CheckHealthRequest{})
		return err == nil
	})

	given := s.listener != nil
	if !given {
		if s.listener, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			s.close()
			return nil, fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
		}
	}
	s.server = &http.Server{Handler: s.routes(), ReadHeaderTimeout: 10 * time.Second}
	if err := s.newAPI(ctx, box); err != nil {
		if !given {
			_ = s.listener.Close()
		}
		s.close()
		return nil, err
	}
	return s, nil
}

// Pollers per worker process: a fixed number of long polls for workflow
// tasks and for activity tasks; the counts never change at run time. On a
// Temporal server without poller autoscaling support (the 1.29 dev server
// among them) pollers the SDK scaled down left workflow tasks waiting on the
// sticky queue until their 5 s schedule-to-start timeout, and let started
// workflow tasks run into their 10 s start-to-close timeout, which cut
// Herald below the bare Temporal shape's throughput (issue 13). The
// workflow task pollers are nonetheless the SDK's autoscaling behaviour,
// pinned at WorkflowTaskPollers (see workerOptions): only that behaviour
// gives the task queue and the sticky queue separate pollers. Eight
// workflow pollers, not two: with two, after a worker was killed the keys'
// workflow tasks waited up to 81 s on the task queue in the chaos suite (3
// of 3 runs failed); with eight the same suite passed with no wait beyond
// its bound. docs/production.md quotes both counts
// (deploy/docfigures_test.go checks them).
const (
	WorkflowTaskPollers = 8
	ActivityTaskPollers = 2
)

// Bounds of a graceful stop (Run), which docs/production.md's grace period
// and docker-compose.yml's stop_grace_period must cover (checked by
// deploy/grace_test.go).
const (
	// HTTPShutdownTimeout bounds the HTTP servers' shutdown (the endpoints
	// and the publishing API, together).
	HTTPShutdownTimeout = 10 * time.Second
	// relayStopTimeout bounds the relay's stop: giving its partitions back
	// and closing its connection take up to 5 s each (store.Member.Leave)
	// when the database does not answer; milliseconds when it does.
	relayStopTimeout = 10 * time.Second
	// workerStopMargin is added to the delivery timeout for the Temporal
	// worker's stop.
	workerStopMargin = 5 * time.Second
)

// StopTimeout is the longest a graceful stop of a service run with cfg
// takes: the HTTP servers' shutdown, the relay's, then the Temporal worker's,
// one after the other.
func StopTimeout(cfg config.Worker) time.Duration {
	return HTTPShutdownTimeout + relayStopTimeout + workerOptions(cfg).WorkerStopTimeout
}

// workerOptions are the Temporal worker's options for cfg.
func workerOptions(cfg config.Worker) worker.Options {
	return worker.Options{
		// On SIGTERM, deliveries in flight get this long to finish before
		// they are cancelled (and retried by Temporal elsewhere).
		WorkerStopTimeout: cfg.DeliveryTimeout + workerStopMargin,
		// Workflow tasks: the SDK's autoscaling behaviour pinned at a fixed
		// count, for its separate pollers of the normal and the sticky queue.
		// With a fixed count (MaxConcurrentWorkflowTaskPollers) the SDK runs
		// one mixed pool that polls only the sticky queue while the server
		// reports a sticky backlog: under a steady stream a worker's backlog
		// did not empty for tens of seconds, and the workflow tasks of keys
		// whose worker had died waited 40-75 s on the normal queue (the
		// chaos suite with eager activity execution on failed 3 of 3 runs;
		// with separate pollers it passed).
		WorkflowTaskPollerBehavior: worker.NewPollerBehaviorAutoscaling(worker.PollerBehaviorAutoscalingOptions{
			InitialNumberOfPollers: WorkflowTaskPollers, MinimumNumberOfPollers: WorkflowTaskPollers,
			MaximumNumberOfPollers: WorkflowTaskPollers,
		}),
		MaxConcurrentActivityTaskPollers: ActivityTaskPollers,
	}
}

// Addr is the address the HTTP server listens on.
func (s *Service) Addr() string { return s.listener.Addr().String() }

// Run starts the worker, the relay and the HTTP server, and stops them
// gracefully when ctx ends: the HTTP server first, then the relay, then the
// Temporal worker (which lets running activities finish).
func (s *Service) Run(ctx context.Context) error {
	defer s.close()
	defer s.closeAPI()
	if err := s.worker.Start(); err != nil {
		_ = s.listener.Close() // as when Run ends: the HTTP server never served it
		return fmt.Errorf("start Temporal worker: %w", err)
	}
	s.Metrics.SetReady(true)
	if err := s.ensureRetentionSchedule(ctx); err != nil {
		s.log.Warn("retention schedule", zap.Error(err))
	}
	var wg sync.WaitGroup
	relayCtx, stopRelay := context.WithCancel(context.Background())
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = s.Relay.Run(relayCtx)
	}()
	httpErr := make(chan error, 1)
	go func() {
		defer wg.Done()
		if err := s.server.Serve(s.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			httpErr <- err
		}
	}()
	s.serveAPI(&wg, httpErr)
	s.log.Info("worker running", zap.String("http", s.Addr()), zap.String("temporal", s.cfg.TemporalAddress),
		zap.String("taskQueue", workflows.TaskQueue), zap.Strings("signingKeys", s.Keys.Kids()))

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-httpErr:
	}
	s.log.Info("stopping")
	s.Metrics.SetReady(false)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), HTTPShutdownTimeout)
	defer cancel()
	s.stopAPI(shutdownCtx)
	_ = s.server.Shutdown(shutdownCtx)
	stopRelay()
	wg.Wait()
	s.worker.Stop()
	s.log.Info("stopped")
	return runErr
}

func (s *Service) close() {
	if s.Temporal != nil {
		s.Temporal.Close()
	}
	if s.Store != nil {
		s.Store.Close()
	}
	if s.metricsCloser != nil {
		_ = s.metricsCloser.Close()
	}
}

func (s *Service) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", s.Metrics.Handler())
	mux.Handle("GET /.well-known/jwks.json", signing.JWKSHandler(s.Keys))
	return mux
}

// readyz answers 200 only while both PostgreSQL and Temporal answer.
func (s *Service) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	checks := map[string]string{"database": "ok", "temporal": "ok"}
	status := http.StatusOK
	if err := s.Store.Ping(ctx); err != nil {
		checks["database"] = err.Error()
		status = http.StatusServiceUnavailable
	}
	if _, err := s.Temporal.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		checks["temporal"] = err.Error()
		status = http.StatusServiceUnavailable
	}
	// relayLeader: the relay leads at least one partition of the log;
	// relayPartitions: how many (of store.RelayPartitions, among all relays).
	led := len(s.Relay.Partitions())
	checks["relayLeader"] = fmt.Sprint(led > 0)
	checks["relayPartitions"] = fmt.Sprint(led)
	writeJSON(w, status, checks)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
