package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// buildWorker compiles Herald's worker binary (./workers of the module at
// root) into dir and returns its path.
func buildWorker(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "herald-workers")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./workers")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build ./workers: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return bin, nil
}

// workerProcess is one running Herald worker process.
type workerProcess struct {
	cmd     *exec.Cmd
	addr    string
	logPath string
	exited  chan struct{}
	waitErr error
}

// workerSettings are the environment of a worker process (docs/configuration.md).
type workerSettings struct {
	DatabaseURL     string
	TemporalAddress string
	Namespace       string
	SigningKeyDir   string
	// APIAddr, when set, turns the publishing API on at that address.
	APIAddr string
	// Env are extra settings, after the ones above (Config.WorkerEnv).
	Env []string
}

// startWorker starts bin as a worker process with its configuration in the
// environment and waits until it is ready and its relay leads.
func startWorker(ctx context.Context, bin, logPath string, ws workerSettings) (*workerProcess, error) {
	addr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open worker log: %w", err)
	}
	defer logFile.Close() // the child keeps its own descriptor
	cmd := exec.Command(bin)
	cmd.Env = append(environWithout("HERALD_", "TEMPORAL_"),
		"HERALD_DATABASE_URL="+ws.DatabaseURL,
		"TEMPORAL_ADDRESS="+ws.TemporalAddress,
		"TEMPORAL_NAMESPACE="+ws.Namespace,
		"HERALD_HTTP_ADDR="+addr,
		"HERALD_SIGNING_KEY="+ws.SigningKeyDir,
		"HERALD_SECRET_KEY="+testSecretKey,
		"HERALD_ALLOW_NETWORKS=127.0.0.0/8,::1/128",
		"HERALD_LOG_LEVEL=warn",
	)
	if ws.APIAddr != "" {
		cmd.Env = append(cmd.Env, "HERALD_API_ADDR="+ws.APIAddr)
	}
	cmd.Env = append(cmd.Env, ws.Env...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker: %w", err)
	}
	w := &workerProcess{cmd: cmd, addr: addr, logPath: logPath, exited: make(chan struct{})}
	go func() {
		w.waitErr = cmd.Wait()
		close(w.exited)
	}()
	if err := w.waitReady(ctx, 90*time.Second); err != nil {
		_ = w.stop()
		return nil, fmt.Errorf("%w; worker log: %s", err, tail(logPath, 15))
	}
	return w, nil
}

// waitReady polls /readyz until the worker answers 200 with its relay
// holding the leader lock, so the first published event is picked up at once.
func (w *workerProcess) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	hc := &http.Client{Timeout: 3 * time.Second}
	for {
		select {
		case <-w.exited:
			return fmt.Errorf("worker exited: %v", w.waitErr)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if ready(hc, "http://"+w.addr+"/readyz") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("worker not ready after %v", timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func ready(hc *http.Client, url string) bool {
	resp, err := hc.Get(url)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var body struct {
		RelayLeader string `json:"relayLeader"`
	}
	return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&body) == nil && body.RelayLeader == "true"
}

// pid is the worker's process id.
func (w *workerProcess) pid() int { return w.cmd.Process.Pid }

// stop asks the worker to stop (SIGTERM), waits for it, and kills it after
// 30 seconds.
func (w *workerProcess) stop() error {
	select {
	case <-w.exited:
		return w.exitError()
	default:
	}
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.exited:
		return w.exitError()
	case <-time.After(30 * time.Second):
		_ = w.cmd.Process.Kill()
		<-w.exited
		return errors.New("worker did not stop within 30s after SIGTERM; killed")
	}
}

func (w *workerProcess) exitError() error {
	if w.waitErr != nil {
		return fmt.Errorf("worker: %w; log: %s", w.waitErr, tail(w.logPath, 15))
	}
	return nil
}

// freeLoopbackAddr returns a loopback address with a port free right now.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr, nil
}

// environWithout is this process's environment minus variables with the
// given prefixes, so only the benchmark's settings reach the worker.
func environWithout(prefixes ...string) []string {
	var out []string
next:
	for _, kv := range os.Environ() {
		for _, p := range prefixes {
			if strings.HasPrefix(kv, p) {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// testSecretKey encrypts the bench apps' signing secrets (32 bytes, base64).
const testSecretKey = "aGVyYWxkLXRlc3Qtc2VjcmV0LWtleS0zMi1ieXRlcyE="
