package cli

import (
	"bytes"
	"encoding/json"
	"fmt"

	"herald/store"
)

// runAudit lists audit rows, newest first.
func runAudit(inv *invocation, args []string) error {
	fs := inv.newFlags("audit")
	var f store.AuditFilter
	fs.StringVar(&f.TargetID, "target", "", "only rows about this target id (an app, subscription or delivery id; PREFIX* matches a prefix)")
	fs.StringVar(&f.Action, "action", "", "only rows of this action, e.g. subscription.state_changed")
	fs.IntVar(&f.Limit, "limit", store.DefaultAuditLimit, fmt.Sprintf("at most this many rows (1 to %d)", store.MaxAuditLimit))
	rest, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("audit", rest); err != nil {
		return err
	}
	if f.Limit < 1 || f.Limit > store.MaxAuditLimit {
		return usagef("audit", "audit: --limit must be from 1 to %d, got %d", store.MaxAuditLimit, f.Limit)
	}
	st, err := inv.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	rows, err := st.ListAudit(inv.ctx, f)
	if err != nil {
		return err
	}
	if inv.json {
		return writeJSON(inv.stdout, nonNil(rows))
	}
	if len(rows) == 0 {
		fmt.Fprintln(inv.stdout, "no matching audit rows")
		return nil
	}
	t := newTable(inv.stdout, "TIME", "ACTION", "LABEL", "OUTCOME", "ACTOR", "TARGET", "CODE", "DETAILS")
	for _, r := range rows {
		t.row(formatTime(r.At), r.Action, r.Label, r.Outcome, r.Actor, r.TargetType+" "+r.TargetID,
			dash(r.ErrorCode), compactJSON(r.Metadata))
	}
	return t.flush()
}

// compactJSON shows stored JSON on one line; "-" for an empty object.
func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	if s := b.String(); s != "{}" && s != "" && s != "null" {
		return s
	}
	return "-"
}
