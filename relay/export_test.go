package relay

import "time"

// FilterRests reports whether the filter text of subscription id rests now,
// and the reason its events are counted under meanwhile.
func (r *Relay) FilterRests(id, text string) (string, bool) { return r.resting(id, text, time.Now()) }

// FilterErrorStreak is filterErrorStreak.
const FilterErrorStreak = filterErrorStreak

// AbandonOnStop makes r stop, when its context ends, as a frozen worker
// would: giving nothing back.
func AbandonOnStop(r *Relay) { r.abandon = true }
