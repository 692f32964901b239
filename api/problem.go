package api

import (
	"encoding/json"
	"net/http"

	"herald/manifest"
	"herald/publish"
	"herald/workflows"
)

// Problem codes of the API beyond the publisher's rejection codes (docs/design.md#publishing).
const (
	CodeUnauthorized         = "unauthorized"
	CodeNotFound             = "not_found"
	CodeMethodNotAllowed     = "method_not_allowed"
	CodeUnsupportedMediaType = "unsupported_media_type"
	// CodeEventsRejected heads a batch whose events were refused for
	// different reasons; each event's own code is in the events list.
	CodeEventsRejected = "events_rejected"
	CodeInternal       = "internal_error"
	// CodeAuthThrottled (429, with Retry-After) answers a client address
	// that failed to authenticate too often; it is answered without a
	// database query.
	CodeAuthThrottled = "auth_throttled"
	// CodeTokenBusy (429, Retry-After: 1) answers a request whose token
	// has as many requests in flight as it may.
	CodeTokenBusy = "token_busy"
	// CodeAppBusy (429, Retry-After: 1) answers a request whose token's
	// app has as many requests in flight as it may, all its tokens
	// together.
	CodeAppBusy = "app_busy"
	// CodeLockTimeout (503, Retry-After: 1) answers a request that waited
	// LockTimeout for a lock another transaction holds (for a publish,
	// the key's stripe row, held by a transaction publishing a key of the
	// same type and version) and gave up: no event of the request was
	// accepted, no action taken.
	CodeLockTimeout = "lock_timeout"
)

// ProblemContentType is the media type of error answers (RFC 9457).
const ProblemContentType = "application/problem+json"

// problemTypePrefix makes a code a problem type URI.
const problemTypePrefix = "urn:herald:problem:"

// Problem is an RFC 9457 problem detail with Herald's extension members.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Code is the rejection code (docs/design.md#publishing) or one of the API's own codes.
	Code string `json:"code"`
	// Parameter names the query parameter a bad_parameter problem refuses.
	Parameter string `json:"parameter,omitempty"`
	// Result is a key's answer to an action that changed nothing
	// (nothing_to_do), as its Workflow Update gave it.
	Result *workflows.OpResult `json:"result,omitempty"`
	// Errors lists the schema violations of a data_invalid event.
	Errors []manifest.DataError `json:"errors,omitempty"`
	// Events lists each refused event of the request, by position.
	Events []EventProblem `json:"events,omitempty"`
	// Accepted lists the events of the same request that were accepted all
	// the same: a batch is settled per event.
	Accepted []Accepted `json:"accepted,omitempty"`
}

// EventProblem is one refused event of a request.
type EventProblem struct {
	// Index is the event's 0-based position in the request.
	Index int `json:"index"`
	// Line is the event's 1-based line of an NDJSON body.
	Line   int                  `json:"line,omitempty"`
	Code   string               `json:"code"`
	Status int                  `json:"status"`
	Detail string               `json:"detail"`
	Errors []manifest.DataError `json:"errors,omitempty"`
}

// Accepted is one accepted event.
type Accepted struct {
	Index int    `json:"index"`
	ID    string `json:"id"`
	Seq   int64  `json:"seq"`
	// Duplicate: the same id and content had been accepted before; nothing
	// new was recorded.
	Duplicate bool `json:"duplicate"`
}

// AcceptedResponse is the 202 answer: every event of the request accepted.
type AcceptedResponse struct {
	Accepted []Accepted `json:"accepted"`
}

// statusOf maps a rejection code to the HTTP status of the refusal.
func statusOf(code string) int {
	switch code {
	case publish.CodeUnknownApp, publish.CodeTypeNotOwned:
		return http.StatusForbidden
	case publish.CodePayloadTooLarge:
		return http.StatusRequestEntityTooLarge
	case publish.CodeIDConflict:
		return http.StatusConflict
	default:
		return http.StatusUnprocessableEntity
	}
}

// newProblem builds a problem of one code.
func newProblem(status int, code, detail string) Problem {
	return Problem{Type: problemTypePrefix + code, Title: http.StatusText(status), Status: status, Code: code, Detail: detail}
}

// writeProblem sends p as application/problem+json.
func writeProblem(w http.ResponseWriter, p Problem) {
	w.Header().Set("Content-Type", ProblemContentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	encode(w, p)
}

// writeJSON sends v as application/json.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	encode(w, v)
}

// encode writes v as JSON, leaving <, > and & readable: the answers are
// data, never embedded in HTML.
func encode(w http.ResponseWriter, v any) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // a failed write means the client went away
}
