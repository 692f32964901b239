package manifest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Hash returns the hex SHA-256 of the manifest's canonical content, so that
// re-formatting a file (white space, key order, string escapes, YAML or JSON)
// keeps the hash while any change of content alters it. Lists keep their
// order; an absent list equals an empty one, and an absent place equals
// "place": null. Source is not part of the content.
func (m *Manifest) Hash() string {
	c := Manifest{
		App:          m.App,
		Endpoint:     m.Endpoint,
		DeliveryPath: m.DeliveryPath,
		Events:       make([]Event, len(m.Events)),
		Subscribes:   make([]Subscription, len(m.Subscribes)),
	}
	if !m.Limits.IsZero() {
		l := *m.Limits
		c.Limits = &l
	}
	for i, ev := range m.Events {
		ev.DataSchema = canonicalJSON(ev.DataSchema)
		if ev.HasPlace() {
			ev.Place = canonicalJSON(ev.Place)
		} else {
			ev.Place = nil
		}
		c.Events[i] = ev
	}
	copy(c.Subscribes, m.Subscribes)
	b, err := json.Marshal(c)
	if err != nil {
		// Unreachable: canonicalJSON only yields valid JSON. Hash the error
		// text rather than panic, which still yields a stable value.
		b = []byte(err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// canonicalJSON re-encodes raw with object keys sorted and no insignificant
// white space; numbers keep their exact text. Raw that is not valid JSON
// (possible only in a Manifest built by hand) is encoded as a JSON string of
// its bytes, so the result is always valid JSON. Empty raw stays empty.
func canonicalJSON(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return nil
	}
	v, err := decodeJSON(raw)
	if err != nil {
		v = string(raw)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`null`)
	}
	return out
}
