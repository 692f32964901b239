package publish

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"herald/envelope"
	"herald/internal/jsonvalue"
	"herald/manifest"
	"herald/store"
)

// Limits of docs/design.md#identifiers.
const (
	// MaxSubjectBytes is the longest subject key.
	MaxSubjectBytes = 200
	// MinVersion and MaxVersion bound an event version.
	MinVersion, MaxVersion = 1, 1000000
)

// declared is an un-retired declaration with its compiled data schema.
type declared struct {
	store.DeclaredEvent
	schema *jsonschema.Schema
}

// checkInput is everything validation needs besides the request: what the
// store said about the app and the declaration, and the publisher's settings.
type checkInput struct {
	appKnown      bool
	decl          *declared // nil when type@version is not declared
	now           time.Time // the event time when the request has none
	newID         string    // the event id when the request has none
	maxEventBytes int
	// budget is what is left of the request's validation budget (nil:
	// only the per-event budget applies).
	budget *manifest.Budget
	// trace is the W3C trace context of the publish span (nil without
	// one): stored with the event and written into its envelope.
	trace store.TraceContext
}

// ownsType reports whether typ is "<app>.<name>" for the given app.
func ownsType(app, typ string) bool {
	return len(typ) > len(app)+1 && strings.HasPrefix(typ, app+".")
}

// validateRequest runs the checks of docs/design.md#publishing in order on r and builds the
// event to insert. It touches no database: the caller looks the app and the
// declaration up first. The id_conflict check needs the event log and is left
// to the insert.
func validateRequest(r Request, in checkInput) (store.NewEvent, *Rejection) {
	if r.App == "" {
		return store.NewEvent{}, &Rejection{Code: CodeUnknownApp, Message: "app is missing"}
	}
	if r.App == store.HeraldApp {
		// Herald's operational events come from Herald only, so a
		// subscriber can trust them (docs/operational-events.md).
		return store.NewEvent{}, &Rejection{Code: CodeUnknownApp,
			Message: fmt.Sprintf("app %q is Herald's own: only Herald publishes its operational events", store.HeraldApp)}
	}
	if !in.appKnown {
		return store.NewEvent{}, &Rejection{Code: CodeUnknownApp,
			Message: fmt.Sprintf("app %s is unknown or removed", quote(r.App))}
	}
	if !ownsType(r.App, r.Type) {
		return store.NewEvent{}, &Rejection{Code: CodeTypeNotOwned,
			Message: fmt.Sprintf("type %s does not belong to app %s: it must start with %s",
				quote(r.Type), quote(r.App), quote(r.App+"."))}
	}
	if r.Version < MinVersion || r.Version > MaxVersion {
		return store.NewEvent{}, &Rejection{Code: CodeEventNotDeclared,
			Message: fmt.Sprintf("version %d is out of range %d..%d", r.Version, MinVersion, MaxVersion)}
	}
	if in.decl == nil || in.decl.App != r.App || in.decl.Type != r.Type || in.decl.Version != r.Version {
		return store.NewEvent{}, &Rejection{Code: CodeEventNotDeclared,
			Message: fmt.Sprintf("%s@%d is not declared (or its declaration is retired)", quote(r.Type), r.Version)}
	}
	id, rej := eventID(r.ID, in.newID)
	if rej != nil {
		return store.NewEvent{}, rej
	}
	if rej := checkSubject(r.Subject); rej != nil {
		return store.NewEvent{}, rej
	}
	data, canonical, rej := checkData(r.Data, in.decl, in.maxEventBytes, in.budget)
	if rej != nil {
		return store.NewEvent{}, rej
	}
	t := r.Time
	if t.IsZero() {
		t = in.now
	}
	env := envelope.Envelope{ID: id, App: r.App, Type: r.Type, Subject: r.Subject, Time: t,
		Version: r.Version, Data: data,
		TraceParent: in.trace["traceparent"], TraceState: in.trace["tracestate"]}.Encode()
	if len(env) > in.maxEventBytes {
		return store.NewEvent{}, &Rejection{Code: CodePayloadTooLarge,
			Message: fmt.Sprintf("the encoded event is %d bytes, over the limit of %d bytes", len(env), in.maxEventBytes)}
	}
	return store.NewEvent{
		ID:           id,
		SourceApp:    r.App,
		Type:         r.Type,
		Version:      r.Version,
		Subject:      r.Subject,
		Envelope:     env,
		ContentHash:  envelope.ContentHash(r.App, r.Type, r.Version, r.Subject, canonical),
		TraceContext: in.trace,
	}, nil
}

// eventID returns the request's id in canonical lower-case form, or generated
// when the request has none. Only the hyphenated 36-character form is
// accepted, and not the nil UUID (almost always an unset variable).
func eventID(given, generated string) (string, *Rejection) {
	if given == "" {
		return generated, nil
	}
	u, err := uuid.Parse(given)
	if err != nil || len(given) != 36 || u == uuid.Nil {
		return "", &Rejection{Code: CodeIDInvalid,
			Message: fmt.Sprintf("id %s is not a UUID in the form xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (nil UUID refused)", quote(given))}
	}
	return u.String(), nil
}

// checkSubject enforces docs/design.md#identifiers: 1..200 bytes of printable UTF-8.
func checkSubject(s string) *Rejection {
	switch {
	case s == "":
		return &Rejection{Code: CodeSubjectInvalid, Message: "subject is missing"}
	case len(s) > MaxSubjectBytes:
		return &Rejection{Code: CodeSubjectInvalid,
			Message: fmt.Sprintf("subject is %d bytes, longer than %d", len(s), MaxSubjectBytes)}
	case !utf8.ValidString(s):
		return &Rejection{Code: CodeSubjectInvalid, Message: "subject is not valid UTF-8"}
	}
	for i, c := range s {
		if !unicode.IsPrint(c) {
			return &Rejection{Code: CodeSubjectInvalid,
				Message: fmt.Sprintf("subject has a control or non-printable character %U at byte %d", c, i)}
		}
	}
	return nil
}

// checkData checks that data is JSON that satisfies the declared schema and
// returns it compacted (for the envelope) and canonical (for the hash).
// Data longer than the event limit is refused before it is parsed: it could
// not fit in an event, and parsing and validating megabytes first would cost
// far more than the refusal. Data whose validation would exceed the event's
// or the request's validation budget is refused before it is validated.
func checkData(data json.RawMessage, decl *declared, maxEventBytes int, budget *manifest.Budget) (compact, canonical []byte, rej *Rejection) {
	if len(data) > maxEventBytes {
		return nil, nil, &Rejection{Code: CodePayloadTooLarge,
			Message: fmt.Sprintf("data is %d bytes, over the limit of %d bytes for an event (checked before parsing, white space included)", len(data), maxEventBytes)}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil, &Rejection{Code: CodeDataInvalid, Message: "data is missing"}
	}
	if !utf8.Valid(data) {
		return nil, nil, &Rejection{Code: CodeDataInvalid, Message: "data is not valid UTF-8"}
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, data); err != nil {
		return nil, nil, &Rejection{Code: CodeDataInvalid, Message: "data is not valid JSON: " + err.Error()}
	}
	// One decoding serves the schema and the content hash.
	doc, err := jsonvalue.Decode(buf.Bytes())
	if err != nil {
		return nil, nil, &Rejection{Code: CodeDataInvalid, Message: "data is not valid JSON: " + err.Error()}
	}
	errs, err := manifest.ValidateValueWithin(decl.schema, doc, budget)
	if err != nil {
		return nil, nil, &Rejection{Code: CodeValidationBudget,
			Message: fmt.Sprintf("data of %s@%d is refused unchecked: %v", decl.Type, decl.Version, err)}
	}
	if len(errs) > 0 {
		return nil, nil, &Rejection{Code: CodeDataInvalid,
			Message: fmt.Sprintf("data does not match the schema of %s@%d: %s", decl.Type, decl.Version, dataErrorsMessage(errs)),
			Errors:  errs}
	}
	canonical, err = envelope.CanonicalValue(doc)
	if err != nil {
		// A decoded value always encodes; this is a defect, not the data's.
		return nil, nil, &Rejection{Code: CodeDataInvalid, Message: "data cannot be read: " + err.Error()}
	}
	return buf.Bytes(), canonical, nil
}
