package api

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestConsoleSession: a session cookie opens under the key that issued it
// until it expires, and not when any part of it is changed, under another
// key, or after its expiry; each session has its own sign-out field.
func TestConsoleSession(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	s := newSessions([]byte("0123456789abcdef0123456789abcdef"))
	value, issued := s.issue("0123456789abcdef", now)
	got, ok := s.open(value, now.Add(time.Minute))
	if !ok || got.id != issued.id || got.tokenID != "0123456789abcdef" || !got.expires.Equal(now.Add(ConsoleSessionTTL)) {
		t.Fatalf("open = %+v, %v; issued %+v", got, ok, issued)
	}
	if strings.Contains(value, "hrld_") {
		t.Fatalf("the cookie %q looks like a token", value)
	}
	if _, ok := s.open(value, now.Add(ConsoleSessionTTL)); ok {
		t.Error("an expired session opens")
	}
	if _, ok := newSessions([]byte("ffffffffffffffffffffffffffffffff")).open(value, now); ok {
		t.Error("a session opens under another key")
	}
	if _, ok := newSessions(nil).open(value, now); ok {
		t.Error("a session opens under a random key")
	}
	// Another token's id, a later expiry, another session id: each breaks the MAC.
	parts := strings.Split(value, ".")
	for i, repl := range map[int]string{1: "fedcba9876543210", 2: "99999999999", 3: strings.Repeat("0", 32)} {
		p := append([]string(nil), parts...)
		p[i] = repl
		if _, ok := s.open(strings.Join(p, "."), now); ok {
			t.Errorf("a session with part %d changed to %q opens", i, repl)
		}
	}
	other, _ := s.issue("0123456789abcdef", now)
	o, _ := s.open(other, now)
	if o.id == issued.id || s.signOutField(o) == s.signOutField(issued) {
		t.Error("two sessions share a session id or a sign-out field")
	}
	if s.signInField("a") == s.signInField("b") || s.signInField("a") == s.signOutField(session{id: "a"}) {
		t.Error("CSRF fields do not depend on their nonce and purpose")
	}
}

// FuzzConsoleSessionOpen: any cookie value is refused or opened without a
// panic, and a value opens only when it is exactly a value that was issued.
func FuzzConsoleSessionOpen(f *testing.F) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	s := newSessions([]byte("0123456789abcdef0123456789abcdef"))
	// A session issued with a fixed id (issue draws a random one, which
	// would differ in each fuzzing process).
	payload := "v1.0123456789abcdef." + fmt.Sprint(now.Add(ConsoleSessionTTL).Unix()) + "." + strings.Repeat("ab", 16)
	valid := payload + "." + s.mac("session", payload)
	if _, ok := s.open(valid, now); !ok {
		f.Fatal("the seed session does not open")
	}
	for _, seed := range []string{valid, "", ".", "v1....", "v1.x.1.y.z", valid + "x", strings.Replace(valid, "v1", "v2", 1)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		// Only the key's owner can make a value that opens.
		if _, ok := s.open(value, now); ok && value != valid {
			t.Fatalf("a value that was never issued opens: %q", value)
		}
	})
}
