// Command bench measures Herald's delivery throughput and latency against
// the bare Temporal shape it is built on (issue 6): one SignalWithStart and
// one activity doing one HTTP POST per event, on the same server, in the
// same run. It starts or reuses PostgreSQL and Temporal like make test
// (HERALD_DATABASE_URL, TEMPORAL_ADDRESS; TEMPORAL_NAMESPACE picks an
// existing namespace instead of a fresh one), runs Herald's worker as a
// separate process and a loopback sink that records arrivals and per-key
// order, then prints a table, writes the figures as JSON and draws a PNG.
//
//	go run ./bench [-shapes A,B,C,D] [-scale 1] [-steady 30s] [-out bench-results.json] [-png bench.png]
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
	"strings"
	"syscall"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// options are the command line flags.
type options struct {
	shapes      string
	scale       float64
	steady      time.Duration
	steadyRate  float64
	steadyKeys  int
	timeout     time.Duration
	grace       time.Duration
	parallel    int
	batch       int
	pollers     int
	sample      int
	heraldOnly  bool
	out         string
	png         string
	keep        bool
	temporalPID int
	render      string
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&o.shapes, "shapes", "A,B,C,D", "shapes to measure: A (20 keys × 50 events), B (200 × 5), C (1000 × 1), D (B to 3 subscriptions); empty for none")
	fs.Float64Var(&o.scale, "scale", 1, "multiply each shape's event count (by its number of keys)")
	fs.DurationVar(&o.steady, "steady", 30*time.Second, "length of the steady run; 0 skips it")
	fs.Float64Var(&o.steadyRate, "steady-rate", 20, "events per second of the steady run")
	fs.IntVar(&o.steadyKeys, "steady-keys", 50, "subject keys of the steady run")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "per measurement: how long to wait for deliveries after publishing; later ones count as lost")
	fs.DurationVar(&o.grace, "grace", 2*time.Second, "how long to keep listening for late duplicates after the last delivery")
	fs.IntVar(&o.parallel, "parallel", 32, "the ceiling's signals in flight at once (Herald's relay default is 32)")
	fs.IntVar(&o.pollers, "ceiling-pollers", 0, "workflow and activity task pollers of the ceiling's worker; 0 keeps the SDK defaults (the bare shape)")
	fs.BoolVar(&o.heraldOnly, "herald-only", false, "skip the ceiling: Herald's figures alone, without ratios")
	fs.IntVar(&o.sample, "sample", 10, "key workflows per measurement whose histories are read to count Temporal actions")
	fs.IntVar(&o.batch, "batch", 100, "events per PublishBatch call in bursts")
	fs.StringVar(&o.out, "out", "bench-results.json", "write the figures as JSON to this file; empty to skip")
	fs.StringVar(&o.png, "png", "bench.png", "draw the chart to this PNG file; empty to skip")
	fs.BoolVar(&o.keep, "keep", false, "keep the database schema, the namespace, the worker logs and any server started here")
	fs.IntVar(&o.temporalPID, "temporal-pid", 0, "process id of a local Temporal server to account its CPU (found by port when 0)")
	fs.StringVar(&o.render, "render", "", "measure nothing: print the tables of this JSON results file and draw its chart (-png)")
	if err := fs.Parse(args); err != nil {
		return o, err
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
		rep, err := readJSON(o.render)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		return output(rep, options{png: o.png})
	}
	cfg := Config{Timeout: o.timeout, Grace: o.grace, Parallel: o.parallel, PublishBatch: o.batch, CeilingPollers: o.pollers, SampleWorkflows: o.sample, HeraldOnly: o.heraldOnly,
		Progress: os.Stderr, PIDs: map[string]int{"temporal": o.temporalPID}}
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
	if cfg.ModuleRoot, err = moduleRoot(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := runWithServices(ctx, cfg, o)
	code := 0
	if rep != nil && len(rep.Measurements) > 0 {
		code = output(rep, o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	return code
}

// output prints the tables and writes the JSON (-out) and chart (-png).
func output(rep *Report, o options) int {
	code := 0
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "bench:", err)
		code = 1
	}
	fmt.Printf("\nHerald commit %s, started %s, %d CPUs, Go %s, Temporal %s\n\n",
		rep.Commit, rep.Started.Format(time.RFC3339), rep.CPUs, rep.GoVersion, rep.TemporalAddress)
	if err := writeTables(os.Stdout, rep); err != nil {
		fail(err)
	}
	if o.out != "" {
		if err := writeJSON(o.out, rep); err != nil {
			fail(err)
		}
	}
	if o.png != "" {
		if err := writePNG(o.png, rep); err != nil {
			fail(err)
		}
	}
	return code
}

// runWithServices provides the services, a fresh schema and (unless
// TEMPORAL_NAMESPACE names one) a fresh namespace, runs the benchmark and
// cleans up.
func runWithServices(ctx context.Context, cfg Config, o options) (*Report, error) {
	progress := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	svc, err := startServices(ctx, cfg.ModuleRoot, os.Getenv, progress)
	if o.keep && err == nil {
		// Keep the servers too, so the kept schema and namespace can be looked at.
		for _, cmd := range svc.started {
			progress("left running; stop it with: %s", cmd)
		}
		progress("database %s, Temporal %s", svc.DatabaseURL, svc.TemporalAddress)
	} else {
		defer svc.stop()
	}
	if err != nil {
		return nil, err
	}
	for k, v := range svc.PIDs {
		if cfg.PIDs[k] == 0 {
			cfg.PIDs[k] = v
		}
	}
	cfg.TemporalAddress = svc.TemporalAddress
	id := randomHex(4)
	dbURL, dropSchema, err := createSchema(ctx, svc.DatabaseURL, "bench_"+id)
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
		progress("keeping schema bench_%s, namespace %s and worker logs in %s", id, cfg.Namespace, dir)
	}
	progress("PostgreSQL schema bench_%s, Temporal %s namespace %s", id, cfg.TemporalAddress, cfg.Namespace)
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
