package e2e_test

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"herald/internal/testenv"
	"herald/internal/testkit"
	"herald/internal/testkit/system"
)

// TestStockNodeLibraryVerifiesEveryDelivery: a receiver written with the
// npm package standardwebhooks alone (e2e/node/receiver.js) verifies every
// live delivery, before and during a rotation. Node.js is required, not
// optional: without it the test fails (.ci/run installs it).
func TestStockNodeLibraryVerifiesEveryDelivery(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: the Standard Webhooks proof needs Node.js and npm (apt-get install nodejs npm; .ci/run does it)")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatalf("npm is not installed: the Standard Webhooks proof needs it (apt-get install npm; .ci/run does it)")
	}
	// The package is installed from the lock file into a scratch copy;
	// nothing is written into the repository.
	dir := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json", "receiver.js"} {
		b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "e2e", "node", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	install := exec.Command(npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	install.Dir = dir
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("npm ci: %v\n%s", err, out)
	}
	secretsFile := filepath.Join(dir, "secrets.json")
	setSecrets := func(secrets []string) {
		b, _ := json.Marshal(secrets)
		tmp := secretsFile + ".tmp"
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			t.Error(err)
		}
		if err := os.Rename(tmp, secretsFile); err != nil {
			t.Error(err)
		}
	}
	setSecrets([]string{})

	cmd := exec.Command(node, "receiver.js", secretsFile)
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "listening ") {
		t.Fatalf("receiver.js did not start: %q", lines.Text())
	}
	endpoint := "http://127.0.0.1:" + strings.TrimPrefix(lines.Text(), "listening ")
	var mu sync.Mutex
	var verdicts, failed []string
	go func() {
		for lines.Scan() {
			mu.Lock()
			verdicts = append(verdicts, lines.Text())
			if !strings.HasPrefix(lines.Text(), "ok ") {
				failed = append(failed, lines.Text())
			}
			mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()

	s := system.Start(t)
	s.Apply()
	runRotation(t, s, endpoint, rotationRun{
		setSecrets: setSecrets,
		delivered: func(n int) []string {
			testkit.Eventually(t, 30*time.Second, "deliveries to the Node receiver", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(verdicts) >= n
			})
			mu.Lock()
			defer mu.Unlock()
			return append([]string(nil), failed...)
		},
	})
}
