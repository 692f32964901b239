// Command bench measures Herald's delivery throughput and latency against
// the bare Temporal shape it is built on (issue 6): one SignalWithStart and
// one activity doing one HTTP POST per event, on the same server, in the
// same run. It measures on each Temporal server configuration of -servers
// (by default the server's defaults, then eager activity execution on),
// starting a throwaway dev server for each, and a throwaway PostgreSQL; or on
// the servers make test uses (HERALD_DATABASE_URL, TEMPORAL_ADDRESS;
// TEMPORAL_NAMESPACE picks an existing namespace instead of a fresh one;
// TEMPORAL_METRICS_URL names its Prometheus endpoint, for the visibility
// records each measurement wrote, which a dev server started here gives). It
// runs Herald's worker as a separate process and a loopback sink that
// records arrivals and per-key order, then prints tables per server, writes
// the figures as JSON and draws a PNG.
//
// Last it measures two healthy shapes alone, alone again (the comparison's
// own noise), beside calm neighbours (the control: the same publishing
// load, well-behaved) and then beside noisy neighbours (-noisy;
// bench/neighbours.go).
//
//	go run ./bench [-servers default,eager] [-repeat 1] [-shapes A,B,C,D,E] [-scale 1] [-steady 30s] [-noisy 20s] [-out bench-results.json] [-png bench.png]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"herald/relay"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// options are the command line flags.
type options struct {
	shapes     string
	scale      float64
	steady     time.Duration
	steadyRate float64
	steadyKeys int
	noisy      time.Duration
	noisyRate  float64
	// neighbourRate and guessRate override the neighbours' default load.
	neighbourRate float64
	guessRate     float64
	timeout       time.Duration
	grace         time.Duration
	parallel      int
	batch         int
	pollers       int
	sample        int
	heraldOnly    bool
	workerEnv     string
	batched       bool
	shapedFloor   bool
	out           string
	png           string
	keep          bool
	keepRuns      bool
	temporalPID   int
	temporalDBPID int
	render        string
	servers       string
	repeat        int
	// serverFlag is set when -servers was given explicitly.
	serverFlag bool
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&o.shapes, "shapes", "A,B,C,D,E", "shapes to measure: A (20 keys × 50 events), B (200 × 5), C (1000 × 1), D (B to 3 subscriptions), E (10000 × 1; against the floor only), F (50000 × 2 published at once, on Herald only: its drain time, memory and database size; not by default, it drains for tens of minutes); empty for none")
	fs.Float64Var(&o.scale, "scale", 1, "multiply each shape's event count (by its number of keys)")
	fs.DurationVar(&o.steady, "steady", 30*time.Second, "length of the steady run; 0 skips it")
	fs.Float64Var(&o.steadyRate, "steady-rate", 20, "events per second of the steady run")
	fs.IntVar(&o.steadyKeys, "steady-keys", 50, "subject keys of the steady run")
	fs.DurationVar(&o.noisy, "noisy", 20*time.Second, "length of the noisy-neighbour comparison's paced run (its burst is 200 keys × 5 to 2 subscriptions); each is measured alone, alone again, beside the same neighbours behaving (the control), then beside a subscriber that never answers, one that answers 500, a costly accepted filter and a token guesser; 0 skips it")
	fs.Float64Var(&o.noisyRate, "noisy-rate", 20, "events per second of the noisy-neighbour comparison's paced run")
	fs.Float64Var(&o.neighbourRate, "noisy-neighbour-rate", defaultNeighbourLoad.Rate, "events per second each publishing neighbour (slow, failing, heavy) sends")
	fs.Float64Var(&o.guessRate, "noisy-guess-rate", defaultNeighbourLoad.GuessRate, "token guesses per second of each of the 4 guessing clients; 0 turns them off")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "per measurement: how long to wait for deliveries after publishing; later ones count as lost")
	fs.DurationVar(&o.grace, "grace", 2*time.Second, "how long to keep listening for late duplicates after the last delivery")
	fs.IntVar(&o.parallel, "parallel", relay.DefaultParallel, "the ceiling's signals in flight at once (Herald's relay default, relay.DefaultParallel)")
	fs.IntVar(&o.pollers, "ceiling-pollers", 0, "workflow and activity task pollers of the ceiling's worker; 0 keeps the SDK defaults (the bare shape)")
	fs.StringVar(&o.workerEnv, "worker-env", "", "extra settings of Herald's worker process, KEY=VALUE separated by commas (HERALD_IDLE_TIMEOUT=1s), after the bench's own")
	fs.BoolVar(&o.heraldOnly, "herald-only", false, "skip the ceilings: Herald's figures alone, without ratios")
	fs.BoolVar(&o.batched, "batched", true, "also measure the batched ceiling: the bare shape with one activity per drained batch of a key")
	fs.BoolVar(&o.shapedFloor, "shaped-floor", false, "on the floor's shapes, also measure the shaped floor: the floor writing the history of a Herald key the relay starts for one event with the default settings (the relay's input, search attributes and summary, the start read's and the delivery's results in two local activities, a timer), so Herald's ratio to it leaves out what Temporal charges for Herald's history; not with -worker-env settings that change that history")
	fs.IntVar(&o.sample, "sample", 10, "key workflows per measurement whose histories are read to count Temporal actions")
	fs.IntVar(&o.batch, "batch", 100, "events per PublishBatch call in bursts")
	fs.StringVar(&o.out, "out", "bench-results.json", "write the figures as JSON to this file; empty to skip")
	fs.StringVar(&o.png, "png", "bench.png", "draw the chart to this PNG file; empty to skip")
	fs.BoolVar(&o.keep, "keep", false, "keep the database schema, the namespace, the worker logs and any server started here")
	fs.BoolVar(&o.keepRuns, "keep-runs", false, "leave each Herald measurement's runs waiting idle (their idle timers then fire, HERALD_IDLE_TIMEOUT on, in whatever measurement follows, whose worker completes them); by default those of its keys that owe nothing are terminated once measured")
	fs.IntVar(&o.temporalPID, "temporal-pid", 0, "process id of the local Temporal server TEMPORAL_ADDRESS names, to account its CPU (found by port when 0)")
	fs.IntVar(&o.temporalDBPID, "temporal-db-pid", 0, "process id of the PostgreSQL server that persists the Temporal server TEMPORAL_ADDRESS names (scripts/temporal-pg.sh: the first line of DIR/pg/data/postmaster.pid), to account its CPU as Temporal's too (column temporal db)")
	fs.StringVar(&o.render, "render", "", "measure nothing: print the tables of this JSON results file and draw its chart (-png)")
	fs.StringVar(&o.servers, "servers", "default,eager", "Temporal server configurations, each on a dev server of its own: default (the server's defaults: eager activity execution off), eager (eager activity execution on), pinned (the defaults, the server on a CPU of its own and everything else on the others; not by default); not with TEMPORAL_ADDRESS, which names the one server to use")
	fs.IntVar(&o.repeat, "repeat", 1, "measure every server configuration this many times (alternating; every other run measures each shape on Herald before its ceilings and floors), and summarise with medians")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	fs.Visit(func(f *flag.Flag) { o.serverFlag = o.serverFlag || f.Name == "servers" })
	if o.repeat < 1 {
		return o, fmt.Errorf("-repeat must be at least 1")
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	return o, nil
}

func run(args []string) int {
	o, err := parseFlags(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	if o.render != "" {
		suite, err := readJSON(o.render)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		return output(suite, options{png: o.png})
	}
	var servers []ServerConfig
	if addr := os.Getenv("TEMPORAL_ADDRESS"); addr != "" {
		if o.serverFlag {
			fmt.Fprintln(os.Stderr, "bench: -servers starts dev servers of its own; unset TEMPORAL_ADDRESS to use it")
			return 2
		}
		servers = []ServerConfig{givenServer(addr)}
	} else if o.temporalDBPID > 0 {
		// The dev servers started here keep their SQLite file in their own
		// process: the named process would be counted as theirs.
		fmt.Fprintln(os.Stderr, "bench: -temporal-db-pid names the database of the server TEMPORAL_ADDRESS names; set it too")
		return 2
	} else if servers, err = selectServers(o.servers); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -servers:", err)
		return 2
	}
	cfg := Config{Timeout: o.timeout, Grace: o.grace, KeepRuns: o.keepRuns, Parallel: o.parallel, PublishBatch: o.batch, CeilingPollers: o.pollers, SampleWorkflows: o.sample, HeraldOnly: o.heraldOnly, Batched: o.batched, ShapedFloor: o.shapedFloor,
		Progress: os.Stderr}
	if cfg.WorkerEnv, err = parseWorkerEnv(o.workerEnv); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -worker-env:", err)
		return 2
	}
	if err := shapedFloorFits(cfg.ShapedFloor, cfg.WorkerEnv); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -shaped-floor:", err)
		return 2
	}
	if o.shapes != "" {
		if cfg.Shapes, err = selectShapes(o.shapes, o.scale); err != nil {
			fmt.Fprintln(os.Stderr, "bench: -shapes:", err)
			return 2
		}
	}
	if o.steady > 0 {
		if cfg.Steady, err = steadyShape(o.steady, o.steadyRate, o.steadyKeys); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 2
		}
	}
	if o.noisy > 0 {
		if cfg.Noisy, err = noisyShapes(o.noisy, o.noisyRate); err != nil {
			fmt.Fprintln(os.Stderr, "bench: -noisy:", err)
			return 2
		}
		if o.neighbourRate <= 0 || o.guessRate < 0 {
			fmt.Fprintln(os.Stderr, "bench: -noisy-neighbour-rate must be positive and -noisy-guess-rate not negative")
			return 2
		}
		cfg.NeighbourLoad = defaultNeighbourLoad
		cfg.NeighbourLoad.Rate = o.neighbourRate
		cfg.NeighbourLoad.GuessRate = o.guessRate
		if o.guessRate == 0 {
			cfg.NeighbourLoad.Guessers = 0
		}
	}
	if cfg.ModuleRoot, err = moduleRoot(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	suite, err := runSuite(ctx, cfg, o, servers)
	code := 0
	if len(suite.Runs) > 0 {
		code = output(suite, o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	return code
}

// output prints the tables and writes the JSON (-out) and chart (-png).
func output(suite *Suite, o options) int {
	code := 0
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "bench:", err)
		code = 1
	}
	if err := writeSuite(os.Stdout, suite); err != nil {
		fail(err)
	}
	if o.out != "" {
		if err := writeJSON(o.out, suite); err != nil {
			fail(err)
		}
	}
	if o.png != "" {
		if err := writePNG(o.png, suite); err != nil {
			fail(err)
		}
	}
	return code
}

// runSuite provides PostgreSQL once and measures on every server
// configuration, repeat times, alternating, each on a Temporal server of its
// own (or the one TEMPORAL_ADDRESS names). It returns what was measured so
// far along with any error.
func runSuite(ctx context.Context, cfg Config, o options, servers []ServerConfig) (*Suite, error) {
	progress := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	suite := &Suite{}
	pg, err := startPostgres(ctx, cfg.ModuleRoot, os.Getenv, progress)
	defer keepOrStop(pg, o.keep && err == nil, progress)
	if err != nil {
		return suite, err
	}
	cfg.DatabaseURL = pg.DatabaseURL
	for i := range o.repeat {
		for _, sc := range servers {
			if o.repeat > 1 {
				progress("== %s, run %d of %d", sc.Settings, i+1, o.repeat)
			}
			cfg.HeraldFirst = heraldFirst(i)
			rep, err := runOnServer(ctx, cfg, o, sc, progress)
			if rep != nil && len(rep.Measurements) > 0 {
				suite.Runs = append(suite.Runs, rep)
			}
			if err != nil {
				return suite, fmt.Errorf("%s: %w", sc.Name, err)
			}
		}
	}
	return suite, nil
}

// heraldFirst reports whether the run of index i (from 0) measures each
// shape on Herald before its references: every other run, so that -repeat's
// medians have both orders (a single run keeps Herald last).
func heraldFirst(i int) bool { return i%2 == 1 }

// keepOrStop stops the servers started here, or with -keep says how to.
func keepOrStop(s *services, keep bool, progress func(string, ...any)) {
	if !keep {
		s.stop()
		return
	}
	// Keep the servers too, so the kept schema and namespace can be looked at.
	for _, cmd := range s.started {
		progress("left running; stop it with: %s", cmd)
	}
}

// givenPIDs are the server processes named by -temporal-pid and
// -temporal-db-pid, for CPU accounting.
func (o options) givenPIDs() map[string]int {
	pids := map[string]int{"temporal": o.temporalPID}
	if o.temporalDBPID > 0 {
		pids[temporalDB] = o.temporalDBPID
	}
	return pids
}

// runOnServer provides the Temporal server of sc (unless TEMPORAL_ADDRESS
// names one), a fresh schema and (unless TEMPORAL_NAMESPACE names one) a
// fresh namespace, runs the benchmark and cleans up.
func runOnServer(ctx context.Context, cfg Config, o options, sc ServerConfig, progress func(string, ...any)) (*Report, error) {
	cfg.Server = sc
	cfg.PIDs = o.givenPIDs()
	cfg.TemporalAddress = os.Getenv("TEMPORAL_ADDRESS")
	cfg.TemporalMetrics = os.Getenv("TEMPORAL_METRICS_URL")
	if cfg.TemporalAddress == "" {
		svc, err := startTemporal(ctx, cfg.ModuleRoot, sc, progress)
		defer keepOrStop(svc, o.keep && err == nil, progress)
		if err != nil {
			return nil, err
		}
		cfg.TemporalAddress, cfg.TemporalMetrics = svc.TemporalAddress, svc.TemporalMetrics
		cfg.PIDs["temporal"] = svc.PIDs["temporal"]
	}
	if sc.Pin {
		restore, where, err := pinServer(cfg)
		if err != nil {
			return nil, err
		}
		defer restore()
		progress("pinned: %s", where)
		cfg.Server.Settings += " (" + where + ")"
	}
	id := randomHex(4)
	dbURL, dropSchema, err := createSchema(ctx, cfg.DatabaseURL, "bench_"+id)
	if err != nil {
		return nil, err
	}
	if !o.keep {
		defer dropSchema()
	}
	cfg.DatabaseURL = dbURL
	cfg.Namespace = os.Getenv("TEMPORAL_NAMESPACE")
	if cfg.Namespace == "" {
		cfg.Namespace = "bench-" + id
		progress("creating Temporal namespace %s", cfg.Namespace)
		dropNamespace, err := createNamespace(ctx, cfg.TemporalAddress, cfg.Namespace)
		if err != nil {
			return nil, err
		}
		if !o.keep {
			defer dropNamespace()
		}
	}
	if o.keep {
		dir, err := os.MkdirTemp("", "herald-bench-")
		if err != nil {
			return nil, fmt.Errorf("create work folder: %w", err)
		}
		cfg.WorkDir = dir
		progress("keeping schema bench_%s, namespace %s and worker logs in %s; database %s", id, cfg.Namespace, dir, dbURL)
	}
	progress("PostgreSQL schema bench_%s, Temporal %s (%s) namespace %s", id, cfg.TemporalAddress, sc.Settings, cfg.Namespace)
	rep, err := Run(ctx, cfg)
	rep.Commit = gitCommit(cfg.ModuleRoot)
	return rep, err
}

// gitCommit describes the checked-out commit, noting uncommitted changes;
// empty outside a git checkout.
func gitCommit(root string) string {
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	commit := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		commit += " (with uncommitted changes)"
	}
	return commit
}

// moduleRoot finds the folder of go.mod from the working directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory; run from the repository")
		}
		dir = parent
	}
}

// shapedHistorySettings are the worker settings that change the history of a
// Herald key started for one event, which the shaped floor writes as
// Herald's defaults make it.
var shapedHistorySettings = []string{"HERALD_IDLE_TIMEOUT", "HERALD_END_QUIET_KEYS", "HERALD_RELAY_SIGNAL_ONLY",
	"HERALD_WORKFLOW_CACHE_SIZE"}

// shapedFloorFits refuses the shaped floor beside a worker setting that
// changes the history it copies.
func shapedFloorFits(shaped bool, env []string) error {
	if !shaped {
		return nil
	}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if slices.Contains(shapedHistorySettings, k) {
			return fmt.Errorf("it writes the history of Herald's default settings, and -worker-env sets %s, which changes Herald's", k)
		}
	}
	return nil
}

// parseWorkerEnv splits -worker-env's KEY=VALUE list; a key must be one of
// the worker's settings (HERALD_ or TEMPORAL_).
func parseWorkerEnv(list string) ([]string, error) {
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	var out []string
	for _, kv := range strings.Split(list, ",") {
		kv = strings.TrimSpace(kv)
		k, _, ok := strings.Cut(kv, "=")
		if !ok || (!strings.HasPrefix(k, "HERALD_") && !strings.HasPrefix(k, "TEMPORAL_")) {
			return nil, fmt.Errorf("%q: want HERALD_…=VALUE or TEMPORAL_…=VALUE", kv)
		}
		out = append(out, kv)
	}
	return out, nil
}
