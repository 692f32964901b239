package service

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"herald/workflows"
)

// Bounds of one wake-up of an app's unreachable keys.
const (
	// wakeMaxKeys caps the keys signalled per wake-up; any others keep their
	// back-off and are woken by a later success.
	wakeMaxKeys = 1000
	// wakeParallel caps the signals in flight at once.
	wakeParallel = 16
	wakeTimeout  = time.Minute
)

// waker ends the unreachable back-off of an app's keys when a delivery to
// the app has just succeeded. It finds them through Temporal's visibility
// (HeraldApp and HeraldStatus) and signals each; one wake-up per app runs
// at a time, so a burst of successes does not become a signal storm.
type waker struct {
	tc  client.Client
	log *zap.Logger

	mu      sync.Mutex
	running map[string]bool
}

func newWaker(tc client.Client, log *zap.Logger) *waker {
	return &waker{tc: tc, log: log, running: map[string]bool{}}
}

// WakeUnreachable starts a wake-up of app's unreachable keys in the
// background (activities.Waker).
func (w *waker) WakeUnreachable(app string) {
	w.mu.Lock()
	if w.running[app] {
		w.mu.Unlock()
		return
	}
	w.running[app] = true
	w.mu.Unlock()
	go func() {
		defer func() {
			w.mu.Lock()
			delete(w.running, app)
			w.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), wakeTimeout)
		defer cancel()
		start := time.Now()
		n, err := w.wake(ctx, app)
		if err != nil {
			w.log.Warn("wake unreachable keys", zap.String("app", app), zap.Int("signalled", n), zap.Error(err))
			return
		}
		w.log.Info("woke unreachable keys", zap.String("app", app), zap.Int("signalled", n),
			zap.Duration("took", time.Since(start)))
	}()
}

// wake signals up to wakeMaxKeys unreachable keys of app and returns how
// many it signalled.
func (w *waker) wake(ctx context.Context, app string) (int, error) {
	// App ids are [a-z][a-z0-9-]*: nothing to escape in the query.
	query := fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus = 'Running' AND %s = '%s' AND %s = '%s'",
		workflows.DeliveryWorkflowType, workflows.SAApp.GetName(), app, workflows.SAStatus.GetName(), workflows.StatusUnreachable)
	var ids []string
	var token []byte
	for len(ids) < wakeMaxKeys {
		resp, err := w.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: query, PageSize: int32(min(wakeMaxKeys-len(ids), 1000)), NextPageToken: token})
		if err != nil {
			return 0, err
		}
		for _, e := range resp.Executions {
			ids = append(ids, e.Execution.WorkflowId)
		}
		if token = resp.NextPageToken; len(token) == 0 {
			break
		}
	}
	sem := make(chan struct{}, wakeParallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	signalled := 0
	for _, id := range ids[:min(len(ids), wakeMaxKeys)] {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := w.tc.SignalWorkflow(ctx, id, "", workflows.SignalReachable, nil); err == nil {
				mu.Lock()
				signalled++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return signalled, nil
}
