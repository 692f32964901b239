package subscriber

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"unicode/utf8"
)

// Codes in the "error" field of a response body.
const (
	CodeMethodNotAllowed = "method_not_allowed"
	CodeBodyTooLarge     = "body_too_large"
	CodeBodyUnreadable   = "body_unreadable"
	CodeTokenMissing     = "token_missing"
	CodeTokenInvalid     = "token_invalid"
	CodeAlgNotAllowed    = "alg_not_allowed"
	CodeKidMissing       = "kid_missing"
	CodeKidUnknown       = "kid_unknown"
	CodeSignatureInvalid = "signature_invalid"
	CodeTokenExpired     = "token_expired"
	CodeTokenNotYetValid = "token_not_yet_valid"
	CodeAudienceMismatch = "audience_mismatch"
	CodeIssuerMismatch   = "issuer_mismatch"
	CodeBodyMismatch     = "body_mismatch"
	CodeReplayed         = "replayed"
	CodeEventInvalid     = "event_invalid"
	CodeRejected         = "rejected"       // the Handler returned Reject: 422
	CodeRetryLater       = "retry_later"    // the Handler returned Retry: 503
	CodeHandlerFailed    = "handler_failed" // any other error, or WithStatus
	CodeHandlerPanic     = "handler_panic"
)

const (
	// maxMessageBytes cuts error text; Herald stores at most 1,000 characters.
	maxMessageBytes = 1000
	// panicMessage is all a panic tells the caller: its value may hold data.
	panicMessage          = "handler panicked"
	retryAfterHeader      = "Retry-After"
	authenticateHeader    = "WWW-Authenticate"
	authenticateChallenge = `Bearer error="invalid_token"`
)

// failure is a delivery answered with an error status.
type failure struct {
	status int
	code   string
	err    error
}

func fail(status int, code string, err error) *failure {
	return &failure{status: status, code: code, err: err}
}

func unauthorized(code string, format string, args ...any) *failure {
	return fail(http.StatusUnauthorized, code, fmt.Errorf(format, args...))
}

// ServeHTTP verifies the delivery, decodes its event and runs the Handler.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.reply(w, r, fail(http.StatusMethodNotAllowed, CodeMethodNotAllowed,
			fmt.Errorf("method %s not allowed, use POST", r.Method)), nil)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			h.reply(w, r, fail(http.StatusRequestEntityTooLarge, CodeBodyTooLarge,
				fmt.Errorf("body larger than %d bytes", h.maxBody)), nil)
			return
		}
		h.reply(w, r, fail(http.StatusBadRequest, CodeBodyUnreadable, fmt.Errorf("read body: %w", err)), nil)
		return
	}

	d, f := h.verify(withSource(r.Context(), r.RemoteAddr), r.Header.Get("Authorization"), body)
	if f != nil {
		if f.status == http.StatusUnauthorized {
			w.Header().Set(authenticateHeader, authenticateChallenge)
		}
		h.reply(w, r, f, nil)
		return
	}
	if f := h.verifyWebhook(r.Header, body); f != nil {
		h.reply(w, r, f, nil)
		return
	}

	ev, err := decodeEvent(body)
	if err != nil {
		h.reply(w, r, fail(http.StatusBadRequest, CodeEventInvalid, err), nil)
		return
	}
	if d.EventID != "" && d.EventID != ev.ID {
		h.reply(w, r, fail(http.StatusBadRequest, CodeEventInvalid,
			fmt.Errorf("event id %q does not match the token's event_id %q", ev.ID, d.EventID)), nil)
		return
	}
	ev.Subscription = d.Subject
	ev.Attempt = d.Attempt
	ev.EventID = d.EventID
	ev.Audience = d.audience

	if f := h.run(r.Context(), ev); f != nil {
		if f.status == http.StatusServiceUnavailable {
			var retry *RetryError
			if errors.As(f.err, &retry) && retry.After > 0 {
				w.Header().Set(retryAfterHeader, strconv.FormatInt(retrySeconds(retry.After), 10))
			}
		}
		h.reply(w, r, f, &ev)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// run calls the Handler, recovering a panic, and maps its result.
func (h *handler) run(ctx context.Context, ev Event) (f *failure) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p) // the handler asked net/http to abort the response
			}
			f = fail(http.StatusInternalServerError, CodeHandlerPanic, fmt.Errorf("handler panic: %v", p))
		}
	}()
	err := h.handle(ctx, ev)
	if err == nil {
		return nil
	}
	var (
		reject *RejectError
		retry  *RetryError
		status *StatusError
	)
	switch {
	case errors.As(err, &reject):
		return fail(http.StatusUnprocessableEntity, CodeRejected, err)
	case errors.As(err, &retry):
		return fail(http.StatusServiceUnavailable, CodeRetryLater, err)
	case errors.As(err, &status):
		return fail(status.status(), CodeHandlerFailed, err)
	default:
		return fail(http.StatusInternalServerError, CodeHandlerFailed, err)
	}
}

// errorBody is the JSON body of every error response.
type errorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// reply writes f as a JSON error response and reports it to OnFailure.
func (h *handler) reply(w http.ResponseWriter, r *http.Request, f *failure, ev *Event) {
	msg := panicMessage
	if f.code != CodeHandlerPanic {
		msg = truncate(f.err.Error(), maxMessageBytes)
	}
	if h.onFailure != nil {
		h.onFailure(r, Failure{Status: f.status, Code: f.code, Message: msg, Err: f.err, Event: ev})
	}
	body, err := json.Marshal(errorBody{Error: f.code, Message: msg})
	if err != nil {
		body = []byte(`{"error":"` + f.code + `"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(f.status)
	_, _ = w.Write(append(body, '\n'))
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
