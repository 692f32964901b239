package chaos_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"herald/internal/testenv"
	"herald/signing"
	"herald/store"
)

// Settings every worker of the suite runs with. The retry schedule keeps the
// default's 8 attempts but compresses its delays (1s … 1h) to at most 2 s, so
// that retries after a fault happen within the run instead of minutes or
// hours later; docs/reliability.md explains why nothing can exhaust them.
const (
	retrySchedule   = "200ms,500ms,1s,2s,2s,2s,2s"
	maxAttempts     = 8
	deliveryTimeout = 2 * time.Second
)

var (
	buildOnce sync.Once
	buildDir  string
	workerBin string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// buildWorker compiles ./workers once per test binary, or returns the binary
// named by HERALD_CHAOS_WORKER (to run the suite against a candidate build).
func buildWorker() (string, error) {
	if bin := os.Getenv("HERALD_CHAOS_WORKER"); bin != "" {
		return bin, nil
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "herald-chaos-bin-")
		if buildErr != nil {
			return
		}
		workerBin = filepath.Join(buildDir, "workers")
		args := []string{"build", "-o", workerBin}
		if os.Getenv("HERALD_CHAOS_RACE") != "" {
			args = append(args, "-race") // a race in the worker under faults fails its run
		}
		cmd := exec.Command("go", append(args, "./workers")...)
		cmd.Dir = testenv.RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./workers: %w: %s", err, out)
		}
	})
	return workerBin, buildErr
}

// env is one private Herald installation: a PostgreSQL cluster and a Temporal
// dev server in a temporary directory, a signing key, and the worker binary.
// Nothing is shared with make test's services, since the suite restarts them;
// the Temporal dev server is the suite's own (temporal_test.go), so that
// HERALD_CHAOS_EAGER, not the project's scripts, sets its configuration.
type env struct {
	t            *testing.T
	dir          string
	pgDir        string
	temporalDir  string
	dbURL        string
	temporalAddr string
	keyDir       string
	bin          string
	temporal     *temporalServer
	keys         *signing.KeySet
	store        *store.Store

	mu      sync.Mutex
	workers []*workerProc
}

// newEnv starts the services of one test and stops them when it ends. The
// directory (with every log) is kept when the test fails.
func newEnv(t *testing.T) *env {
	t.Helper()
	dir, err := os.MkdirTemp("", "herald-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	// The PostgreSQL server runs as the postgres user and must reach its directory.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: dir, pgDir: filepath.Join(dir, "pg"), temporalDir: filepath.Join(dir, "temporal"),
		keyDir: filepath.Join(dir, "keys")}
	t.Cleanup(e.close)

	if err := seedPort(e.pgDir); err != nil {
		t.Fatal(err)
	}
	if e.temporal, err = newTemporalServer(e.temporalDir, eagerActivities()); err != nil {
		t.Fatal(err)
	}
	e.temporalAddr = e.temporal.addr()
	binCh := make(chan error, 1)
	go func() { // builds while the services start
		var err error
		e.bin, err = buildWorker()
		binCh <- err
	}()
	var wg sync.WaitGroup
	var pgErr, tErr error
	wg.Add(2)
	go func() { defer wg.Done(); e.dbURL, pgErr = e.script("pg.sh", "start", e.pgDir) }()
	go func() { defer wg.Done(); tErr = e.temporal.start() }()
	wg.Wait()
	if err := <-binCh; err != nil {
		t.Fatal(err)
	}
	if pgErr != nil || tErr != nil {
		t.Fatalf("start services: PostgreSQL: %v; Temporal: %v", pgErr, tErr)
	}
	if err := os.MkdirAll(e.keyDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := signing.GenerateKey(e.keyDir); err != nil {
		t.Fatal(err)
	}
	if e.keys, err = signing.LoadKeys(e.keyDir); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if e.store, err = store.Open(ctx, e.dbURL, store.Options{MaxConns: 8}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return e
}

// script runs one of the project's service scripts and returns its output.
func (e *env) script(name string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(testenv.RepoRoot(), "scripts", name), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

func (e *env) stopPostgres() error { _, err := e.script("pg.sh", "stop", e.pgDir); return err }

func (e *env) startPostgres() error {
	u, err := e.script("pg.sh", "start", e.pgDir)
	if err == nil && u != e.dbURL {
		err = fmt.Errorf("PostgreSQL came back at %s, not %s", u, e.dbURL)
	}
	return err
}

func (e *env) stopTemporal() error {
	e.temporal.stop()
	return nil
}

// startTemporal starts the stopped dev server again on its port and data.
func (e *env) startTemporal() error {
	var err error
	for range 3 {
		if err = e.temporal.start(); err == nil {
			break
		}
		time.Sleep(time.Second)
	}
	return err
}

func (e *env) close() {
	e.mu.Lock()
	ws := append([]*workerProc(nil), e.workers...)
	e.mu.Unlock()
	for _, w := range ws {
		w.kill()
	}
	if e.store != nil {
		e.store.Close()
	}
	if e.temporal != nil {
		e.temporal.stop()
	}
	_ = e.stopPostgres()
	if e.t.Failed() || os.Getenv("HERALD_CHAOS_KEEP") != "" {
		e.t.Logf("kept the run's directory with every log: %s", e.dir)
		return
	}
	_ = os.RemoveAll(e.dir)
}

// freeAddr returns a loopback address with a port nobody uses now, below the
// kernel's ephemeral range (32768-60999 here): a port in that range can be
// taken by any outgoing connection on the machine while its server is down
// for a restart, and then the server cannot bind it again.
func freeAddr() (string, error) {
	for range 200 {
		addr := fmt.Sprintf("127.0.0.1:%d", 10000+rand.N(10000))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		_ = l.Close()
		return addr, nil
	}
	return "", fmt.Errorf("no free port between 10000 and 19999")
}

// seedPort writes a free port into a service directory's port file, which
// the project's scripts use on their first start and keep on restarts.
func seedPort(dir string) error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(addr)
	return os.WriteFile(filepath.Join(dir, "port"), []byte(port+"\n"), 0o644)
}

// workerProc is one worker process. A restart under the same name keeps its
// HTTP address and appends to its log.
type workerProc struct {
	name    string
	addr    string
	logPath string
	env     []string

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	exitErr  error
	started  time.Time
	exitedAt time.Time
}

// workerEnv is the worker's whole environment: nothing is inherited but PATH
// and HOME, so make test's HERALD_* settings cannot leak in.
func (e *env) workerEnv(addr string, extra ...string) []string {
	return append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"HERALD_DATABASE_URL=" + e.dbURL,
		"TEMPORAL_ADDRESS=" + e.temporalAddr,
		"TEMPORAL_NAMESPACE=default",
		"HERALD_HTTP_ADDR=" + addr,
		"HERALD_SIGNING_KEY=" + e.keyDir,
		"HERALD_SECRET_KEY=" + testenv.SecretKey,
		"HERALD_ALLOW_NETWORKS=127.0.0.0/8",
		"HERALD_RETRY_SCHEDULE=" + retrySchedule,
		"HERALD_DELIVERY_TIMEOUT=" + deliveryTimeout.String(),
		"HERALD_LOG_LEVEL=info",
		"HERALD_END_QUIET_KEYS=" + strconv.FormatBool(endQuietKeys()),
	}, extra...)
}

// endQuietEnv runs the workers with HERALD_END_QUIET_KEYS=true: a key's
// first run ends as soon as it owes nothing, and its next event, back
// within the relay's hot window (the suite's keys come back every few
// seconds), starts a busy run that waits idle; a key quiet for longer
// than the idle timeout starts quiet again. Faults meet runs that end and
// start again more often than at the default, where the suite's few dozen
// keys stay far under the idle-run cap and their runs wait idle.
const endQuietEnv = "HERALD_CHAOS_END_QUIET_KEYS"

func endQuietKeys() bool {
	raw := os.Getenv(endQuietEnv)
	if raw == "" {
		return false
	}
	v, err := strconv.ParseBool(raw)
	if err != nil {
		panic(fmt.Sprintf("%s=%q: want 0 or 1", endQuietEnv, raw))
	}
	return v
}

// startWorker starts a new worker process and waits until it is ready.
func (e *env) startWorker(name string, extraEnv ...string) *workerProc {
	e.t.Helper()
	addr, err := freeAddr()
	if err != nil {
		e.t.Fatal(err)
	}
	w := &workerProc{name: name, addr: addr, logPath: filepath.Join(e.dir, "worker-"+name+".log"),
		env: e.workerEnv(addr, extraEnv...)}
	e.mu.Lock()
	e.workers = append(e.workers, w)
	e.mu.Unlock()
	e.restart(w)
	return w
}

// restart starts a stopped worker process again and waits until it is ready.
func (e *env) restart(w *workerProc) {
	e.t.Helper()
	if err := w.start(e.bin); err != nil {
		e.t.Fatalf("start worker %s: %v", w.name, err)
	}
	if err := w.waitReady(60 * time.Second); err != nil {
		e.t.Fatalf("worker %s: %v; log tail:\n%s", w.name, err, tail(w.logPath, 30))
	}
}

func (w *workerProc) start(bin string) error {
	logf, err := os.OpenFile(w.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "---- start %s\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(bin)
	cmd.Env = w.env
	cmd.Stdout, cmd.Stderr = logf, logf
	// The worker must not outlive a test binary that dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	w.mu.Lock()
	w.cmd, w.done, w.exitErr, w.started, w.exitedAt = cmd, done, nil, time.Now(), time.Time{}
	w.mu.Unlock()
	go func() {
		err := cmd.Wait()
		logf.Close()
		w.mu.Lock()
		w.exitErr, w.exitedAt = err, time.Now()
		w.mu.Unlock()
		close(done)
	}()
	return nil
}

// running reports whether the process has not exited.
func (w *workerProc) running() bool {
	w.mu.Lock()
	done := w.done
	w.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (w *workerProc) kill() {
	w.mu.Lock()
	cmd, done := w.cmd, w.done
	w.mu.Unlock()
	if cmd == nil || !w.running() {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// term sends SIGTERM and waits up to limit for the process to exit; it returns
// how long the exit took and how the process ended. On timeout the process is
// killed and ok is false.
func (w *workerProc) term(limit time.Duration) (took time.Duration, exitErr error, ok bool) {
	w.mu.Lock()
	cmd, done := w.cmd, w.done
	w.mu.Unlock()
	start := time.Now()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.exitedAt.Sub(start), w.exitErr, true
	case <-time.After(limit):
		w.kill()
		return time.Since(start), nil, false
	}
}

// readiness is one answer of /readyz.
type readiness struct {
	Status int               // 0 when the request failed
	Body   map[string]string // database, temporal, relayLeader, relayPartitions
	Err    error
}

var probeClient = &http.Client{Timeout: 5 * time.Second}

func (w *workerProc) readyz() readiness {
	resp, err := probeClient.Get("http://" + w.addr + "/readyz")
	if err != nil {
		return readiness{Err: err}
	}
	defer resp.Body.Close()
	r := readiness{Status: resp.StatusCode}
	if err := json.NewDecoder(resp.Body).Decode(&r.Body); err != nil {
		r.Err = fmt.Errorf("decode /readyz: %w", err)
	}
	return r
}

// partitions is how many partitions of the log the worker's relay leads
// (-1 when /readyz did not say).
func (w *workerProc) partitions() int {
	n, err := strconv.Atoi(w.readyz().Body["relayPartitions"])
	if err != nil {
		return -1
	}
	return n
}

func (w *workerProc) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last readiness
	for time.Now().Before(deadline) {
		if !w.running() {
			return fmt.Errorf("exited before it was ready: %v", w.exitErr)
		}
		if last = w.readyz(); last.Status == http.StatusOK {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("not ready after %v: last /readyz %d %v %v", timeout, last.Status, last.Body, last.Err)
}

// tail returns the last n lines of a file, for failure messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
