package relay

import "herald/store"

// audience returns the subscriptions of subs that receive ev. An
// operational event (herald.*) is about one subscription and goes only to
// subscriptions of that subscription's app (its data.subscriberApp): an app
// sees the failures of its own keys, never another app's subject keys or
// receivers' error bodies. One that names no app goes to nobody.
func audience(ev store.PendingEvent, subs []store.Deliverable) []store.Deliverable {
	if !store.IsHeraldType(ev.Type) || len(subs) == 0 {
		return subs
	}
	app := store.OperationalEventApp(ev.Envelope)
	if app == "" {
		return nil
	}
	var out []store.Deliverable
	for _, s := range subs {
		if s.App == app {
			out = append(out, s)
		}
	}
	return out
}
