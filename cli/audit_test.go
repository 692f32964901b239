package cli

import (
	"testing"

	"herald/store"
)

// TestAuditShowsLabels: starter audit shows each row's readable label, as a
// column of the text and the JSON field label.
func TestAuditShowsLabels(t *testing.T) {
	t.Parallel()
	e := appliedEnv(t)
	rows := decode[[]store.AuditRow](t, mustRun(t, e, "audit", "--action", "app.applied", "--limit", "1", "--json").stdout)
	if len(rows) != 1 || rows[0].Label != "App manifest applied" {
		t.Fatalf("audit --json rows = %+v, want one labelled App manifest applied", rows)
	}
	text := mustRun(t, e, "audit", "--action", "subscription.first_seen", "--limit", "1").stdout
	wantContains(t, "audit", text, "ACTION", "LABEL", "subscription.first_seen", "Subscription first seen")
}
