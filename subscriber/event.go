package subscriber

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Event is a delivered CloudEvent (docs/design.md#publishing) with the delivery's metadata.
type Event struct {
	// CloudEvent attributes.
	SpecVersion     string
	ID              string
	Source          string // "app:<publisher>"
	Type            string // "<publisher>.<name>"
	Subject         string // the subject key
	Time            time.Time
	DataContentType string
	DataVersion     int // the declared version of the event type
	Data            json.RawMessage

	// Delivery metadata, from the verified token.
	Subscription string // sub: "<subscriber-app>:<event-type>@<version>"
	Attempt      int    // attempt number, from 1
	EventID      string // event_id; equals ID
	Audience     string // the configured audience the delivery was for
}

// DedupKey is the key to deduplicate the event on: "<publisher>:<id>",
// the same as the webhook-id header Herald sends it with
// (docs/design.md#the-http-contract-of-a-delivery). Ids are unique per
// publishing app only, so the id alone could take one app's event for a
// duplicate of another's. A source without the "app:" prefix is kept whole.
func (e Event) DedupKey() string {
	return strings.TrimPrefix(e.Source, "app:") + ":" + e.ID
}

// DecodeData unmarshals the event's data into v. A failure is returned as a
// Reject error, so a Handler that returns it answers 422: the data does not
// fit what the receiver expects, and retrying will not change that.
func (e Event) DecodeData(v any) error {
	if len(e.Data) == 0 {
		return Reject(errors.New("event has no data"))
	}
	if err := json.Unmarshal(e.Data, v); err != nil {
		return Reject(fmt.Errorf("decode data of %s event %s: %w", e.Type, e.ID, err))
	}
	return nil
}

// wireEvent is the CloudEvents 1.0 structured JSON form.
type wireEvent struct {
	SpecVersion     string          `json:"specversion"`
	ID              string          `json:"id"`
	Source          string          `json:"source"`
	Type            string          `json:"type"`
	Subject         string          `json:"subject"`
	Time            string          `json:"time"`
	DataContentType string          `json:"datacontenttype"`
	DataVersion     json.RawMessage `json:"dataversion"`
	Data            json.RawMessage `json:"data"`
}

// decodeEvent decodes and checks a CloudEvent body.
func decodeEvent(body []byte) (Event, error) {
	var w wireEvent
	if err := json.Unmarshal(body, &w); err != nil {
		return Event{}, fmt.Errorf("decode cloudevent: %w", err)
	}
	switch {
	case w.SpecVersion != "1.0":
		return Event{}, fmt.Errorf("cloudevent specversion %q, want \"1.0\"", w.SpecVersion)
	case w.ID == "":
		return Event{}, errors.New("cloudevent has no id")
	case w.Type == "":
		return Event{}, errors.New("cloudevent has no type")
	case w.Source == "":
		return Event{}, errors.New("cloudevent has no source")
	}
	if err := checkMembers(body); err != nil {
		return Event{}, err
	}
	ev := Event{
		SpecVersion:     w.SpecVersion,
		ID:              w.ID,
		Source:          w.Source,
		Type:            w.Type,
		Subject:         w.Subject,
		DataContentType: w.DataContentType,
		Data:            w.Data,
	}
	if w.Time != "" {
		t, err := time.Parse(time.RFC3339Nano, w.Time)
		if err != nil {
			return Event{}, fmt.Errorf("cloudevent time: %w", err)
		}
		ev.Time = t
	}
	v, err := parseDataVersion(w.DataVersion)
	if err != nil {
		return Event{}, err
	}
	ev.DataVersion = v
	return ev, nil
}

// checkMembers refuses a CloudEvent whose top-level members could be read
// otherwise than Herald checked them: encoding/json matches a member to a
// field whatever its case ("Source", even "ſource", is source) and keeps
// the last of repeated ones, while the database checked the body's exact
// "source", "type" and "subject" (a publisher role writes its own body).
// CloudEvents attribute names are lower-case ASCII; each may appear once.
func checkMembers(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return fmt.Errorf("decode cloudevent: not a JSON object (%v)", err)
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return fmt.Errorf("decode cloudevent: %w", err)
		}
		name, _ := t.(string)
		if name == "" {
			return errors.New("cloudevent member \"\": attribute names are lower-case letters and digits")
		}
		for _, c := range []byte(name) {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
				return fmt.Errorf("cloudevent member %q: attribute names are lower-case letters and digits", name)
			}
		}
		// Lower-case ASCII only: a repeat ignoring case is an exact one.
		if seen[name] {
			return fmt.Errorf("cloudevent member %q appears twice", name)
		}
		seen[name] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return fmt.Errorf("decode cloudevent: %w", err)
		}
	}
	return nil
}

// parseDataVersion reads the dataversion extension, a JSON integer or a
// string holding one (CloudEvents extensions are often strings); absent is 0.
func parseDataVersion(raw json.RawMessage) (int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	text := string(raw)
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &text); err != nil {
			return 0, fmt.Errorf("cloudevent dataversion: %w", err)
		}
	}
	v, err := strconv.Atoi(text)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("cloudevent dataversion %s: want a non-negative integer", raw)
	}
	return v, nil
}
