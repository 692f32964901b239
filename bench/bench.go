package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"herald/internal/procstat"
	"herald/internal/zaplog"
	"herald/publish"
	"herald/relay"
	"herald/signing"
	"herald/store"
)

// Config says where the services are and what to measure. The benchmark and
// its smoke test both run through Run with one.
type Config struct {
	// DatabaseURL is a PostgreSQL URL whose connections use a schema of this
	// run alone (search_path); the worker process gets it too.
	DatabaseURL string
	// TemporalAddress and Namespace name the Temporal frontend and a
	// namespace with Herald's search attributes.
	TemporalAddress string
	Namespace       string
	// Server names the Temporal server's configuration in the report.
	Server ServerConfig
	// ModuleRoot is the folder of go.mod; the worker is built from ./workers.
	ModuleRoot string
	// WorkDir holds the worker binary, its signing key and logs; empty means
	// a new temporary folder, removed at the end.
	WorkDir string

	// Shapes are measured in order, each first on the ceiling, then on Herald
	// (HeraldFirst: the other way round).
	Shapes []Shape
	// HeraldFirst measures each shape on Herald before its references (the
	// ceilings, the floors). Measurements on one server are not
	// independent (a server slows as runs accumulate, or a neighbour's
	// load moves), so -repeat alternates the order and each ratio's median
	// has both.
	HeraldFirst bool
	// HeraldOnly skips the ceilings (no ratios), for quicker runs.
	HeraldOnly bool
	// Batched also measures the batched ceiling (one activity per drained
	// batch of a key) before Herald, unless HeraldOnly.
	Batched bool
	// ShapedFloor also measures the shaped floor after the floor (floor.go).
	ShapedFloor bool
	// Steady, when it has keys, is the steady run, measured the same way.
	Steady Shape
	// Noisy are the healthy shapes of the noisy-neighbour comparison
	// (noisyShapes), each measured on Herald alone and then beside
	// misbehaving neighbours; none skips the comparison.
	Noisy []Shape
	// NeighbourLoad is the neighbours' load; zero takes the defaults.
	NeighbourLoad neighbourLoad

	// Timeout bounds the wait for deliveries after publishing ends, per
	// measurement; what has not arrived by then counts as lost.
	Timeout time.Duration
	// Grace is how long the sink keeps listening after the last expected
	// delivery, to catch late duplicates. It is not part of the timing.
	Grace time.Duration
	// KeepRuns leaves the runs of a Herald measurement's keys running once
	// it is measured; by default those that owe nothing are terminated
	// (endRuns), so that their idle timers never fire in a later
	// measurement. (The neighbours' own keys are left running either way.)
	KeepRuns bool
	// WorkerEnv are extra KEY=VALUE settings of Herald's worker process
	// (HERALD_IDLE_TIMEOUT=1s, say), after those the bench sets, so they
	// win: to measure a setting with and without in one run.
	WorkerEnv []string
	// Parallel caps the ceiling's signals in flight (Herald's relay sends up
	// to relay.DefaultParallel at once by default; so does the ceiling).
	Parallel int
	// CeilingPollers, when positive, gives the ceiling's worker that many
	// workflow and activity task pollers; zero keeps the SDK defaults (2 each).
	CeilingPollers int
	// PublishBatch is the number of events per PublishBatch call in bursts.
	PublishBatch int
	// SampleWorkflows is how many workflow histories per measurement are read
	// to count Temporal actions.
	SampleWorkflows int
	// TemporalMetrics is the Prometheus endpoint of the Temporal server
	// (scripts/temporal.sh's or scripts/temporal-pg.sh's DIR/metrics-port),
	// whose counters give the visibility records each measurement wrote;
	// "" for none.
	TemporalMetrics string
	// PIDs names local server processes whose CPU time is reported
	// ("temporal", temporalDB, "postgres"); a missing "temporal" or
	// "postgres" is looked up by listening port.
	PIDs map[string]int
	// Progress receives one line per step; nil discards them.
	Progress io.Writer
}

func (c *Config) defaults() {
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Minute
	}
	if c.Grace < 0 {
		c.Grace = 0
	}
	if c.Parallel <= 0 {
		c.Parallel = relay.DefaultParallel
	}
	if c.PublishBatch <= 0 {
		c.PublishBatch = 100
	}
	if c.SampleWorkflows <= 0 {
		c.SampleWorkflows = 10
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.NeighbourLoad == (neighbourLoad{}) {
		c.NeighbourLoad = defaultNeighbourLoad
	}
}

// Report is the outcome of one run.
type Report struct {
	Started time.Time `json:"started"`
	// Commit is the git commit measured, when known.
	Commit          string    `json:"commit,omitempty"`
	Finished        time.Time `json:"finished"`
	GoVersion       string    `json:"goVersion"`
	CPUs            int       `json:"cpus"`
	TemporalAddress string    `json:"temporalAddress"`
	Namespace       string    `json:"namespace"`
	// Server is the configuration of the Temporal server measured on.
	Server ServerConfig `json:"server"`
	// WorkerEnv are the extra settings Herald's worker ran with.
	WorkerEnv []string `json:"workerEnv,omitempty"`
	// HeraldFirst: each shape was measured on Herald before its references.
	HeraldFirst bool `json:"heraldFirst,omitempty"`
	// KeepRuns: Herald's runs were left to wait idle after their
	// measurement (-keep-runs), not ended (endRuns).
	KeepRuns     bool          `json:"keepRuns,omitempty"`
	Measurements []Measurement `json:"measurements"`
}

// Systems measured.
const (
	SystemCeiling = "ceiling"
	SystemBatched = "batched"
	// SystemFloor is the per-key floor (floor.go), on shapes of one event
	// per key.
	SystemFloor = "floor"
	// SystemShapedFloor is the floor writing the history of a Herald key
	// started for one event (floor.go), when Config.ShapedFloor.
	SystemShapedFloor = "shaped-floor"
	SystemHerald      = "herald"
	// SystemAlone and SystemNeighbours are the noisy-neighbour comparison:
	// the healthy subscriptions on Herald alone, then beside neighbours.
	SystemAlone      = "herald alone"
	SystemNeighbours = "herald + neighbours"
	// SystemCalm is the comparison's control: the healthy subscriptions
	// beside the same neighbours publishing at the same rates, but
	// behaving: their endpoints answer at once, their heavy events are
	// light and let through by the filter at once, and nobody guesses
	// tokens: every neighbour event is delivered promptly. What the
	// healthy shapes lose here is the machine's capacity shared with
	// legitimate work; what they lose beyond it beside the neighbours is
	// what misbehaviour costs them.
	SystemCalm = "herald + calm neighbours"
	// SystemAloneAgain measures each healthy shape alone a second time,
	// right after the first: how far two runs with nothing beside them
	// differ on this machine (the comparison's own noise, and its drift as
	// the server's store grows), against which the neighbours' cost is read.
	SystemAloneAgain = "herald alone again"
)

// Measurement is one shape on one system.
type Measurement struct {
	Shape  Shape  `json:"shape"`
	System string `json:"system"`
	// Deliveries expected and Delivered (first arrivals) at the sink.
	Deliveries int `json:"deliveries"`
	Delivered  int `json:"delivered"`
	// Seconds runs from the start of publishing to the last delivery.
	Seconds float64 `json:"seconds"`
	// PerSecond is deliveries per second over Seconds.
	PerSecond float64 `json:"deliveriesPerSecond"`
	// Ratio is Herald's PerSecond over the ceiling's for the same shape.
	Ratio float64 `json:"ratioToCeiling,omitempty"`
	// RatioBatched is Herald's PerSecond over the batched ceiling's.
	RatioBatched float64 `json:"ratioToBatchedCeiling,omitempty"`
	// RatioFloor is Herald's PerSecond over the per-key floor's.
	RatioFloor float64 `json:"ratioToFloor,omitempty"`
	// RatioShapedFloor is Herald's PerSecond over the shaped floor's.
	RatioShapedFloor float64 `json:"ratioToShapedFloor,omitempty"`
	// LatencyMS is publish→delivery: from the return of Publish (Herald) or
	// SignalWithStartWorkflow (ceiling) to the sink's first receipt.
	LatencyMS  Latency `json:"latencyMs"`
	Lost       int     `json:"lost"`
	OutOfOrder int     `json:"outOfOrder"`
	Duplicates int     `json:"duplicates"`
	Stray      int     `json:"stray"`
	// WorkerPeakRSSMB is the Herald worker process's VmHWM; the worker is
	// started afresh for every Herald measurement.
	WorkerPeakRSSMB float64 `json:"workerPeakRssMb,omitempty"`
	// PostgresMB is the size of Herald's tables (indexes and TOAST
	// included) after a Herald measurement, and PostgresGrowthMB how much
	// they grew during it.
	PostgresMB       float64 `json:"postgresMb,omitempty"`
	PostgresGrowthMB float64 `json:"postgresGrowthMb,omitempty"`
	// RunsEnded counts the runs of a Herald measurement's keys still open
	// once it was measured, which the bench then terminated (endRuns);
	// RunsLeft those it left running (a key that owes an event, a
	// termination that failed).
	RunsEnded int `json:"runsEnded,omitempty"`
	RunsLeft  int `json:"runsLeft,omitempty"`
	// CPUSeconds per process over the measurement: bench (this process: sink,
	// publisher or the ceiling's worker and driver), worker, temporal,
	// temporal-db (when named), postgres.
	CPUSeconds map[string]float64 `json:"cpuSeconds"`
	// MachineIdle is the share of the machine's CPU time that was idle
	// (iowait included), in percent, over the same window as CPUSeconds:
	// whether the machine had CPU to spare while the measurement ran, or
	// something other than its CPUs set the pace. Absent when /proc/stat
	// could not be read.
	MachineIdle *float64 `json:"machineIdlePct,omitempty"`
	// LoadBefore and LoadAfter are the machine's 1-minute load average.
	LoadBefore float64 `json:"loadBefore"`
	LoadAfter  float64 `json:"loadAfter"`
	// Actions counts Temporal history events of a few sampled workflows.
	Actions *Actions `json:"actions,omitempty"`
	// Visibility is the writes the Temporal server made to its visibility
	// store, and its requests to its main store, from the end of the last
	// measurement to the end of this one's grace (the server's counters:
	// all of its namespaces), when its metrics are known.
	Visibility *Visibility `json:"visibility,omitempty"`
	// Tail explains the slowest deliveries of a paced run on Herald.
	Tail []TailEvent `json:"tail,omitempty"`
	// Neighbours is what the neighbours did during a measurement beside
	// them; AloneRatio and AloneP99Ratio compare its deliveries per second
	// and p99 latency with the same shape measured alone in the same run.
	Neighbours    *NeighbourStats `json:"neighbours,omitempty"`
	AloneRatio    float64         `json:"ratioToAlone,omitempty"`
	AloneP99Ratio float64         `json:"p99RatioToAlone,omitempty"`
}

// Latency holds percentiles in milliseconds.
type Latency struct {
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// bench is one run's shared parts.
type bench struct {
	cfg Config
	// visLast is the server's visibility writes at the end of the last
	// measurement (measure.go); measurements run one at a time.
	visLast   *Visibility
	runID     string
	sink      *sink
	store     *store.Store
	publisher *publish.Publisher
	temporal  client.Client
	// neighbours are the noisy-neighbour comparison's misbehaving apps.
	neighbours *neighbours
	workerBin  string
	keyDir     string
	logDir     string
	pids       map[string]int
	// ceilingWorker runs the ceilings' and the floors' workflows.
	ceilingWorker worker.Worker
}

// dropCachedRuns empties this process's cache of workflow runs: the shaped
// floor's runs stay open, as Herald's do, and thousands of them held in
// memory (some 500 MB after shape E) would slow the publisher and the sink
// beside Herald. The worker stops while the cache empties, as the SDK asks.
func (b *bench) dropCachedRuns() error {
	b.ceilingWorker.Stop()
	worker.PurgeStickyWorkflowCache()
	w, err := startCeilingWorker(b.temporal, b.cfg.CeilingPollers)
	if err != nil {
		return err
	}
	b.ceilingWorker = w
	return nil
}

// Run measures every shape of cfg, then the steady run, each on its
// references (the ceiling, the batched ceiling when Batched, the floors on
// shapes of one event per key; none when HeraldOnly) and on Herald, in that
// order or, with HeraldFirst, Herald first. It returns what was measured so
// far along with any error.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	rep := &Report{Started: time.Now().UTC(), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(),
		TemporalAddress: cfg.TemporalAddress, Namespace: cfg.Namespace, Server: cfg.Server, WorkerEnv: cfg.WorkerEnv,
		HeraldFirst: cfg.HeraldFirst, KeepRuns: cfg.KeepRuns}
	b := &bench{cfg: cfg, runID: randomHex(3)}
	cleanup, err := b.setUp(ctx)
	defer cleanup()
	if err != nil {
		return rep, err
	}
	if !cfg.HeraldOnly {
		if b.ceilingWorker, err = startCeilingWorker(b.temporal, cfg.CeilingPollers); err != nil {
			return rep, err
		}
		defer func() { b.ceilingWorker.Stop() }()
	}

	all := append([]Shape(nil), cfg.Shapes...)
	if cfg.Steady.Keys > 0 {
		all = append(all, cfg.Steady)
	}
	for _, sh := range all {
		var c, bc, fl, sf Measurement
		at := -1 // Herald's measurement in the report, kept if a reference then fails
		references := func() error {
			var err error
			if !cfg.HeraldOnly && !sh.FloorOnly && !sh.HeraldOnly {
				if c, err = b.ceiling(ctx, sh, SystemCeiling); err != nil {
					return fmt.Errorf("shape %s on the ceiling: %w", sh.Name, err)
				}
				rep.Measurements = append(rep.Measurements, c)
				if cfg.Batched {
					if bc, err = b.ceiling(ctx, sh, SystemBatched); err != nil {
						return fmt.Errorf("shape %s on the batched ceiling: %w", sh.Name, err)
					}
					rep.Measurements = append(rep.Measurements, bc)
				}
			}
			if !cfg.HeraldOnly && !sh.HeraldOnly && hasFloor(sh) {
				if fl, err = b.floor(ctx, sh, SystemFloor); err != nil {
					return fmt.Errorf("shape %s on the floor: %w", sh.Name, err)
				}
				rep.Measurements = append(rep.Measurements, fl)
				if cfg.ShapedFloor {
					if sf, err = b.floor(ctx, sh, SystemShapedFloor); err != nil {
						return fmt.Errorf("shape %s on the shaped floor: %w", sh.Name, err)
					}
					rep.Measurements = append(rep.Measurements, sf)
					if err := b.dropCachedRuns(); err != nil {
						return err
					}
				}
			}
			return nil
		}
		herald := func() error {
			h, err := b.herald(ctx, sh)
			if err != nil {
				return fmt.Errorf("shape %s on Herald: %w", sh.Name, err)
			}
			at = len(rep.Measurements)
			rep.Measurements = append(rep.Measurements, h)
			return nil
		}
		order := []func() error{references, herald}
		if cfg.HeraldFirst {
			order = []func() error{herald, references}
		}
		for _, measure := range order {
			if err := measure(); err != nil {
				return rep, err
			}
		}
		h := &rep.Measurements[at]
		if sh.Rate == 0 && c.PerSecond > 0 {
			h.Ratio = h.PerSecond / c.PerSecond
		}
		if sh.Rate == 0 && bc.PerSecond > 0 {
			h.RatioBatched = h.PerSecond / bc.PerSecond
		}
		if fl.PerSecond > 0 {
			h.RatioFloor = h.PerSecond / fl.PerSecond
		}
		if sf.PerSecond > 0 {
			h.RatioShapedFloor = h.PerSecond / sf.PerSecond
		}
	}
	if err := b.noisy(ctx, rep); err != nil {
		return rep, err
	}
	rep.Finished = time.Now().UTC()
	return rep, nil
}

// noisy measures each healthy shape of the noisy-neighbour comparison on
// Herald alone, then all of them beside the calm neighbours (the control),
// then beside the misbehaving ones, with the publishing API on in each so
// the only difference is the neighbours.
func (b *bench) noisy(ctx context.Context, rep *Report) error {
	if len(b.cfg.Noisy) == 0 {
		return nil
	}
	alone := map[string]Measurement{}
	for _, sh := range b.cfg.Noisy {
		m, err := b.heraldWith(ctx, sh, heraldRun{system: SystemAlone, api: true})
		if err != nil {
			return fmt.Errorf("shape %s alone: %w", sh.Name, err)
		}
		alone[sh.Name] = m
		rep.Measurements = append(rep.Measurements, m)
	}
	// Alone again before anyone else: the comparison's noise. The control
	// before the neighbours misbehave: the keys of a failing neighbour go on
	// retrying after its measurement, and would deliver their backlog into
	// the control's.
	for _, run := range []heraldRun{
		{system: SystemAloneAgain, api: true},
		{system: SystemCalm, api: true, neighbours: b.neighbours, calm: true},
		{system: SystemNeighbours, api: true, neighbours: b.neighbours},
	} {
		for _, sh := range b.cfg.Noisy {
			m, err := b.heraldWith(ctx, sh, run)
			if err != nil {
				return fmt.Errorf("shape %s %s: %w", sh.Name, run.system, err)
			}
			if a := alone[sh.Name]; a.PerSecond > 0 && a.LatencyMS.P99 > 0 {
				m.AloneRatio = round(m.PerSecond/a.PerSecond, 3)
				m.AloneP99Ratio = round(m.LatencyMS.P99/a.LatencyMS.P99, 3)
			}
			rep.Measurements = append(rep.Measurements, m)
		}
	}
	return nil
}

// setUp starts the sink, opens the store (migrating it and applying the
// benchmark's manifests), connects to Temporal and builds the worker. The
// returned cleanup undoes whatever was done, also after an error.
func (b *bench) setUp(ctx context.Context) (cleanup func(), err error) {
	var undo []func()
	cleanup = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	dir := b.cfg.WorkDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "herald-bench-"); err != nil {
			return cleanup, fmt.Errorf("create work folder: %w", err)
		}
		undo = append(undo, func() { _ = os.RemoveAll(dir) })
	}
	b.keyDir = filepath.Join(dir, "keys")
	b.logDir = dir
	if _, err := signing.GenerateKey(b.keyDir); err != nil {
		return cleanup, fmt.Errorf("generate signing key: %w", err)
	}
	b.progress("building the worker (./workers)")
	if b.workerBin, err = buildWorker(ctx, b.cfg.ModuleRoot, dir); err != nil {
		return cleanup, err
	}

	if b.sink, err = startSink(); err != nil {
		return cleanup, err
	}
	undo = append(undo, b.sink.close)
	if b.store, err = store.Open(ctx, b.cfg.DatabaseURL, store.Options{MaxConns: 8}); err != nil {
		return cleanup, err
	}
	undo = append(undo, b.store.Close)
	if _, err := b.store.Migrate(ctx); err != nil {
		return cleanup, fmt.Errorf("migrate: %w", err)
	}
	if err := applyManifests(ctx, b.store, b.sink.URL(), b.fanOuts()); err != nil {
		return cleanup, err
	}
	if len(b.cfg.Noisy) > 0 {
		if b.neighbours, err = startNeighbours(); err != nil {
			return cleanup, err
		}
		undo = append(undo, b.neighbours.close)
		if err := apply(ctx, b.store, b.neighbours.manifests()); err != nil {
			return cleanup, err
		}
	}
	b.publisher = publish.New(b.store, publish.Options{})

	log, err := zaplog.New("warn")
	if err != nil {
		return cleanup, err
	}
	b.temporal, err = client.Dial(client.Options{
		HostPort: b.cfg.TemporalAddress, Namespace: b.cfg.Namespace, Logger: zaplog.ForTemporal(log),
	})
	if err != nil {
		return cleanup, fmt.Errorf("connect to Temporal at %s: %w", b.cfg.TemporalAddress, err)
	}
	undo = append(undo, b.temporal.Close)
	b.pids = b.serverPIDs()
	return cleanup, nil
}

// fanOuts lists the subscription counts the shapes need.
func (b *bench) fanOuts() []int {
	seen := map[int]bool{}
	var out []int
	for _, sh := range append(append(append([]Shape(nil), b.cfg.Shapes...), b.cfg.Noisy...), b.cfg.Steady) {
		if sh.Keys > 0 && !seen[sh.Subscriptions] {
			seen[sh.Subscriptions] = true
			out = append(out, sh.Subscriptions)
		}
	}
	return out
}

// temporalDB names, in PIDs and CPUSeconds, the PostgreSQL server that
// persists a Temporal server (scripts/temporal-pg.sh's): part of what a
// delivery costs Temporal, which a dev server's SQLite file counts in the
// server's own process.
const temporalDB = "temporal-db"

// serverPIDs finds the local Temporal and PostgreSQL servers for CPU
// accounting, unless the caller named them.
func (b *bench) serverPIDs() map[string]int {
	pids := map[string]int{}
	for k, v := range b.cfg.PIDs {
		if v > 0 {
			pids[k] = v
		}
	}
	temporal, postgres := localServers(b.cfg)
	for name, pid := range map[string]int{"temporal": temporal, "postgres": postgres} {
		if pid > 0 {
			pids[name] = pid
		}
	}
	if db, ok := pids[temporalDB]; ok && db == pids["postgres"] {
		// Herald's tables and Temporal's in one cluster: its CPU cannot be
		// told apart, and counted in both columns it would count twice.
		b.progress("Temporal's database is Herald's PostgreSQL too (pid %d): its CPU is counted as Herald's alone", db)
		delete(pids, temporalDB)
	}
	pids["bench"] = os.Getpid()
	return pids
}

// cpu reads the CPU seconds used so far by each known process (and the
// worker, when workerPID is not 0). The worker is the bench's child: the
// bench's own figure leaves it out.
func (b *bench) cpu(workerPID int) map[string]float64 {
	out := map[string]float64{}
	for name, pid := range b.pids {
		if s, err := procstat.TreeCPU(pid, workerPID); err == nil {
			out[name] = s
		}
	}
	if workerPID > 0 {
		if s, err := procstat.TreeCPU(workerPID); err == nil {
			out["worker"] = s
		}
	}
	return out
}

func (b *bench) progress(format string, args ...any) {
	fmt.Fprintf(b.cfg.Progress, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
