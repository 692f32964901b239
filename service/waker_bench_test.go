package service

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"go.uber.org/zap"

	"herald/internal/testenv"
	"herald/workflows"
)

// BenchmarkWakeUnreachableKeys measures one wake-up of an app's unreachable
// keys, the fan-out that a success to the app triggers, on a real Temporal
// server: stand-ins for the keys (workflows of type Delivery that show
// HeraldStatus unreachable and end on the reachable signal) are listed
// through visibility and signalled, 16 at a time, at most 1,000. It reports
// the keys signalled, the seconds until the last one ended and the signals
// per second. HERALD_WAKE_KEYS sets how many keys wait (default 1000; more
// than 1,000 shows the cap). Run it with
//
//	go test ./service -run '^$' -bench WakeUnreachable -benchtime 1x
func BenchmarkWakeUnreachableKeys(b *testing.B) {
	keys := 1000
	if v, err := strconv.Atoi(os.Getenv("HERALD_WAKE_KEYS")); err == nil && v > 0 {
		keys = v
	}
	address, namespace := testenv.NewNamespace(b)
	tc, err := client.Dial(client.Options{HostPort: address, Namespace: namespace, Logger: quietLog{}})
	if err != nil {
		b.Fatal(err)
	}
	defer tc.Close()
	const queue = "wake-bench"
	w := worker.New(tc, queue, worker.Options{})
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context) error {
		workflow.GetSignalChannel(ctx, workflows.SignalReachable).Receive(ctx, nil)
		return nil
	}, workflow.RegisterOptions{Name: workflows.DeliveryWorkflowType})
	if err := w.Start(); err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	ctx := context.Background()
	for n := 0; n < b.N; n++ {
		b.StopTimer()
		app := fmt.Sprintf("app-%d", n)
		runs := make([]client.WorkflowRun, 0, keys)
		for i := 0; i < keys; i++ {
			run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
				ID: fmt.Sprintf("deliver:%s:x.y@1:k-%d", app, i), TaskQueue: queue,
				TypedSearchAttributes: temporal.NewSearchAttributes(workflows.SAApp.ValueSet(app),
					workflows.SAStatus.ValueSet(workflows.StatusUnreachable)),
			}, workflows.DeliveryWorkflowType)
			if err != nil {
				b.Fatal(err)
			}
			runs = append(runs, run)
		}
		query := fmt.Sprintf("%s = '%s' AND ExecutionStatus = 'Running'", workflows.SAApp.GetName(), app)
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
			c, err := tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: query})
			if err == nil && c.Count == int64(keys) {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("visibility never listed the %d keys: %v", keys, err)
			}
		}
		b.StartTimer()
		start := time.Now()
		signalled, err := newWaker(tc, zap.NewNop()).wake(ctx, app)
		if err != nil {
			b.Fatal(err)
		}
		sent := time.Since(start)
		want := min(keys, wakeMaxKeys)
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		done := make(chan struct{}, len(runs))
		for _, run := range runs {
			go func() {
				if run.Get(wctx, nil) == nil {
					done <- struct{}{}
				}
			}()
		}
		ended := 0
		for ended < want && wctx.Err() == nil {
			select {
			case <-done:
				ended++
			case <-wctx.Done():
			}
		}
		all := time.Since(start)
		cancel()
		b.StopTimer()
		if signalled != want || ended != want {
			b.Fatalf("signalled %d and %d ended, want %d of %d", signalled, ended, want, keys)
		}
		b.ReportMetric(float64(signalled), "keys-woken")
		b.ReportMetric(sent.Seconds(), "s-to-signal-all")
		b.ReportMetric(all.Seconds(), "s-until-all-ended")
		b.ReportMetric(float64(signalled)/sent.Seconds(), "signals/s")
		for _, run := range runs { // leave nothing running: the keys past the cap
			_ = tc.TerminateWorkflow(ctx, run.GetID(), "", "benchmark done")
		}
	}
}

type quietLog struct{}

func (quietLog) Debug(string, ...any) {}
func (quietLog) Info(string, ...any)  {}
func (quietLog) Warn(string, ...any)  {}
func (quietLog) Error(string, ...any) {}
