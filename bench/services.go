package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"

	"herald/internal/zaplog"
	"herald/workflows"

	"github.com/jackc/pgx/v5"
)

// ServerConfig is a Temporal server configuration the benchmark measures
// on: a dev server started by scripts/temporal.sh with these start-dev flags
// on top of the server's defaults.
type ServerConfig struct {
	// Name is what -servers selects ("default", "eager").
	Name string `json:"name"`
	// Settings describes the server for the tables.
	Settings string `json:"settings"`
	// Flags are the extra start-dev flags.
	Flags []string `json:"flags,omitempty"`
	// Pin runs the server on a CPU of its own and everything else on the
	// others (cpuSplit).
	Pin bool `json:"pin,omitempty"`
}

// ServerConfigs are the configurations make bench measures by default, in
// order: the Temporal server's own defaults, which is what a new user runs,
// and the same with eager activity execution on, which some operators
// enable. Herald must be fast on both; neither is tuned for it.
var ServerConfigs = []ServerConfig{
	{Name: "default", Settings: "dev server, default settings (eager activity execution off)"},
	{Name: "eager", Settings: "dev server, default settings + system.enableActivityEagerExecution=true",
		Flags: []string{"--dynamic-config-value", "system.enableActivityEagerExecution=true"}},
	// Not measured unless named: on a machine of few CPUs it says what a
	// system costs Temporal when its own work runs elsewhere, as it does
	// where Temporal has machines of its own.
	{Name: "pinned", Settings: "dev server, default settings, on a CPU of its own", Pin: true},
}

// selectServers picks server configurations by name ("default,eager").
func selectServers(names string) ([]ServerConfig, error) {
	var out []ServerConfig
	seen := map[string]bool{}
	for _, name := range strings.Split(names, ",") {
		name = strings.ToLower(strings.TrimSpace(name))
		if name == "" {
			continue
		}
		if seen[name] {
			return nil, fmt.Errorf("server configuration %s named twice", name)
		}
		seen[name] = true
		found := false
		for _, sc := range ServerConfigs {
			if sc.Name == name {
				out = append(out, sc)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown server configuration %q (use default, eager, pinned)", name)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no server configuration selected")
	}
	return out, nil
}

// givenServer describes a Temporal server named by TEMPORAL_ADDRESS, whose
// settings the benchmark does not know.
func givenServer(address string) ServerConfig {
	return ServerConfig{Name: "given", Settings: "TEMPORAL_ADDRESS=" + address + " (its own settings)"}
}

// services are the servers of a run, either given by the environment or
// started here with the project's scripts.
type services struct {
	DatabaseURL     string
	TemporalAddress string
	// TemporalMetrics is the Prometheus endpoint of a dev server started
	// here (scripts/temporal.sh's DIR/metrics-port).
	TemporalMetrics string
	// PIDs of servers started here, for CPU accounting.
	PIDs  map[string]int
	stops []func()
	// started lists the stop commands of the servers started here.
	started []string
}

// stop stops whatever was started here, newest first.
func (s *services) stop() {
	if s == nil {
		return
	}
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
}

// startPostgres reuses HERALD_DATABASE_URL when set, as make test does, and
// otherwise starts a throwaway PostgreSQL cluster in a temporary folder
// (stopped and removed by stop).
func startPostgres(ctx context.Context, root string, getenv func(string) string, progress func(string, ...any)) (*services, error) {
	s := &services{DatabaseURL: getenv("HERALD_DATABASE_URL"), PIDs: map[string]int{}}
	if s.DatabaseURL != "" {
		return s, nil
	}
	progress("starting a throwaway PostgreSQL (scripts/pg.sh)")
	dir, out, err := runScript(ctx, root, "pg.sh", "herald-bench-pg-")
	if dir != "" {
		s.stops = append(s.stops, func() { stopScript(root, "pg.sh", dir) })
		s.started = append(s.started, filepath.Join(root, "scripts", "pg.sh")+" stop "+dir)
	}
	if err != nil {
		return s, err
	}
	s.DatabaseURL = out
	return s, nil
}

// startTemporal starts a throwaway Temporal dev server with the flags of sc
// in a temporary folder (stopped and removed by stop).
func startTemporal(ctx context.Context, root string, sc ServerConfig, progress func(string, ...any)) (*services, error) {
	s := &services{PIDs: map[string]int{}}
	progress("starting a throwaway Temporal dev server (scripts/temporal.sh): %s", sc.Settings)
	dir, out, err := runScript(ctx, root, "temporal.sh", "herald-bench-temporal-", append([]string{"--headless"}, sc.Flags...)...)
	if dir != "" {
		s.stops = append(s.stops, func() { stopScript(root, "temporal.sh", dir) })
		s.started = append(s.started, filepath.Join(root, "scripts", "temporal.sh")+" stop "+dir)
	}
	if err != nil {
		return s, err
	}
	s.TemporalAddress = out
	if b, err := os.ReadFile(filepath.Join(dir, "metrics-port")); err == nil {
		s.TemporalMetrics = "http://127.0.0.1:" + strings.TrimSpace(string(b)) + "/metrics"
	}
	if b, err := os.ReadFile(filepath.Join(dir, "pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			s.PIDs["temporal"] = pid
		}
	}
	return s, nil
}

// runScript runs "scripts/NAME start DIR args…" in a new temporary folder
// and returns the folder and the script's output (a URL or an address).
func runScript(ctx context.Context, root, name, prefix string, args ...string) (dir, out string, err error) {
	dir, err = os.MkdirTemp("", prefix)
	if err != nil {
		return "", "", fmt.Errorf("create folder for %s: %w", name, err)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", name), append([]string{"start", dir}, args...)...)
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		return dir, "", fmt.Errorf("scripts/%s start: %w", name, err)
	}
	return dir, strings.TrimSpace(string(b)), nil
}

func stopScript(root, name, dir string) {
	_ = exec.Command(filepath.Join(root, "scripts", name), "stop", dir).Run()
	_ = os.RemoveAll(dir)
}

// createSchema creates a schema in the database at baseURL and returns a URL
// whose connections use it, and a function that drops it.
func createSchema(ctx context.Context, baseURL, schema string) (string, func(), error) {
	conn, err := pgx.Connect(ctx, baseURL)
	if err != nil {
		return "", nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("create schema %s: %w", schema, err)
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, baseURL); err == nil {
			_, _ = conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			_ = conn.Close(ctx)
		}
	}
	u, err := url.Parse(baseURL)
	if err != nil || u.Scheme == "" {
		drop()
		return "", nil, fmt.Errorf("HERALD_DATABASE_URL must be a postgres:// URL to add a search_path")
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), drop, nil
}

// createNamespace registers a namespace with Herald's search attributes and
// waits until visibility queries on them work. The returned function deletes
// it again.
func createNamespace(ctx context.Context, address, namespace string) (func(), error) {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	log, err := zaplog.New("error")
	if err != nil {
		return nil, err
	}
	c, err := client.Dial(client.Options{HostPort: address, Logger: zaplog.ForTemporal(log)})
	if err != nil {
		return nil, fmt.Errorf("connect to Temporal at %s: %w", address, err)
	}
	if _, err := c.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace: namespace, WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
	}); err != nil {
		c.Close()
		return nil, fmt.Errorf("register namespace %s: %w", namespace, err)
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = c.OperatorService().DeleteNamespace(ctx, &operatorservice.DeleteNamespaceRequest{Namespace: namespace})
		c.Close()
	}
	// A new namespace takes a moment to be known to every service.
	err = retry(ctx, func() error {
		_, err := c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
			Namespace: namespace, SearchAttributes: workflows.SearchAttributeTypes(),
		})
		return err
	})
	if err == nil {
		err = retry(ctx, func() error {
			_, err := c.WorkflowService().CountWorkflowExecutions(ctx, &workflowservice.CountWorkflowExecutionsRequest{
				Namespace: namespace, Query: `HeraldStatus = "failed"`,
			})
			return err
		})
	}
	if err != nil {
		drop()
		return nil, fmt.Errorf("prepare namespace %s: %w", namespace, err)
	}
	return drop, nil
}

// retry calls fn every 200ms until it succeeds or ctx ends.
func retry(ctx context.Context, fn func() error) error {
	for {
		err := fn()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}
