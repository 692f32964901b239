package system

import (
	"context"
	"regexp"
	"testing"
	"time"

	"herald/internal/testenv"
	"herald/internal/testkit"
	"herald/workflows"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestExplainSaysWhereAKeysEventsStand: what ExplainOnFailure logs names
// each event's row and outcomes with their times, the key's relay
// partition and both key workflows' histories, and nothing of a key that
// has no events.
func TestExplainSaysWhereAKeysEventsStand(t *testing.T) {
	s := Start(t)
	s.Apply()
	s.Publish("explained", 1)
	testkit.Eventually(t, 30*time.Second, "the deliveries", func() bool {
		return s.Sub.Count("billing", "explained") == 1 && s.Sub.Count("audit-log", "explained") == 1
	})
	got := s.explain(context.Background(), "explained")
	for _, want := range []string{
		`(?m)^events \(seq state received dispatched\):\n  \d+ dispatched \d\d:\d\d:\d\d\.\d{3} \d\d:\d\d:\d\d\.\d{3}\n`,
		`(?m)^  ` + regexp.QuoteMeta(AuditLogSub) + ` \d+ delivered \d+ [0-9:.]+ [0-9:.]+ \d\d:\d\d:\d\d\.\d{3} $`,
		`(?m)^  ` + regexp.QuoteMeta(BillingSub) + ` \d+ delivered \d+ [0-9:.]+ [0-9:.]+ \d\d:\d\d:\d\d\.\d{3} $`,
		`(?m)^relay partition of the key \(partition holder lease-until\):\n  \d+ "[^"]+" [0-9:.]+$`,
		`(?m)^workflow ` + regexp.QuoteMeta(workflows.DeliveryID(BillingSub, "explained")) + `, latest run:\n  1 [0-9:.]+ WorkflowExecutionStarted$`,
		`(?m)^workflow ` + regexp.QuoteMeta(workflows.DeliveryID(AuditLogSub, "explained")) + `, latest run:\n  1 [0-9:.]+ WorkflowExecutionStarted$`,
	} {
		if !regexp.MustCompile(want).MatchString(got) {
			t.Errorf("explain lacks %s; it says:\n%s", want, got)
		}
	}
	none := s.explain(context.Background(), "no-such-key")
	for _, want := range []string{
		`(?m)^events \(seq state received dispatched\):\noutcomes`,
		`(?m)^workflow ` + regexp.QuoteMeta(workflows.DeliveryID(BillingSub, "no-such-key")) + `, latest run:\n  history: `,
	} {
		if !regexp.MustCompile(want).MatchString(none) {
			t.Errorf("explain of a key without events lacks %s; it says:\n%s", want, none)
		}
	}
}
