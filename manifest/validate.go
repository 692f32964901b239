package manifest

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"herald/filter"
)

// Limits on identifiers and values (docs/design.md#identifiers).
const (
	// MinVersion and MaxVersion bound event and subscription versions.
	MinVersion = 1
	MaxVersion = 1000000
	// MaxEventNameLen is the longest event name a manifest may declare.
	MaxEventNameLen = 120
	// MaxEndpointLen is the longest endpoint URL accepted.
	MaxEndpointLen = 2048
	// MaxPerSecondLimit and MaxInFlightLimit bound the values of an app's
	// limits; MinPerSecondLimit is the slowest rate accepted (one POST a day).
	MaxPerSecondLimit = 1000000
	MinPerSecondLimit = 1.0 / 86400
	MaxInFlightLimit  = 100000
)

var (
	appIDPattern     = regexp.MustCompile(`^[a-z][a-z0-9-]{0,79}$`)
	eventNamePattern = regexp.MustCompile(`^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*$`)
	// subjectPattern: 1 to 80 characters of lower-case letters, digits, '_'
	// and '-', starting with a letter, so that it reads like the app ids and
	// event names around it.
	subjectPattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,79}$`)
)

// ValidAppID reports whether s is a valid app id.
func ValidAppID(s string) bool { return appIDPattern.MatchString(s) }

// ValidEventName reports whether s is a valid event name (the part of an event
// type after the app id).
func ValidEventName(s string) bool {
	return len(s) <= MaxEventNameLen && eventNamePattern.MatchString(s)
}

// ValidVersion reports whether v is a valid event version.
func ValidVersion(v int) bool { return v >= MinVersion && v <= MaxVersion }

// ValidSubject reports whether s is a valid subject (the kind of thing an event
// is about): 1 to 80 characters of [a-z0-9_-], starting with a letter.
func ValidSubject(s string) bool { return subjectPattern.MatchString(s) }

// SplitEventType splits an event type "<app>.<name>" into its app id and event
// name; ok is false when either part is invalid.
func SplitEventType(eventType string) (app, name string, ok bool) {
	app, name, found := strings.Cut(eventType, ".")
	if !found || !ValidAppID(app) || !ValidEventName(name) {
		return "", "", false
	}
	return app, name, true
}

// versionMessage is the complaint about a bad version; got is the value as
// written.
func versionMessage(got string) string {
	return fmt.Sprintf("must be an integer from %d to %d, got %s", MinVersion, MaxVersion, got)
}

// Validate checks the manifest against docs/design.md#identifiers and #manifests: identifiers, the endpoint,
// the events with their JSON Schemas, and the subscriptions. It returns a
// *ValidationError listing every problem, or nil.
func (m *Manifest) Validate() error {
	var ps problems
	m.validate(&ps)
	return ps.asError(m.Source, appForMessages(m.App))
}

// validate appends every problem of m to ps, skipping fields for which ps
// already holds a problem (Parse records decoding problems first, and the zero
// value left behind would only be reported again less precisely).
func (m *Manifest) validate(ps *problems) {
	var found problems
	m.validateApp(&found)
	m.validateEndpoint(&found)
	m.validateEvents(&found)
	m.validateSubscribes(&found)
	m.validateLimits(&found)
	reported := make(map[string]bool, len(*ps))
	for _, p := range *ps {
		reported[p.Field] = true
	}
	for _, p := range found {
		if !reported[p.Field] {
			*ps = append(*ps, p)
		}
	}
}

func (m *Manifest) validateApp(ps *problems) {
	switch {
	case m.App == "":
		ps.add("app", "is required")
	case !ValidAppID(m.App):
		ps.add("app", "%s is not a valid app id: want 1 to 80 characters of a-z, 0-9 and '-', starting with a letter", quote(m.App))
	case m.App == ReservedApp && !m.builtin:
		ps.add("app", "%q is reserved for Herald's own operational events (herald.key.failed, ...); "+
			"subscribe to them from your app's manifest, under another app id", ReservedApp)
	}
}

func (m *Manifest) validateEndpoint(ps *problems) {
	if m.Endpoint == "" {
		ps.add("endpoint", "is required")
	} else if msg := checkEndpoint(m.Endpoint); msg != "" {
		ps.add("endpoint", "%s %s", quote(m.Endpoint), msg)
	}
	if m.DeliveryPath != "" {
		if msg := checkDeliveryPath(m.DeliveryPath); msg != "" {
			ps.add("deliveryPath", "%s %s", quote(m.DeliveryPath), msg)
		}
	}
}

// checkEndpoint returns what is wrong with an endpoint URL, or "".
func checkEndpoint(s string) string {
	if len(s) > MaxEndpointLen {
		return fmt.Sprintf("is longer than %d characters", MaxEndpointLen)
	}
	u, err := url.Parse(s)
	if err != nil {
		return "must be an absolute http or https URL"
	}
	switch {
	case !u.IsAbs() || u.Opaque != "":
		return "must be an absolute http or https URL"
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Sprintf("must be an http or https URL, not %s", u.Scheme)
	case u.Hostname() == "":
		return "must name a host"
	case u.User != nil:
		return "must not contain user information"
	case u.RawQuery != "" || u.ForceQuery:
		return "must not contain a query"
	case u.Fragment != "" || strings.Contains(s, "#"):
		return "must not contain a fragment"
	}
	return ""
}

// checkDeliveryPath returns what is wrong with a deliveryPath, or "".
func checkDeliveryPath(s string) string {
	if !strings.HasPrefix(s, "/") {
		return "must start with /"
	}
	if strings.ContainsAny(s, "?#") {
		return "must not contain a query or fragment"
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f {
			return "must not contain spaces or control characters"
		}
	}
	if _, err := url.ParseRequestURI(s); err != nil {
		return "is not a valid URL path"
	}
	return ""
}

// limitMessage is the complaint about a bad limit value; got is the value
// as written.
func limitMessage(field, got string) string {
	if field == "maxInFlight" {
		return fmt.Sprintf("must be an integer from 1 to %d, got %s", MaxInFlightLimit, got)
	}
	return fmt.Sprintf("must be a number of deliveries per second from 1/86400 (one a day) to %d, got %s",
		MaxPerSecondLimit, got)
}

// validPerSecond reports whether r is an accepted maxPerSecond. NaN fails
// every comparison, so the test is written to refuse it.
func validPerSecond(r float64) bool { return r >= MinPerSecondLimit && r <= MaxPerSecondLimit }

func (m *Manifest) validateLimits(ps *problems) {
	if m.Limits == nil {
		return
	}
	if r := m.Limits.MaxPerSecond; r != 0 && !validPerSecond(r) {
		ps.add("limits.maxPerSecond", "%s", limitMessage("maxPerSecond", fmt.Sprint(r)))
	}
	if n := m.Limits.MaxInFlight; n < 0 || n > MaxInFlightLimit {
		ps.add("limits.maxInFlight", "%s", limitMessage("maxInFlight", fmt.Sprint(n)))
	}
}

func (m *Manifest) validateEvents(ps *problems) {
	type key struct {
		name    string
		version int
	}
	seen := make(map[key]int, len(m.Events))
	for i, ev := range m.Events {
		field := fmt.Sprintf("events[%d]", i)
		nameOK, versionOK := ev.validateIdentity(ps, field)
		// Name the event in messages about its other fields when possible.
		label := ""
		if nameOK {
			label = fmt.Sprintf("event %q: ", ev.Name)
			if versionOK {
				label = fmt.Sprintf("event %q v%d: ", ev.Name, ev.Version)
			}
		}
		if nameOK && versionOK {
			k := key{ev.Name, ev.Version}
			if first, dup := seen[k]; dup {
				ps.add(field, "%sis declared twice (first at events[%d])", label, first)
			} else {
				seen[k] = i
			}
		}
		switch {
		case ev.Subject == "":
			ps.add(field+".subject", "%sis required", label)
		case !ValidSubject(ev.Subject):
			ps.add(field+".subject", "%s%s is not a valid subject: want 1 to 80 characters of a-z, 0-9, '_' and '-', starting with a letter", label, quote(ev.Subject))
		}
		if len(ev.DataSchema) == 0 || string(ev.DataSchema) == "null" {
			ps.add(field+".dataSchema", "%sdataSchema is required", label)
		} else if err := checkSchemaForApply(ev.DataSchema); errors.Is(err, ErrSchemaLimit) {
			ps.add(field+".dataSchema", "%sdataSchema is refused: %v", label, err)
		} else if err != nil {
			ps.add(field+".dataSchema", "%sdataSchema is not a valid JSON Schema: %v", label, err)
		}
		if len(ev.Place) > 0 && !validJSON(ev.Place) {
			ps.add(field+".place", "%splace is not valid JSON", label)
		}
	}
}

// validateIdentity checks an event's name and version, reporting whether each
// is valid.
func (ev Event) validateIdentity(ps *problems, field string) (nameOK, versionOK bool) {
	switch {
	case ev.Name == "":
		ps.add(field+".name", "is required")
	case len(ev.Name) > MaxEventNameLen:
		ps.add(field+".name", "%s is longer than %d characters", quote(ev.Name), MaxEventNameLen)
	case !eventNamePattern.MatchString(ev.Name):
		ps.add(field+".name", "%s is not a valid event name: want dot-separated words of a-z, 0-9, '_' and '-', each starting with a letter", quote(ev.Name))
	default:
		nameOK = true
	}
	versionOK = ValidVersion(ev.Version)
	if !versionOK {
		ps.add(field+".version", "%s", versionMessage(fmt.Sprint(ev.Version)))
	}
	return nameOK, versionOK
}

func (m *Manifest) validateSubscribes(ps *problems) {
	type key struct {
		eventType string
		version   int
	}
	seen := make(map[key]int, len(m.Subscribes))
	for i, sub := range m.Subscribes {
		field := fmt.Sprintf("subscribes[%d]", i)
		typeOK := false
		switch {
		case sub.Type == "":
			ps.add(field+".type", "is required")
		default:
			if _, _, ok := SplitEventType(sub.Type); ok {
				typeOK = true
			} else {
				ps.add(field+".type", "%s is not a valid event type: want <app>.<event-name>, such as contacts.person.updated", quote(sub.Type))
			}
		}
		versionOK := ValidVersion(sub.Version)
		if !versionOK {
			ps.add(field+".version", "%s", versionMessage(fmt.Sprint(sub.Version)))
		}
		if sub.Filter != "" {
			if _, err := filter.Compile(sub.Filter); err != nil {
				ps.add(field+".filter", "subscription to %s v%d: %v", sub.Type, sub.Version, err)
			}
		}
		switch sub.OnFailure {
		case "", OnFailureHold, OnFailureSkip:
		default:
			ps.add(field+".onFailure", "must be %q or %q, not %s", OnFailureHold, OnFailureSkip, quote(sub.OnFailure))
		}
		if sub.MaxAttempts < 0 || sub.MaxAttempts > MaxAttemptsLimit {
			ps.add(field+".maxAttempts", "must be an integer from 1 to %d, not %d", MaxAttemptsLimit, sub.MaxAttempts)
		}
		if typeOK && versionOK {
			k := key{sub.Type, sub.Version}
			if first, dup := seen[k]; dup {
				ps.add(field, "subscription to %s v%d is listed twice (first at subscribes[%d])", sub.Type, sub.Version, first)
			} else {
				seen[k] = i
			}
		}
	}
}
