package system

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"herald/internal/testenv"
	"herald/internal/testkit"
	"herald/workflows"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestExplainSaysWhereAKeysEventsStand: what ExplainOnFailure logs names
// each event's row and outcomes with their times, the key's relay
// partition and both key workflows' histories; it still reads the rows
// once the worker has stopped (its partition then has no lease), and says
// of a key without events that it has none.
func TestExplainSaysWhereAKeysEventsStand(t *testing.T) {
	s := Start(t)
	s.Apply()
	s.Publish("explained", 1)
	stamp := `\d\d:\d\d:\d\d\.\d{3}`
	delivered := []string{
		`(?m)^events \(seq state received dispatched\):\n  \d+ dispatched ` + stamp + ` ` + stamp + `\n`,
		`(?m)^  ` + regexp.QuoteMeta(AuditLogSub) + ` \d+ delivered 1 ` + stamp + ` ` + stamp + ` ` + stamp + ` $`,
		`(?m)^  ` + regexp.QuoteMeta(BillingSub) + ` \d+ delivered 1 ` + stamp + ` ` + stamp + ` ` + stamp + ` $`,
		`(?m)^workflow ` + regexp.QuoteMeta(workflows.DeliveryID(BillingSub, "explained")) + `, latest run:\n  1 ` + stamp + ` WorkflowExecutionStarted$`,
		`(?m)^workflow ` + regexp.QuoteMeta(workflows.DeliveryID(AuditLogSub, "explained")) + `, latest run:\n  1 ` + stamp + ` WorkflowExecutionStarted$`,
	}
	// The rows say delivered and dispatched a moment after the subscriber
	// has the event: wait for them.
	got := testkit.EventuallyValue(t, 30*time.Second, "an explanation of a delivered key", func() (string, bool) {
		out := s.explain(context.Background(), "explained")
		return out, missing(out, delivered) == ""
	})
	led := `(?m)^relay partition of the key \(partition holder lease-until\):\n  \d+ "[^"]+" ` + stamp + `$`
	if m := missing(got, []string{led}); m != "" {
		t.Errorf("explain lacks %s; it says:\n%s", m, got)
	}

	none := s.explain(context.Background(), "no-such-key")
	if m := missing(none, []string{
		`(?m)^events \(seq state received dispatched\):\noutcomes`,
		`(?m)^workflow ` + regexp.QuoteMeta(workflows.DeliveryID(BillingSub, "no-such-key")) + `, latest run:\n  history: `,
	}); m != "" {
		t.Errorf("explain of a key without events lacks %s; it says:\n%s", m, none)
	}

	// Logged only once the test has failed.
	quiet := &logTB{TB: t}
	(&System{t: quiet, Cfg: s.Cfg}).ExplainOnFailure("explained")
	if len(quiet.logs) != 0 {
		t.Errorf("ExplainOnFailure logged for a test that has not failed: %q", quiet.logs)
	}
	s.Stop()
	failed := &logTB{TB: t, failed: true}
	(&System{t: failed, Cfg: s.Cfg}).ExplainOnFailure("explained")
	log := strings.Join(failed.logs, "\n")
	released := `(?m)^relay partition of the key \(partition holder lease-until\):\n  \d+ "" -$`
	if m := missing(log, append(delivered, `^where the events of key "explained" stand \(now `+stamp+`\):\n`, released)); m != "" {
		t.Errorf("ExplainOnFailure after the worker stopped lacks %s; it logged:\n%s", m, log)
	}
}

// missing is the first of the patterns that text does not match ("" when
// it matches them all).
func missing(text string, patterns []string) string {
	for _, p := range patterns {
		if !regexp.MustCompile(p).MatchString(text) {
			return p
		}
	}
	return ""
}

// logTB is a test that records its log lines and says whether it failed.
type logTB struct {
	testing.TB
	failed bool
	logs   []string
}

func (l *logTB) Helper()      {}
func (l *logTB) Failed() bool { return l.failed }
func (l *logTB) Logf(format string, args ...any) {
	l.logs = append(l.logs, fmt.Sprintf(format, args...))
}
