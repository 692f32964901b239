package workflows

import (
	"go.temporal.io/sdk/workflow"
)

// HeldKeysChange is the workflow.GetVersion change id of how a run learns
// of the events the relay did not signal. The relay does not signal the new
// events of a key whose head is failed or has failed twice (its outcome
// rows say so: store.HeldKeys); they are in the rows. Version 1: once a head
// this run held on resolves (delivered after failed attempts, cancelled,
// skipped, redelivered, re-armed, expired), the run reads the key's rows
// after its cursor (refillFromLog) before it delivers on, idles or
// completes, so such an event waits for its head and no longer; cancel
// --all and a removal drop those rows too (dropBacklog). A run at
// workflow.DefaultVersion (recorded before it) reads them before it
// completes, after its idle timeout.
//
// The version is asked for only when a held head resolves, so a key that
// never holds records no marker, and a run that was under way before the
// upgrade takes the new behaviour at its next such moment. A run at
// OneMarkerVersion does not ask: it is at HeldKeysVersion.
const HeldKeysChange = "held-keys"

// HeldKeysVersion is the HeldKeysChange version of the read on resolve.
const HeldKeysVersion = 1

// holding reports whether the key holds on its head in a way the relay,
// from the rows, may take as a reason not to signal: the head failed, or
// has failed attempts (the relay waits for two), or it was re-armed: a
// re-arm writes no row, so the row says failed until the re-armed attempts
// write theirs. A pause or a wait of the
// key (unreachable subscriber, inactive subscription) does not count: the
// rows do not show it, so the relay signals such a key as usual.
func (d *delivery) holding() bool {
	head := d.head()
	return head != nil && (head.Failed || head.Attempts > 0 || head.Event.ID == d.rearmed)
}

// noteHeld is called on every turn of a run at QueueFromLogVersion, before
// refillFromLog: when the key held on its head at an earlier turn and does
// no more, the rows after the cursor are read (d.Backlog), since the relay
// may have left events of the key unsignalled meanwhile.
func (d *delivery) noteHeld(ctx workflow.Context) {
	if !d.loaded {
		return // the start's read comes first and reads them all
	}
	if d.holding() {
		d.heldSeen = true
		return
	}
	if !d.heldSeen {
		return
	}
	d.heldSeen = false
	if d.readsUnsignalled(ctx) {
		d.Backlog = true
	}
}

// readsUnsignalled reports whether this run is at HeldKeysVersion: always
// at OneMarkerVersion, otherwise as its marker says.
func (d *delivery) readsUnsignalled(ctx workflow.Context) bool {
	return d.oneMarker || workflow.GetVersion(ctx, HeldKeysChange, workflow.DefaultVersion, HeldKeysVersion) >= HeldKeysVersion
}

// mayHaveUnsignalled reports whether the key's rows may hold events after
// the cursor that the relay did not signal: it holds on its head now, or
// did at an earlier turn. An operator's cancel --all, or the removal of the
// subscription, drops them with the backlog.
func (d *delivery) mayHaveUnsignalled(ctx workflow.Context) bool {
	return d.fromLog && d.loaded && (d.heldSeen || d.holding()) && d.readsUnsignalled(ctx)
}

// noteSettledAttempts marks the key as having held when an execution
// delivered an event after failed attempts the run did not see (a regular
// activity retried by Temporal): the rows showed the key held meanwhile.
func (d *delivery) noteSettledAttempts(attempts int) {
	if attempts > 1 {
		d.heldSeen = true
	}
}

// noteFailedAttempts marks the key as having held when the run learns,
// outside a turn's start, that its head has failed attempts: an attempt
// report or an interrupted execution's failure during one regular
// execution, or a head skipped after its attempts. The head may leave the
// queue in the same turn (skipped, cancelled), so noteHeld would not see it
// hold, while the relay saw its row at two attempts.
func (d *delivery) noteFailedAttempts(attempts int) {
	if attempts > 0 {
		d.heldSeen = true
	}
}
