package cli

import (
	"fmt"
	"io"
	"strings"

	"herald/manifest"
	"herald/store"
)

// diffOutput is the JSON of apps diff.
type diffOutput struct {
	Apps []store.ApplyResult `json:"apps"`
}

// runAppsDiff shows what applying the manifests under the given paths would
// change, and changes nothing. It exits 0 whatever the differences, 2 for an
// invalid manifest.
func runAppsDiff(inv *invocation, args []string) error {
	fs := inv.newFlags("apps diff")
	paths, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(paths) == 0 {
		return usagef("apps", "apps diff: missing PATH (a manifest file or a directory of them)")
	}
	if err := inv.act(); err != nil {
		return err
	}
	manifests, err := manifest.Load(paths...)
	if err != nil {
		return inv.reportInvalidManifests("apps diff", "nothing was compared", err)
	}
	st, err := inv.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	results, err := st.DiffManifests(inv.ctx, manifests)
	if err != nil {
		return err
	}
	for i := range results {
		results[i].StateChanges = nonNil(results[i].StateChanges)
		results[i].BreakingChanges = nonNil(results[i].BreakingChanges)
		if d := results[i].Details; d != nil {
			for _, l := range []*[]string{&d.DeclarationsAdded, &d.DeclarationsChanged, &d.DeclarationsRetired,
				&d.DeclarationsRestored, &d.SubscriptionsAdded, &d.SubscriptionsRestored, &d.SubscriptionsCancelled} {
				*l = nonNil(*l)
			}
		}
	}
	if inv.json {
		return writeJSON(inv.stdout, diffOutput{Apps: results})
	}
	for _, res := range results {
		printDiff(inv.stdout, res)
	}
	return nil
}

// printDiff prints what applying one manifest would change.
func printDiff(w io.Writer, res store.ApplyResult) {
	if res.Unchanged {
		fmt.Fprintf(w, "%s: unchanged (same manifest as applied)\n", res.App)
		return
	}
	fmt.Fprintf(w, "%s: would change\n", res.App)
	d := res.Details
	if d == nil {
		d = &store.ApplyDetails{}
	}
	lines := []struct {
		label string
		names []string
	}{
		{"declarations added", d.DeclarationsAdded},
		{"declarations changed", d.DeclarationsChanged},
		{"declarations retired", d.DeclarationsRetired},
		{"declarations restored", d.DeclarationsRestored},
		{"subscriptions added", d.SubscriptionsAdded},
		{"subscriptions restored", d.SubscriptionsRestored},
		{"subscriptions removed", d.SubscriptionsCancelled},
	}
	shown := false
	for _, l := range lines {
		if len(l.names) > 0 {
			shown = true
			fmt.Fprintf(w, "  %s: %s\n", l.label, strings.Join(l.names, ", "))
		}
	}
	if res.LimitsFrom != nil && res.LimitsTo != nil {
		shown = true
		fmt.Fprintf(w, "  limits: %s (now: %s)\n", res.LimitsTo, res.LimitsFrom)
	}
	if len(res.BreakingChanges) > 0 {
		shown = true
		fmt.Fprintln(w, "  breaking dataSchema changes (apply refuses them without --allow-breaking --reason R;")
		fmt.Fprintln(w, "  declare a new version instead):")
		printBreakingChanges(w, res.BreakingChanges)
	}
	if len(res.StateChanges) > 0 {
		shown = true
		fmt.Fprintln(w, "  state changes:")
		t := newTable(w, "    SUBSCRIPTION", "FROM", "TO")
		for _, c := range res.StateChanges {
			t.row("    "+c.SubscriptionID, stateText(c.From, c.FromReason), stateText(c.To, c.ToReason))
		}
		_ = t.flush()
	}
	if !shown {
		fmt.Fprintln(w, "  no declaration or subscription changes (endpoint or other app settings only)")
	}
}
