package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"herald/config"
	"herald/internal/testkit"
	"herald/internal/testkit/system"
	"herald/store"
	"herald/subscriber"
	"herald/workflows"
)

// Subscriptions of the fixture: billing and audit-log both subscribe to
// contacts.person.updated@1.
const (
	billingSub  = system.BillingSub
	auditLogSub = system.AuditLogSub
)

// herald is a running Herald for the delivery commands (internal/testkit's
// System) and the environment starter runs in.
type herald struct {
	*system.System
	t   *testing.T
	env env
}

// startHerald starts the worker in-process with a one-retry schedule, so a
// failing key fails within a second, and applies the fixture manifests with
// starter apps apply. Each option changes the worker's configuration before
// it starts.
func startHerald(t *testing.T, options ...func(*config.Worker)) *herald {
	t.Helper()
	s := system.Start(t, system.LogLevel(zapcore.DPanicLevel), system.Schedule(200*time.Millisecond), system.DBConns(6),
		system.Config(func(c *config.Worker) {
			c.LogLevel = "error"
			for _, o := range options {
				o(c)
			}
		}))
	h := &herald{System: s, t: t, env: env(s.Env())}
	mustRun(t, h.env, "apps", "apply", system.WriteManifests(t, s.SubURL))
	return h
}

// rejectIf makes the subscriber refuse (422, not retried) the events
// reject says; nil accepts everything.
func (h *herald) rejectIf(reject func(app, subject string, n int) bool) {
	if reject == nil {
		h.Sub.SetReject(nil)
		return
	}
	h.Sub.SetReject(func(app, subject string, n int) error {
		if reject(app, subject, n) {
			return subscriber.Reject(fmt.Errorf("event %d of %s does not fit", n, subject))
		}
		return nil
	})
}

// publish publishes events n (data {"n": n}) of each subject key, for each
// n given.
func (h *herald) publish(subjects []string, ns ...int) {
	h.t.Helper()
	for _, n := range ns {
		for _, subject := range subjects {
			if _, err := h.Publisher.Publish(context.Background(), system.PersonRequest(subject, fmt.Sprintf(`{"n":%d}`, n))); err != nil {
				h.t.Fatalf("publish %s #%d: %v", subject, n, err)
			}
		}
	}
}

// waitArrivals waits until app received exactly the events want of subject, in that order.
func (h *herald) waitArrivals(app, subject string, want ...int) {
	h.t.Helper()
	got := testkit.EventuallyValue(h.t, 30*time.Second, fmt.Sprintf("%s to receive %v of %s", app, want, subject), func() ([]int, bool) {
		got := h.Sub.Ns(app, subject)
		return got, len(got) >= len(want)
	})
	if !slices.Equal(got, want) {
		h.t.Fatalf("%s received %v of %s, want %v in that order", app, got, subject, want)
	}
}

// listed runs starter deliveries with args and --json and returns the keys'
// subjects, sorted.
func (h *herald) listed(args ...string) []string {
	h.t.Helper()
	out := decode[deliveriesJSON](h.t, mustRun(h.t, h.env, append([]string{"deliveries", "--json"}, args...)...).stdout)
	var subjects []string
	for _, k := range out.Keys {
		subjects = append(subjects, k.Subject)
	}
	slices.Sort(subjects)
	return subjects
}

// waitListed waits until starter deliveries with args lists exactly the
// subjects want (Temporal's visibility lags behind status changes).
func (h *herald) waitListed(want []string, args ...string) {
	h.t.Helper()
	want = slices.Sorted(slices.Values(want))
	testkit.EventuallyValue(h.t, 30*time.Second, fmt.Sprintf("deliveries %v to list %v", args, want), func() ([]string, bool) {
		got := h.listed(args...)
		return got, slices.Equal(got, want)
	})
}

// state runs starter inspect --json on one key of a subscription.
func (h *herald) state(subscription, subject string) workflows.State {
	h.t.Helper()
	r := mustRun(h.t, h.env, "inspect", "--json", "--subscription", subscription, "--subject", subject)
	return decode[workflows.State](h.t, r.stdout)
}

// audit returns the audit rows of action about one key's workflow.
func (h *herald) audit(action, subscription, subject string) []store.AuditRow {
	h.t.Helper()
	rows, err := h.Svc.Store.ListAudit(context.Background(), store.AuditFilter{
		Action: action, TargetID: workflows.DeliveryID(subscription, subject),
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return rows
}

// wantAudit waits for exactly one audit row of action about the key and
// checks its outcome, actor and reason.
func (h *herald) wantAudit(action, subscription, subject, actor, reason string) {
	h.t.Helper()
	// The workflow writes the row while it applies the operation; one
	// operation is applied once (the workflows tests count its rows), so
	// the count is final once a row is there: no waiting for a duplicate.
	rows := testkit.EventuallyValue(h.t, 10*time.Second, action+" audit row of "+subject, func() ([]store.AuditRow, bool) {
		rows := h.audit(action, subscription, subject)
		return rows, len(rows) > 0
	})
	if len(rows) != 1 {
		h.t.Fatalf("%d %s audit rows for %s, want 1: %+v", len(rows), action, subject, rows)
	}
	var meta struct {
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal(rows[0].Metadata, &meta); err != nil {
		h.t.Fatal(err)
	}
	if r := rows[0]; r.Outcome != store.OutcomeAllowed || r.Actor != actor || meta.Reason != reason || r.TargetType != store.TargetDelivery {
		h.t.Fatalf("%s audit row: outcome %s, actor %q, target %s %s, metadata %s; want outcome allowed, actor %q, reason %q",
			action, r.Outcome, r.Actor, r.TargetType, r.TargetID, r.Metadata, actor, reason)
	}
}
