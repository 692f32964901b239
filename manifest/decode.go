package manifest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// member is one name/value pair of a JSON object, in document order.
type member struct {
	name  string
	value json.RawMessage
}

// objectMembers splits a JSON object into its members. It fails when raw is
// not an object; raw must be valid JSON.
func objectMembers(raw json.RawMessage) ([]member, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var out []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		name, ok := tok.(string)
		if !ok {
			return nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		out = append(out, member{name, v})
	}
	return out, true
}

// fieldsOf returns the members of the object at field, reporting repeated
// names and names not in allowed. ok is false when raw is not an object.
func fieldsOf(raw json.RawMessage, field string, allowed []string, ps *problems) (map[string]json.RawMessage, bool) {
	members, ok := objectMembers(raw)
	if !ok {
		if field == "" {
			ps.add("", "the manifest must be a JSON object (with app, endpoint, events and subscribes)")
		} else {
			ps.add(field, "must be an object")
		}
		return nil, false
	}
	fields := make(map[string]json.RawMessage, len(members))
	for _, mb := range members {
		path := joinField(field, mb.name)
		if _, dup := fields[mb.name]; dup {
			ps.add(path, "field %s appears more than once", quote(mb.name))
			continue
		}
		fields[mb.name] = mb.value
		if !slices.Contains(allowed, mb.name) {
			ps.add(path, "unknown field %s (known fields: %s)", quote(mb.name), strings.Join(allowed, ", "))
		}
	}
	return fields, true
}

var plainName = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$-]*$`)

// joinField appends a member name to a field path, quoting odd names.
func joinField(parent, name string) string {
	if !plainName.MatchString(name) {
		return parent + "[" + strconv.Quote(name) + "]"
	}
	if parent == "" {
		return name
	}
	return parent + "." + name
}

var (
	manifestFields     = []string{"app", "endpoint", "deliveryPath", "events", "subscribes", "limits"}
	limitsFields       = []string{"maxPerSecond", "maxInFlight"}
	eventFields        = []string{"name", "version", "subject", "title", "description", "automation", "place", "dataSchema", "deprecated"}
	subscriptionFields = []string{"type", "version", "filter", "onFailure", "maxAttempts"}
)

// decode fills m from a JSON document, recording type and structure problems;
// the values themselves are checked by validate. It returns false when the
// document is not an object, leaving nothing to validate.
func (m *Manifest) decode(data []byte, ps *problems) bool {
	fields, ok := fieldsOf(data, "", manifestFields, ps)
	if !ok {
		return false
	}
	m.App = decodeString(fields, "app", "", ps)
	m.Endpoint = strings.TrimRight(decodeString(fields, "endpoint", "", ps), "/")
	m.DeliveryPath = decodeString(fields, "deliveryPath", "", ps)
	for i, raw := range decodeArray(fields, "events", "", ps) {
		m.Events = append(m.Events, decodeEvent(raw, fmt.Sprintf("events[%d]", i), ps))
	}
	for i, raw := range decodeArray(fields, "subscribes", "", ps) {
		m.Subscribes = append(m.Subscribes, decodeSubscription(raw, fmt.Sprintf("subscribes[%d]", i), ps))
	}
	if v, ok := fields["limits"]; ok && !isNull(v) {
		m.Limits = decodeLimits(v, ps)
	}
	return true
}

// decodeLimits reads the limits object; the values are checked by validate.
// A value out of range is reported here, as written, and left zero.
func decodeLimits(raw json.RawMessage, ps *problems) *Limits {
	fields, ok := fieldsOf(raw, "limits", limitsFields, ps)
	if !ok {
		return nil
	}
	l := &Limits{}
	if v, ok := fields["maxPerSecond"]; ok && !isNull(v) {
		num, isNumber := decodeNumber(v)
		f, err := num.Float64()
		if !isNumber || err != nil || !validPerSecond(f) {
			ps.add("limits.maxPerSecond", "%s", limitMessage("maxPerSecond", truncate(string(compact(v)), 40)))
		} else {
			l.MaxPerSecond = f
		}
	}
	if v, ok := fields["maxInFlight"]; ok && !isNull(v) {
		num, isNumber := decodeNumber(v)
		i, err := strconv.Atoi(num.String())
		if !isNumber || err != nil || i <= 0 || i > MaxInFlightLimit {
			ps.add("limits.maxInFlight", "%s", limitMessage("maxInFlight", truncate(string(compact(v)), 40)))
		} else {
			l.MaxInFlight = i
		}
	}
	return l
}

func decodeEvent(raw json.RawMessage, field string, ps *problems) Event {
	var ev Event
	fields, ok := fieldsOf(raw, field, eventFields, ps)
	if !ok {
		return ev
	}
	ev.Name = decodeString(fields, "name", field, ps)
	ev.Version = decodeVersion(fields, field, ps)
	ev.Subject = decodeString(fields, "subject", field, ps)
	ev.Title = decodeString(fields, "title", field, ps)
	ev.Description = decodeString(fields, "description", field, ps)
	if v, ok := fields["automation"]; ok && !isNull(v) {
		var b bool
		if err := json.Unmarshal(v, &b); err != nil {
			ps.add(joinField(field, "automation"), "must be true or false")
		} else {
			ev.Automation = &b
		}
	}
	if v, ok := fields["place"]; ok && !isNull(v) {
		ev.Place = compact(v)
	}
	if v, ok := fields["deprecated"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &ev.Deprecated); err != nil {
			ps.add(joinField(field, "deprecated"), "must be true or false")
		}
	}
	if v, ok := fields["dataSchema"]; ok && !isNull(v) {
		ev.DataSchema = compact(v)
	}
	return ev
}

func decodeSubscription(raw json.RawMessage, field string, ps *problems) Subscription {
	var sub Subscription
	fields, ok := fieldsOf(raw, field, subscriptionFields, ps)
	if !ok {
		return sub
	}
	sub.Type = decodeString(fields, "type", field, ps)
	sub.Version = decodeVersion(fields, field, ps)
	sub.Filter = decodeString(fields, "filter", field, ps)
	sub.OnFailure = decodeString(fields, "onFailure", field, ps)
	if v, ok := fields["maxAttempts"]; ok && !isNull(v) {
		num, isNumber := decodeNumber(v)
		i, err := strconv.Atoi(num.String())
		if !isNumber || err != nil || i < 1 || i > MaxAttemptsLimit {
			ps.add(joinField(field, "maxAttempts"), "must be an integer from 1 to %d, not %s",
				MaxAttemptsLimit, truncate(string(compact(v)), 40))
		} else {
			sub.MaxAttempts = i
		}
	}
	return sub
}

// decodeString returns the string member name of fields; null or absent is "".
func decodeString(fields map[string]json.RawMessage, name, parent string, ps *problems) string {
	v, ok := fields[name]
	if !ok || isNull(v) {
		return ""
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		ps.add(joinField(parent, name), "must be a string")
	}
	return s
}

// decodeArray returns the elements of the array member name; null or absent is
// no elements.
func decodeArray(fields map[string]json.RawMessage, name, parent string, ps *problems) []json.RawMessage {
	v, ok := fields[name]
	if !ok || isNull(v) {
		return nil
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(v, &elems); err != nil {
		ps.add(joinField(parent, name), "must be an array")
		return nil
	}
	return elems
}

// decodeVersion returns the "version" member of fields. A JSON number that is
// not an integer in range (1.5, 1e9, -1) is reported here with the number as
// written, rather than as a Go decoding error.
func decodeVersion(fields map[string]json.RawMessage, parent string, ps *problems) int {
	field := joinField(parent, "version")
	v, ok := fields["version"]
	if !ok || isNull(v) {
		ps.add(field, "is required")
		return 0
	}
	num, isNumber := decodeNumber(v)
	if !isNumber {
		ps.add(field, "%s", versionMessage(truncate(string(compact(v)), 40)))
		return 0
	}
	i, err := strconv.Atoi(num.String())
	if err != nil || !ValidVersion(i) {
		ps.add(field, "%s", versionMessage(truncate(num.String(), 40)))
		return 0
	}
	return i
}

func isNull(v json.RawMessage) bool { return string(bytes.TrimSpace(v)) == "null" }

// compact removes insignificant white space from valid JSON.
func compact(v json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	if err := json.Compact(&buf, v); err != nil {
		return v
	}
	return buf.Bytes()
}

func validJSON(v json.RawMessage) bool {
	_, err := decodeJSON(v)
	return err == nil
}

// decodeNumber returns v as a number, if it is a JSON number (and not, say, a
// string holding one).
func decodeNumber(v json.RawMessage) (json.Number, bool) {
	x, err := decodeJSON(v)
	if err != nil {
		return "", false
	}
	n, ok := x.(json.Number)
	return n, ok
}
