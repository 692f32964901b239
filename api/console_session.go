package api

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The console's cookies. Both are HttpOnly, SameSite=Strict, scoped to
// ConsolePrefix, and Secure when the request came over TLS.
const (
	// sessionCookie holds a signed session: the token's id, an expiry and
	// a random session id, never the token.
	sessionCookie = "herald_console"
	// signInCookie holds the nonce the sign-in form's CSRF field is made
	// from (a signed double submit: a page of another site can neither
	// read the field nor set the cookie).
	signInCookie = "herald_console_csrf"
)

// ConsoleSessionTTL is how long a console session lasts after sign-in.
const ConsoleSessionTTL = 8 * time.Hour

// signInFormTTL is how long a sign-in form may be submitted after it was
// served.
const signInFormTTL = time.Hour

// session is a signed-in console session.
type session struct {
	tokenID string
	expires time.Time
	// id is the session's random id; sign-out's CSRF field is made from it.
	id string
}

// sessions signs and checks console cookies with one key, shared by every
// replica (derived from HERALD_SECRET_KEY by the service).
type sessions struct {
	key []byte
}

// newSessions signs with key, or with a random key (sessions then end with
// the process) when key is empty.
func newSessions(key []byte) *sessions {
	if len(key) == 0 {
		key = make([]byte, 32)
		_, _ = rand.Read(key) // never fails (crypto/rand)
	}
	return &sessions{key: key}
}

// mac is the base64url HMAC-SHA256 of purpose and value.
func (s *sessions) mac(purpose, value string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(purpose))
	m.Write([]byte{0})
	m.Write([]byte(value))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// equal compares two MACs in constant time.
func equal(a, b string) bool { return hmac.Equal([]byte(a), []byte(b)) }

// randomID is 16 random bytes in hex.
func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// issue is the cookie value of a new session for the token tokenID.
func (s *sessions) issue(tokenID string, now time.Time) (string, session) {
	sess := session{tokenID: tokenID, expires: now.Add(ConsoleSessionTTL).Truncate(time.Second), id: randomID()}
	payload := "v1." + tokenID + "." + strconv.FormatInt(sess.expires.Unix(), 10) + "." + sess.id
	return payload + "." + s.mac("session", payload), sess
}

// open checks a session cookie's value: signed by this key and not
// expired. It touches no database: a forged cookie costs a MAC.
func (s *sessions) open(value string, now time.Time) (session, bool) {
	i := strings.LastIndexByte(value, '.')
	if i < 0 || !equal(value[i+1:], s.mac("session", value[:i])) {
		return session{}, false
	}
	parts := strings.Split(value[:i], ".")
	if len(parts) != 4 || parts[0] != "v1" {
		return session{}, false
	}
	exp, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || !now.Before(time.Unix(exp, 0)) {
		return session{}, false
	}
	return session{tokenID: parts[1], expires: time.Unix(exp, 0), id: parts[3]}, true
}

// signOutField is the CSRF field of a session's sign-out form.
func (s *sessions) signOutField(sess session) string { return s.mac("sign-out", sess.id) }

// signInField is the CSRF field of a sign-in form given the nonce of the
// signInCookie.
func (s *sessions) signInField(nonce string) string { return s.mac("sign-in", nonce) }

// setCookie sets a console cookie; maxAge < 0 deletes it.
func setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge time.Duration) {
	c := &http.Cookie{Name: name, Value: value, Path: ConsolePrefix, HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: overTLS(r), MaxAge: int(maxAge / time.Second)}
	if maxAge < 0 {
		c.MaxAge = -1
	}
	http.SetCookie(w, c)
}

// overTLS reports whether the browser reached the console over https:
// directly, or through a proxy that says so (X-Forwarded-Proto). Trusting
// the header can only make the cookie stricter.
func overTLS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// sameOrigin reports whether a form POST came from the console's own
// pages: an Origin header, when the browser sends one, must name this
// host.
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true // older browsers; the CSRF field decides
	}
	_, host, ok := strings.Cut(origin, "://")
	return ok && host == r.Host
}
