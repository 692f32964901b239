// Package walkthrough_test runs docs/walkthrough.md: its shell blocks in
// one bash, its files written where the page says, its outputs compared,
// against a worker of internal/testkit's System. The page's `starter` is
// this test binary (TestMain runs the CLI when called by that name), so
// nothing is built but the page's own receivers.
package walkthrough_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"herald/cli"
	"herald/internal/testenv"
	"herald/internal/testkit/system"
)

// starterName is the name under which this binary is the starter CLI.
const starterName = "starter"

func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == starterName {
		// As starter/main.go, without its optional tracing.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
		stop()
		os.Exit(code)
	}
	testenv.Main(m)
}

// Timeouts of the page's steps: a run block may build and download
// (go get, go build, npm install); an output block marked eventually is
// waited for this long (a delivery takes well under a second, a busy
// make test some seconds).
const (
	runTimeout        = 5 * time.Minute
	eventuallyTimeout = 90 * time.Second
)

// TestWalkthrough runs docs/walkthrough.md from top to bottom as a reader
// would after `make dev`: every sh block in one bash, every file block
// written, every output block compared; then checks in the database that
// every delivery it made was delivered, to both receivers.
func TestWalkthrough(t *testing.T) {
	steps := plan(t, readPage(t, walkthroughPath()))
	s := system.Start(t, system.LogLevel(zapcore.DPanicLevel)) // skips under -short
	for _, tool := range []string{"bash", "go", "node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: the walkthrough needs it (.ci/run installs Node.js and npm)", tool)
		}
	}
	// The page's receivers listen on fixed ports: one run at a time on
	// this machine.
	unlock := lockMachineWide(t, filepath.Join(os.TempDir(), "herald-walkthrough.lock"))
	defer unlock()

	sh := startShell(t, shellEnv(t, s))
	for _, st := range steps {
		switch {
		case st.file != nil:
			dir := sh.query("pwd")
			p := filepath.Join(dir, filepath.FromSlash(st.file.file))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(st.file.text), 0o644); err != nil {
				t.Fatal(err)
			}
		case st.output == nil:
			sh.run(st.run)
		default:
			sh.runFor(st.run, *st.output)
		}
	}

	var settled, delivered, subscriptions int
	if err := s.Svc.Store.Pool.QueryRow(context.Background(),
		`SELECT count(*), count(*) FILTER (WHERE status = 'delivered'), count(DISTINCT subscription_id) FROM outcomes`,
	).Scan(&settled, &delivered, &subscriptions); err != nil {
		t.Fatal(err)
	}
	if settled == 0 || delivered != settled || subscriptions < 2 {
		t.Fatalf("after the walkthrough: %d of %d outcomes delivered, to %d subscriptions; want every one delivered, to at least 2",
			delivered, settled, subscriptions)
	}
}

// shellEnv is the reader's environment after pasting make dev's export
// line: its variables (devExports) with the test's values, starter on the
// PATH; TEMPORAL_NAMESPACE and HERALD_WORKER_URL, which make dev leaves at
// their defaults, name the test's. Nothing else of Herald's: the page sets
// what else it needs. mktemp makes its folders in the test's.
func shellEnv(t *testing.T, s *system.System) []string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := os.Symlink(self, filepath.Join(bin, starterName)); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "HERALD_") || strings.HasPrefix(name, "TEMPORAL_") || strings.HasPrefix(name, "OTEL_") ||
			name == "PATH" || name == "TMPDIR" || name == "BASH_ENV" || name == "ENV" || name == "USER" {
			continue
		}
		env = append(env, kv)
	}
	given := map[string]string{
		"HERALD_DATABASE_URL": s.Cfg.DatabaseURL,
		"TEMPORAL_ADDRESS":    s.Cfg.TemporalAddress,
		"HERALD_SECRET_KEY":   s.Cfg.SecretKey,
		// make dev's worker delivers to loopback, and says so to starter.
		"HERALD_ALLOW_NETWORKS": "127.0.0.0/8,::1/128",
		"PATH":                  bin + string(os.PathListSeparator) + os.Getenv("PATH"),
	}
	for _, name := range devExports {
		env = append(env, name+"="+given[name])
	}
	return append(env,
		"TEMPORAL_NAMESPACE="+s.Cfg.TemporalNamespace,
		"HERALD_WORKER_URL="+s.WorkerURL(),
		"USER=walkthrough",
		"TMPDIR="+t.TempDir(),
	)
}

// lockMachineWide waits for an exclusive lock on the file at p and returns
// its release.
func lockMachineWide(t *testing.T, p string) func() {
	t.Helper()
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("lock %s: %v", p, err)
	}
	return func() { f.Close() }
}

// shell is one bash, in a process group of its own, that runs the page's
// blocks one after the other; background jobs stay in its group and die
// with it at the end of the test.
type shell struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  *os.File
	lines  chan string
	exited chan struct{}
	dir    string // the blocks' scripts
	marker string
	n      int
}

// startShell starts bash with env, under set -euo pipefail, its stdout and
// stderr as one stream.
func startShell(t *testing.T, env []string) *shell {
	t.Helper()
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	sh := &shell{t: t, lines: make(chan string, 1024), exited: make(chan struct{}),
		dir: t.TempDir(), marker: "walkthrough-step-done-" + hex.EncodeToString(nonce[:])}
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	sh.cmd = exec.Command("bash", "--noprofile", "--norc")
	sh.cmd.Env = env
	sh.cmd.Dir = sh.dir
	sh.cmd.Stdin, sh.cmd.Stdout, sh.cmd.Stderr = inR, outW, outW
	sh.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := sh.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	sh.stdin = inW
	go func() {
		_ = sh.cmd.Wait()
		close(sh.exited)
	}()
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
		for sc.Scan() {
			sh.lines <- sc.Text()
		}
		close(sh.lines)
	}()
	t.Cleanup(func() {
		// The background jobs too: the whole group.
		_ = syscall.Kill(-sh.cmd.Process.Pid, syscall.SIGKILL)
		<-sh.exited
		inW.Close()
		outR.Close()
	})
	sh.send("set -euo pipefail")
	return sh
}

// send writes one command line to the shell.
func (sh *shell) send(line string) {
	sh.t.Helper()
	if _, err := fmt.Fprintln(sh.stdin, line); err != nil {
		sh.t.Fatalf("bash: %v", err)
	}
}

// exec sends command, which ends by printing the marker and a status, and
// returns what the shell printed before it and that status.
func (sh *shell) exec(command string, timeout time.Duration, what string) (string, string) {
	sh.t.Helper()
	sh.send(command)
	var out strings.Builder
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-sh.lines:
			if !ok {
				<-sh.exited
				sh.t.Fatalf("%s: bash exited (%v), its output:\n%s", what, sh.cmd.ProcessState, out.String())
			}
			if rest, ok := strings.CutPrefix(line, sh.marker+" "); ok {
				return out.String(), rest
			}
			out.WriteString(line + "\n")
		case <-sh.exited:
			// Background jobs may keep the output open: what came so far
			// says why.
			sh.drain(&out)
			sh.t.Fatalf("%s: failed, bash exited (%v); the output:\n%s", what, sh.cmd.ProcessState, out.String())
		case <-deadline:
			sh.t.Fatalf("%s: no end after %s; the output so far:\n%s", what, timeout, out.String())
		}
	}
}

// drain adds to out what the shell printed and nobody read yet.
func (sh *shell) drain(out *strings.Builder) {
	for {
		select {
		case line, ok := <-sh.lines:
			if !ok {
				return
			}
			out.WriteString(line + "\n")
		case <-time.After(200 * time.Millisecond):
			return
		}
	}
}

// script writes a block to a file of its own and returns the file's path.
func (sh *shell) script(b *block) string {
	sh.t.Helper()
	sh.n++
	p := filepath.Join(sh.dir, fmt.Sprintf("block-%02d-line-%d.sh", sh.n, b.line))
	if err := os.WriteFile(p, []byte(b.text), 0o644); err != nil {
		sh.t.Fatal(err)
	}
	return p
}

// done is the command that ends every step: a line of its own with the
// marker and the step's status.
func (sh *shell) done() string { return fmt.Sprintf(`printf '\n%s %%s\n' "$?"`, sh.marker) }

// query runs a command line in the shell and returns what it printed.
func (sh *shell) query(command string) string {
	sh.t.Helper()
	out, _ := sh.exec(command+"; "+sh.done(), time.Minute, command)
	return strings.TrimSpace(out)
}

// run runs a block in the shell itself, so that what it changes (the
// folder, variables, background jobs) carries on; a failing line ends the
// shell and the test.
func (sh *shell) run(b *block) {
	sh.t.Helper()
	what := fmt.Sprintf("walkthrough.md:%d", b.line)
	out, status := sh.exec(fmt.Sprintf("source %q </dev/null; %s", sh.script(b), sh.done()), runTimeout, what)
	if status != "0" {
		sh.t.Fatalf("%s: exit status %s; the output:\n%s", what, status, out)
	}
}

// runFor runs a block in a subshell until it succeeds and prints what the
// output block shows: once, or until eventuallyTimeout for an output
// block marked eventually.
func (sh *shell) runFor(b *block, output block) {
	sh.t.Helper()
	what := fmt.Sprintf("walkthrough.md:%d", b.line)
	p := sh.script(b)
	deadline := time.Now().Add(eventuallyTimeout)
	for {
		// set +e: a failing try is not the shell's end.
		out, status := sh.exec(fmt.Sprintf("set +e; ( set -e; source %q ) </dev/null; %s; set -e", p, sh.done()), runTimeout, what)
		if status == "0" && matches(output, out) {
			return
		}
		if !output.eventually || time.Now().After(deadline) {
			sh.t.Fatalf("%s: exit status %s and this output:\n%s\nwant status 0 and the output of walkthrough.md:%d:\n%s",
				what, status, out, output.line, output.text)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
