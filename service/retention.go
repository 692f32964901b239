package service

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"herald/workflows"
)

// ensureRetentionSchedule creates the retention schedule, or brings an
// existing one in line with this worker's settings. Every replica does this
// at start; the result is the same whichever runs last.
func (s *Service) ensureRetentionSchedule(ctx context.Context) error {
	spec := client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: s.cfg.RetentionEvery}}}
	action := &client.ScheduleWorkflowAction{
		ID:        workflows.RetentionScheduleID,
		Workflow:  workflows.RetentionWorkflowType,
		TaskQueue: workflows.TaskQueue,
		Args:      []any{workflows.RetentionParams{Keep: s.cfg.Retention}},
	}
	sc := s.Temporal.ScheduleClient()
	_, err := sc.Create(ctx, client.ScheduleOptions{ID: workflows.RetentionScheduleID, Spec: spec, Action: action})
	if err == nil {
		return nil
	}
	if !errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		return fmt.Errorf("create schedule %s: %w", workflows.RetentionScheduleID, err)
	}
	err = sc.GetHandle(ctx, workflows.RetentionScheduleID).Update(ctx, client.ScheduleUpdateOptions{
		DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
			sched := in.Description.Schedule
			sched.Spec = &spec
			sched.Action = action
			return &client.ScheduleUpdate{Schedule: &sched}, nil
		},
	})
	if err != nil {
		return fmt.Errorf("update schedule %s: %w", workflows.RetentionScheduleID, err)
	}
	return nil
}
