package chaos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/encoding/protojson"

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

// historyEvent is the part of a workflow history event the suite reads.
type historyEvent struct {
	EventID   string    `json:"eventId"`
	EventTime time.Time `json:"eventTime"`
	EventType string    `json:"eventType"`

	WorkflowTaskTimedOut *struct {
		ScheduledEventID string `json:"scheduledEventId"`
		StartedEventID   string `json:"startedEventId"`
		TimeoutType      string `json:"timeoutType"`
	} `json:"workflowTaskTimedOutEventAttributes"`
	ActivityTaskStarted *struct {
		ScheduledEventID string `json:"scheduledEventId"`
		Attempt          int    `json:"attempt"`
		LastFailure      *struct {
			Message string `json:"message"`
		} `json:"lastFailure"`
	} `json:"activityTaskStartedEventAttributes"`
	TimerFired *struct {
		StartedEventID string `json:"startedEventId"`
	} `json:"timerFiredEventAttributes"`
	TimerCanceled *struct {
		StartedEventID string `json:"startedEventId"`
	} `json:"timerCanceledEventAttributes"`
	TimerStarted *struct {
		StartToFireTimeout string `json:"startToFireTimeout"`
	} `json:"timerStartedEventAttributes"`
	Signaled *struct {
		SignalName string `json:"signalName"`
	} `json:"workflowExecutionSignaledEventAttributes"`
}

// runHistory is one run of a workflow: its id and its history's events.
type runHistory struct {
	RunID  string
	Events []historyEvent
}

// histories reads the history of every run of a workflow, oldest first, and
// keeps a copy of each in the run's directory. A key's wait can span runs: a
// terminated run, one that continued as new, a quiet run that ended before
// the key was owed more. Event ids restart in each run, so each run's events
// are read on their own (spans) and only their times are compared across
// runs.
func (e *env) histories(c client.Client, workflowID string) ([]runHistory, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runs, err := listRuns(ctx, c, workflowID)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(runs, func(a, b *workflowpb.WorkflowExecutionInfo) int {
		return a.GetStartTime().AsTime().Compare(b.GetStartTime().AsTime())
	})
	name := strings.NewReplacer(":", "_", "@", "_", "/", "_").Replace(workflowID)
	out := make([]runHistory, 0, len(runs))
	for i, r := range runs {
		id := r.GetExecution().GetRunId()
		var h historypb.History
		it := c.GetWorkflowHistory(ctx, workflowID, id, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				return nil, fmt.Errorf("read the history of %s run %s: %w", workflowID, id, err)
			}
			h.Events = append(h.Events, ev)
		}
		// protojson writes the names and forms the Temporal CLI's JSON uses.
		b, err := protojson.Marshal(&h)
		if err != nil {
			return nil, fmt.Errorf("encode the history of %s run %s: %w", workflowID, id, err)
		}
		_ = os.WriteFile(filepath.Join(e.dir, fmt.Sprintf("history-%s-%02d-%s.json", name, i+1, id)), b, 0o644)
		var decoded struct {
			Events []historyEvent `json:"events"`
		}
		if err := json.Unmarshal(b, &decoded); err != nil {
			return nil, fmt.Errorf("decode the history of %s run %s: %w", workflowID, id, err)
		}
		out = append(out, runHistory{id, decoded.Events})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("visibility lists no run of %s", workflowID)
	}
	return out, nil
}

// timeline lists what in a history, between from and to, holds a key up:
// workflow tasks that timed out, activity attempts that ended in a timeout,
// timers, and the deliveries scheduled and completed.
func timeline(events []historyEvent, from, to, t0 time.Time) []string {
	var out []string
	for _, ev := range events {
		if ev.EventTime.Before(from.Add(-time.Second)) || ev.EventTime.After(to.Add(time.Second)) {
			continue
		}
		typ := strings.TrimPrefix(ev.EventType, "EVENT_TYPE_")
		var what string
		switch {
		case ev.WorkflowTaskTimedOut != nil:
			what = "workflow task timed out: " + strings.TrimPrefix(ev.WorkflowTaskTimedOut.TimeoutType, "TIMEOUT_TYPE_")
		case ev.ActivityTaskStarted != nil && ev.ActivityTaskStarted.Attempt > 1:
			what = fmt.Sprintf("activity attempt %d started", ev.ActivityTaskStarted.Attempt)
			if f := ev.ActivityTaskStarted.LastFailure; f != nil {
				what += " after: " + f.Message
			}
		case ev.TimerStarted != nil:
			what = "timer " + ev.TimerStarted.StartToFireTimeout
		case ev.Signaled != nil && ev.Signaled.SignalName != "event":
			what = "signal " + ev.Signaled.SignalName
		case strings.HasPrefix(typ, "ACTIVITY_TASK_") || typ == "TIMER_FIRED" || typ == "TIMER_CANCELED":
			what = strings.ToLower(typ)
		default:
			continue
		}
		out = append(out, fmt.Sprintf("%s #%s %s", rel(ev.EventTime, t0), ev.EventID, what))
	}
	return out
}

// persistenceFailures counts the dev server's failed writes of workflow
// state in its log (each one delays a workflow or activity task), by error.
func (e *env) persistenceFailures() map[string]int {
	b, err := os.ReadFile(filepath.Join(e.temporalDir, "server.log"))
	if err != nil {
		return nil
	}
	out := map[string]int{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, "Update workflow execution operation failed") {
			continue
		}
		why := "other"
		if i := strings.Index(line, `error="`); i >= 0 {
			why = line[i+len(`error="`):]
			if j := strings.IndexByte(why, '"'); j >= 0 {
				why = why[:j]
			}
		}
		out[why]++
	}
	return out
}

// load is the machine's load average (1, 5, 15 minutes), for the summary.
func load() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
