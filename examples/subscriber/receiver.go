package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"herald/subscriber"
)

// retryAfter is the Retry-After sent when the receiver is told to fail with 503.
const retryAfter = 5 * time.Second

// failRule makes deliveries fail on purpose, to show Herald holding a key and
// recovering.
type failRule struct {
	// Status answered (4xx or 5xx).
	Status int `json:"status"`
	// Subjects limits the rule to these subject keys; empty means all.
	Subjects []string `json:"subjects,omitempty"`
	// Until ends the rule; zero means until told otherwise.
	Until time.Time `json:"until,omitzero"`
}

// matches reports whether the rule fails a delivery of subject at now.
func (r *failRule) matches(subject string, now time.Time) bool {
	if !r.Until.IsZero() && !now.Before(r.Until) {
		return false
	}
	return len(r.Subjects) == 0 || slices.Contains(r.Subjects, subject)
}

// record is one line of the -record file.
type record struct {
	Time         time.Time       `json:"time"`
	Audience     string          `json:"audience"`
	Subscription string          `json:"subscription"`
	Subject      string          `json:"subject"`
	Type         string          `json:"type"`
	ID           string          `json:"id"`
	DataVersion  int             `json:"dataversion"`
	Attempt      int             `json:"attempt"`
	Status       int             `json:"status"`
	Data         json.RawMessage `json:"data,omitempty"`
}

// receiver handles deliveries for the example apps.
type receiver struct {
	log *zap.Logger
	now func() time.Time

	mu   sync.Mutex
	rule *failRule // nil: every delivery succeeds

	recordMu sync.Mutex
	record   io.Writer // nil: no record
}

func newReceiver(log *zap.Logger, now func() time.Time, rule *failRule, rec io.Writer) *receiver {
	return &receiver{log: log, now: now, rule: rule, record: rec}
}

// routes returns the receiver's HTTP handler: deliveries at path (verified
// with cfg), /control/* to change the failure rule, and /healthz.
func (rv *receiver) routes(cfg subscriber.Config, path string) (http.Handler, error) {
	cfg.OnFailure = rv.logRefusal
	deliveries, err := subscriber.New(cfg, rv.handle)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(path, deliveries)
	mux.HandleFunc("POST /control/fail", rv.controlFail)
	mux.HandleFunc("POST /control/ok", rv.controlOK)
	mux.HandleFunc("GET /control", rv.controlShow)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux, nil
}

// handle logs and records one verified event, and fails it if told to.
func (rv *receiver) handle(_ context.Context, ev subscriber.Event) error {
	status := rv.statusFor(ev.Subject)
	rv.log.Info("event",
		zap.String("app", ev.Audience),
		zap.String("subscription", ev.Subscription),
		zap.String("subject", ev.Subject),
		zap.String("type", ev.Type),
		zap.String("id", ev.ID),
		zap.Int("attempt", ev.Attempt),
		zap.Int("status", status),
	)
	rv.writeRecord(record{
		Time: rv.now().UTC(), Audience: ev.Audience, Subscription: ev.Subscription, Subject: ev.Subject,
		Type: ev.Type, ID: ev.ID, DataVersion: ev.DataVersion, Attempt: ev.Attempt, Status: status, Data: ev.Data,
	})
	return failure(status)
}

// statusFor returns the status to answer for subject: 204 unless a rule
// matches. An expired rule is dropped, so the log shows the recovery.
func (rv *receiver) statusFor(subject string) int {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	if rv.rule == nil {
		return http.StatusNoContent
	}
	now := rv.now()
	if !rv.rule.Until.IsZero() && !now.Before(rv.rule.Until) {
		rv.log.Info("failure rule expired, accepting deliveries again")
		rv.rule = nil
		return http.StatusNoContent
	}
	if rv.rule.matches(subject, now) {
		return rv.rule.Status
	}
	return http.StatusNoContent
}

// failure is the Handler result that answers status.
func failure(status int) error {
	switch status {
	case http.StatusNoContent:
		return nil
	case http.StatusUnprocessableEntity:
		return subscriber.Reject(errors.New("example subscriber told to reject"))
	case http.StatusServiceUnavailable:
		return subscriber.Retry(retryAfter, errors.New("example subscriber told to fail"))
	case http.StatusInternalServerError:
		return errors.New("example subscriber told to fail")
	default:
		return subscriber.WithStatus(status, errors.New("example subscriber told to fail"))
	}
}

func (rv *receiver) writeRecord(r record) {
	if rv.record == nil {
		return
	}
	line, err := json.Marshal(r)
	if err != nil {
		rv.log.Error("encode record", zap.Error(err))
		return
	}
	rv.recordMu.Lock()
	defer rv.recordMu.Unlock()
	if _, err := rv.record.Write(append(line, '\n')); err != nil {
		rv.log.Error("write record", zap.Error(err))
	}
}

// logRefusal logs deliveries refused before the handler ran (bad token, bad
// event); handled events are logged by handle.
func (rv *receiver) logRefusal(r *http.Request, f subscriber.Failure) {
	if f.Event != nil {
		return
	}
	rv.log.Warn("delivery refused",
		zap.Int("status", f.Status),
		zap.String("code", f.Code),
		zap.String("reason", f.Message),
		zap.String("subscription", r.Header.Get("Herald-Subscription")),
		zap.String("eventId", r.Header.Get("Herald-Event-Id")),
		zap.String("eventSource", r.Header.Get("Herald-Event-Source")),
	)
}

// parseRule reads a failure rule from /control/fail's query:
// status (default 500), for (a Go duration, optional) and subject (repeated
// or comma-separated, optional).
func parseRule(q map[string][]string, now time.Time) (*failRule, error) {
	rule := &failRule{Status: http.StatusInternalServerError}
	if s := first(q["status"]); s != "" {
		code, err := strconv.Atoi(s)
		if err != nil {
			return nil, fmt.Errorf("status %q: %w", s, err)
		}
		rule.Status = code
	}
	if rule.Status < 400 || rule.Status > 599 {
		return nil, fmt.Errorf("status %d: want 400..599", rule.Status)
	}
	if s := first(q["for"]); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, fmt.Errorf("for %q: %w", s, err)
		}
		if d <= 0 {
			return nil, fmt.Errorf("for %q: want a positive duration", s)
		}
		rule.Until = now.Add(d)
	}
	for _, v := range q["subject"] {
		rule.Subjects = append(rule.Subjects, splitList(v)...)
	}
	return rule, nil
}

func first(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

// splitList splits a comma-separated list, dropping empty entries.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func (rv *receiver) controlFail(w http.ResponseWriter, r *http.Request) {
	rule, err := parseRule(r.URL.Query(), rv.now())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	rv.mu.Lock()
	rv.rule = rule
	rv.mu.Unlock()
	rv.log.Info("failing deliveries", zap.Int("status", rule.Status),
		zap.Strings("subjects", rule.Subjects), zap.Time("until", rule.Until))
	writeJSON(w, http.StatusOK, map[string]any{"failing": true, "rule": rule})
}

func (rv *receiver) controlOK(w http.ResponseWriter, _ *http.Request) {
	rv.mu.Lock()
	rv.rule = nil
	rv.mu.Unlock()
	rv.log.Info("accepting deliveries")
	writeJSON(w, http.StatusOK, map[string]any{"failing": false})
}

func (rv *receiver) controlShow(w http.ResponseWriter, _ *http.Request) {
	rv.mu.Lock()
	rule := rv.rule
	if rule != nil && !rule.Until.IsZero() && !rv.now().Before(rule.Until) {
		rule = nil
	}
	rv.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"failing": rule != nil, "rule": rule})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
