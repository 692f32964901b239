package cli

import (
	"testing"
)

// apps apply takes an app's delivery limits, prints and audits a change to
// them, and refuses a bad value naming the app and the field.
func TestApplyAppLimits(t *testing.T) {
	t.Parallel()
	e := migratedEnv(t)
	dir := t.TempDir()
	manifest := func(limits string) string {
		return writeFile(t, dir, "billing.json", `{"app":"billing","endpoint":"https://billing.example",`+
			`"subscribes":[],"limits":`+limits+`}`)
	}
	r := mustRun(t, e, "apps", "apply", manifest(`{"maxPerSecond":5,"maxInFlight":2}`))
	wantContains(t, "stdout", r.stdout, "billing: applied", "limits: 5/s, 2 in flight (were: none)")
	r = mustRun(t, e, "apps", "diff", manifest(`{"maxPerSecond":2.5}`))
	wantContains(t, "stdout", r.stdout, "billing: would change", "limits: 2.5/s (now: 5/s, 2 in flight)")
	r = mustRun(t, e, "apps", "apply", manifest(`{"maxPerSecond":2.5}`))
	wantContains(t, "stdout", r.stdout, "limits: 2.5/s (were: 5/s, 2 in flight)")
	r = mustRun(t, e, "apps", "show", "billing")
	wantContains(t, "stdout", r.stdout, "Limits:", "2.5/s")
	r = mustRun(t, e, "audit", "--action", "app.limits_changed", "--target", "billing", "--json")
	wantContains(t, "stdout", r.stdout, `"maxPerSecond": 2.5`, `"maxInFlight": 2`)

	r = run(t, e, "apps", "apply", manifest(`{"maxPerSecond":0,"maxInFlight":-1}`))
	if r.code != ExitInvalid {
		t.Fatalf("exit %d, want %d\nstderr:\n%s", r.code, ExitInvalid, r.stderr)
	}
	wantContains(t, "stderr", r.stderr, `(app "billing"): limits.maxPerSecond: must be a number of deliveries per second`,
		`(app "billing"): limits.maxInFlight: must be an integer from 1 to 100000, got -1`)
}
