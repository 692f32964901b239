package publish

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"herald/manifest"
)

// Rejection codes (docs/design.md#publishing). CodeIDInvalid is Herald's addition to the
// table: a given event id that is not a UUID. CodeValidationBudget refuses
// data whose validation would take more than the event's or the request's
// validation budget (manifest.MaxValidationSteps,
// manifest.MaxRequestValidationSteps); the data is not validated.
const (
	CodeUnknownApp       = "unknown_app"
	CodeTypeNotOwned     = "type_not_owned"
	CodeEventNotDeclared = "event_not_declared"
	CodeIDInvalid        = "id_invalid"
	CodeSubjectInvalid   = "subject_invalid"
	CodeDataInvalid      = "data_invalid"
	CodeValidationBudget = "validation_budget_exceeded"
	CodePayloadTooLarge  = "payload_too_large"
	CodeIDConflict       = "id_conflict"
)

// Rejection is a publish request refused for a reason the publisher must fix.
// It is an error so that Publish can return it; IsRejection tells it apart
// from a failure of Herald itself.
type Rejection struct {
	Code    string
	Message string
	// Errors lists each schema violation of a data_invalid rejection.
	Errors []manifest.DataError
}

// Error returns "<code>: <message>".
func (r *Rejection) Error() string { return r.Code + ": " + r.Message }

// IsRejection reports whether err is or wraps a *Rejection, and returns it.
func IsRejection(err error) (*Rejection, bool) {
	var r *Rejection
	if errors.As(err, &r) {
		return r, true
	}
	return nil, false
}

// dataErrorsMessage lists schema violations as "<json-pointer>: <message>",
// the root of the data shown as "(root)".
func dataErrorsMessage(errs []manifest.DataError) string {
	parts := make([]string, len(errs))
	for i, e := range errs {
		p := e.Pointer
		if p == "" {
			p = "(root)"
		}
		parts[i] = p + ": " + e.Message
	}
	return strings.Join(parts, "; ")
}

// maxQuotedBytes bounds a request value quoted in a message.
const maxQuotedBytes = 80

// quote quotes a request value for a message, shortened when it is long.
func quote(s string) string {
	if len(s) <= maxQuotedBytes {
		return strconv.Quote(s)
	}
	cut := maxQuotedBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "…"
}
