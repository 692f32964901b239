// Expiry: an event a key holds longer than Params.HoldExpiry is cancelled
// as retention_expired, whatever the key is doing.
package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"herald/activities"
	"herald/workflows/payload"
)

// nextExpiry is when the oldest queued event expires (zero when none is
// queued). The answer is cached: events are queued later than those before
// them, so only removals move it, and a stale, earlier answer only costs a
// wake-up that finds nothing.
func (d *delivery) nextExpiry() time.Time {
	if !d.expiryKnown {
		d.expiryAt = time.Time{}
		for _, it := range d.Queue {
			d.expiryAt = earliest(d.expiryAt, it.QueuedAt.Add(d.p.HoldExpiry))
		}
		d.expiryKnown = true
	}
	return d.expiryAt
}

// expire cancels, as retention_expired, every event held longer than the
// hold expiry.
func (d *delivery) expire(ctx workflow.Context, now time.Time) {
	if at := d.nextExpiry(); at.IsZero() || now.Before(at) {
		return
	}
	var rows []activities.OutcomeUpdate
	for i := 0; i < len(d.Queue); {
		if now.Before(d.Queue[i].QueuedAt.Add(d.p.HoldExpiry)) {
			i++
			continue
		}
		rows = append(rows, d.cancelAt(ctx, i, activities.RowExpired, activities.CodeRetentionExpired))
	}
	d.expiryKnown = false
	if len(rows) == 0 {
		return
	}
	ids := make([]string, 0, min(len(rows), 20))
	for _, r := range rows[:min(len(rows), 20)] {
		ids = append(ids, r.EventID)
	}
	d.record(ctx, rows, d.auditEntry(ctx, AuditDeliveryCancelled, "", "allowed", activities.CodeRetentionExpired, "",
		map[string]any{payload.MetaCount: len(rows), payload.MetaEventIDs: ids, payload.MetaHoldExpiry: d.p.HoldExpiry.String()}))
}
