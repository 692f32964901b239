// Package testenv gives tests real services: a PostgreSQL database (a fresh
// schema per test) and a Temporal dev server. It uses HERALD_DATABASE_URL and
// TEMPORAL_ADDRESS when set (make test sets them), and otherwise starts its
// own throwaway PostgreSQL cluster and dev server with the project's scripts,
// once per test binary, stopped by Main.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	pgOnce sync.Once
	pgURL  string
	pgDir  string
	pgErr  error

	temporalOnce sync.Once
	temporalAddr string
	temporalDir  string
	temporalErr  error
)

// Main runs the tests of a package and then stops any service this package
// started. Use it from TestMain: func TestMain(m *testing.M) { testenv.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	if pgDir != "" {
		_ = exec.Command(filepath.Join(RepoRoot(), "scripts", "pg.sh"), "remove", pgDir).Run()
	}
	if temporalDir != "" {
		_ = exec.Command(filepath.Join(RepoRoot(), "scripts", "temporal.sh"), "stop", temporalDir).Run()
		_ = os.RemoveAll(temporalDir)
	}
	os.Exit(code)
}

// RepoRoot is the repository's top folder.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// DatabaseURL returns the URL of a PostgreSQL database for tests, starting a
// throwaway cluster when HERALD_DATABASE_URL is not set.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	needsServices(t, "PostgreSQL")
	if u := os.Getenv("HERALD_DATABASE_URL"); u != "" {
		return u
	}
	pgOnce.Do(func() {
		dir, err := os.MkdirTemp("", "herald-pg-")
		if err != nil {
			pgErr = err
			return
		}
		pgDir = dir
		out, err := exec.Command(filepath.Join(RepoRoot(), "scripts", "pg.sh"), "start", dir).Output()
		if err != nil {
			pgErr = fmt.Errorf("start PostgreSQL: %w: %s", err, stderrOf(err))
			return
		}
		pgURL = strings.TrimSpace(string(out))
	})
	if pgErr != nil {
		t.Fatalf("testenv: %v", pgErr)
	}
	return pgURL
}

// NewSchema creates an empty schema for one test and returns a database URL
// whose connections use it (search_path). The schema is dropped afterwards.
func NewSchema(t testing.TB) string {
	t.Helper()
	base := DatabaseURL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "test_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("testenv: connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("testenv: create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, base); err == nil {
			_, _ = conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
			conn.Close(ctx)
		}
	})
	return WithSearchPath(t, base, schema)
}

// WithSearchPath returns rawURL with its connections' search_path set to schema.
func WithSearchPath(t testing.TB, rawURL, schema string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("testenv: parse database url: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// TemporalAddress returns the host:port of a Temporal frontend with Herald's
// search attributes registered, starting a dev server when TEMPORAL_ADDRESS is
// not set.
func TemporalAddress(t testing.TB) string {
	t.Helper()
	needsServices(t, "a Temporal server")
	if a := os.Getenv("TEMPORAL_ADDRESS"); a != "" {
		return a
	}
	temporalOnce.Do(func() {
		dir, err := os.MkdirTemp("", "herald-temporal-")
		if err != nil {
			temporalErr = err
			return
		}
		temporalDir = dir
		out, err := exec.Command(filepath.Join(RepoRoot(), "scripts", "temporal.sh"), "start", dir, "--headless").Output()
		if err != nil {
			temporalErr = fmt.Errorf("start Temporal dev server: %w: %s", err, stderrOf(err))
			return
		}
		temporalAddr = strings.TrimSpace(string(out))
	})
	if temporalErr != nil {
		t.Fatalf("testenv: %v", temporalErr)
	}
	return temporalAddr
}

// TemporalMetricsURL returns the Prometheus endpoint of the server
// TemporalAddress returns: for a server TEMPORAL_ADDRESS names,
// TEMPORAL_METRICS_URL ("" when unset; make test sets both), and for one
// started here the port scripts/temporal.sh gave it.
func TemporalMetricsURL(t testing.TB) string {
	t.Helper()
	TemporalAddress(t)
	if os.Getenv("TEMPORAL_ADDRESS") != "" {
		return os.Getenv("TEMPORAL_METRICS_URL")
	}
	b, err := os.ReadFile(filepath.Join(temporalDir, "metrics-port"))
	if err != nil {
		t.Fatalf("testenv: the dev server's metrics port: %v", err)
	}
	return "http://127.0.0.1:" + strings.TrimSpace(string(b)) + "/metrics"
}

// TemporalCLI returns the path of the pinned temporal binary, building it once.
func TemporalCLI(t testing.TB) string {
	t.Helper()
	needsServices(t, "the Temporal CLI")
	out, err := exec.Command(filepath.Join(RepoRoot(), "scripts", "temporal.sh"), "install").Output()
	if err != nil {
		t.Fatalf("testenv: install Temporal CLI: %v: %s", err, stderrOf(err))
	}
	return strings.TrimSpace(string(out))
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}

// needsServices skips a test that needs real services when tests run with
// -short: make test-unit, the quick loop without services. make test runs
// every test, these included.
func needsServices(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s; skipped with -short (make test runs it)", what)
	}
}
