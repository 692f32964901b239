package chaos_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"herald/internal/testenv"
)

// eagerEnv selects the Temporal dev server's configuration for a run:
// HERALD_CHAOS_EAGER=1 turns eager activity execution on
// (system.enableActivityEagerExecution=true); unset or 0 leaves the
// server's default, off. The suite starts its own server, so what the
// project's scripts pass to theirs does not change what a run measures.
const eagerEnv = "HERALD_CHAOS_EAGER"

// eagerActivities reports whether this run's dev server executes activities
// eagerly.
func eagerActivities() bool {
	v, _ := strconv.ParseBool(os.Getenv(eagerEnv))
	return v
}

// serverConfig names the dev server's configuration in the summary.
func serverConfig() string {
	if eagerActivities() {
		return "Temporal dev server (SQLite file), eager activity execution ON (" + eagerEnv + "=1)"
	}
	return "Temporal dev server (SQLite file), default settings: eager activity execution off"
}

// temporalServer is the run's Temporal dev server: a child process on a fixed
// loopback port with a SQLite file in dir, so that a restart keeps its
// workflows and its address.
type temporalServer struct {
	dir   string
	port  string
	eager bool

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func newTemporalServer(dir string, eager bool) (*temporalServer, error) {
	if err := seedPort(dir); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(dir, "port"))
	if err != nil {
		return nil, err
	}
	return &temporalServer{dir: dir, port: strings.TrimSpace(string(b)), eager: eager}, nil
}

func (s *temporalServer) addr() string { return "127.0.0.1:" + s.port }

func temporalCLI() string { return filepath.Join(testenv.RepoRoot(), ".tools", "bin", "temporal") }

// start starts the server and waits until it is serving.
func (s *temporalServer) start() error {
	args := []string{"server", "start-dev", "--ip", "127.0.0.1", "--port", s.port, "--headless",
		"--db-filename", filepath.Join(s.dir, "temporal.db"), "--log-level", "warn"}
	for _, name := range []string{"HeraldSubscription", "HeraldApp", "HeraldEventType", "HeraldStatus"} {
		args = append(args, "--search-attribute", name+"=Keyword")
	}
	args = append(args, "--search-attribute", "HeraldQueued=Int")
	if s.eager {
		args = append(args, "--dynamic-config-value", "system.enableActivityEagerExecution=true")
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(temporalCLI(), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start the Temporal dev server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("the Temporal dev server exited while starting; its log:\n%s", tail(filepath.Join(s.dir, "server.log"), 30))
		default:
		}
		out, _ := exec.Command(temporalCLI(), "operator", "cluster", "health", "--address", s.addr()).Output()
		if strings.Contains(strings.ToLower(string(out)), "serving") {
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	s.stop()
	return fmt.Errorf("the Temporal dev server did not serve within 60 s; its log:\n%s", tail(filepath.Join(s.dir, "server.log"), 30))
}

// stop sends SIGTERM and waits up to 10 s, then kills the server.
func (s *temporalServer) stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}
