package subscriber

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestHandlerResults(t *testing.T) {
	tests := []struct {
		name           string
		result         func(Event) error
		wantStatus     int
		wantCode       string
		wantRetryAfter string
		wantMessage    string
	}{
		{"nil", func(Event) error { return nil }, http.StatusNoContent, "", "", ""},
		{"Reject", func(Event) error { return Reject(errors.New("name too long")) },
			http.StatusUnprocessableEntity, CodeRejected, "", "name too long"},
		{"wrapped Reject", func(Event) error { return fmt.Errorf("import person: %w", Reject(errors.New("bad"))) },
			http.StatusUnprocessableEntity, CodeRejected, "", "import person"},
		{"DecodeData mismatch", func(ev Event) error {
			var v struct{ Name int }
			return ev.DecodeData(&v)
		}, http.StatusUnprocessableEntity, CodeRejected, "", "decode data"},
		{"plain error", func(Event) error { return errors.New("database down") },
			http.StatusInternalServerError, CodeHandlerFailed, "", "database down"},
		{"panic", func(Event) error { panic("boom: secret-detail") },
			http.StatusInternalServerError, CodeHandlerPanic, "", panicMessage},
		{"Retry", func(Event) error { return Retry(90*time.Second, errors.New("busy")) },
			http.StatusServiceUnavailable, CodeRetryLater, "90", "busy"},
		{"Retry rounds up", func(Event) error { return Retry(1500*time.Millisecond, nil) },
			http.StatusServiceUnavailable, CodeRetryLater, "2", "retry after"},
		{"Retry without delay", func(Event) error { return Retry(0, errors.New("later")) },
			http.StatusServiceUnavailable, CodeRetryLater, "", "later"},
		{"WithStatus 410", func(Event) error { return WithStatus(http.StatusGone, errors.New("gone")) },
			http.StatusGone, CodeHandlerFailed, "", "gone"},
		{"WithStatus 200 is not a success", func(Event) error { return WithStatus(http.StatusOK, nil) },
			http.StatusInternalServerError, CodeHandlerFailed, "", "status 200"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := newClock()
			signer := newSigner(t, clock)
			rec := recorder{result: tc.result}
			var failures []Failure
			h, err := New(Config{
				Audience: testAudience, StaticKey: signer.PublicKey(), Now: clock.Now,
				OnFailure: func(_ *http.Request, f Failure) { failures = append(failures, f) },
			}, rec.handle)
			if err != nil {
				t.Fatal(err)
			}
			body := eventBody("e-1", "k")
			resp := post(h, sign(t, signer, body, "e-1", nil), body)
			if resp.Code != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.Code, tc.wantStatus, resp.Body)
			}
			got := responseCode(t, resp)
			if got.Error != tc.wantCode {
				t.Errorf("code %q, want %q", got.Error, tc.wantCode)
			}
			if !strings.Contains(got.Message, tc.wantMessage) {
				t.Errorf("message %q does not contain %q", got.Message, tc.wantMessage)
			}
			if strings.Contains(resp.Body.String(), "secret-detail") {
				t.Error("the panic value leaked into the response")
			}
			if ra := resp.Header().Get("Retry-After"); ra != tc.wantRetryAfter {
				t.Errorf("Retry-After %q, want %q", ra, tc.wantRetryAfter)
			}
			if tc.wantCode != "" {
				if len(failures) != 1 || failures[0].Event == nil || failures[0].Event.ID != "e-1" || failures[0].Err == nil {
					t.Errorf("OnFailure got %+v, want the failure with its event and error", failures)
				}
			}
		})
	}
}
