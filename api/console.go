package api

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"herald/store"
	"herald/workflows"
)

// ConsolePrefix is the path of the read-only console (docs/console.md):
// server-rendered pages over the operations API's reads, on the publishing
// API's listener, signed in with an app or operator token.
const ConsolePrefix = "/console"

// consoleCSP lets a console page load its own stylesheet and images and
// nothing else: no script at all, no inline style, no framing.
const consoleCSP = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'"

//go:embed console
var consoleFiles embed.FS

//go:embed console/style.css
var consoleCSS []byte

// console serves the read-only console.
type console struct {
	h        *Handler
	sessions *sessions
	// tokens caches the sessions' tokens by id, apart from the cache of
	// presented tokens (Handler.tokens): an entry of one can never be hit
	// by what is presented to the other.
	tokens *tokenCache
	// temporalUI is the Temporal UI's base URL (HERALD_TEMPORAL_UI_URL),
	// without a trailing slash; empty: keys are not linked.
	temporalUI string
	pages      map[string]*template.Template
}

// consolePages are the console's page templates, each rendered inside
// console/layout.html.
var consolePages = []string{"sign-in", "apps", "app", "keys", "key", "event", "deliveries", "audit", "error"}

func newConsole(h *Handler, key []byte, temporalUI string) *console {
	c := &console{h: h, sessions: newSessions(key), tokens: newTokenCache(h.tokens.ttl),
		temporalUI: strings.TrimRight(temporalUI, "/"), pages: map[string]*template.Template{}}
	funcs := template.FuncMap{
		"time":    formatTime,
		"timePtr": formatTimePtr,
		"seg":     url.PathEscape,
		"ui":      c.workflowURL,
		"owner":   publisherOf,
		"keyID":   workflows.DeliveryID,
		"shell":   shellQuote,
	}
	for _, name := range consolePages {
		c.pages[name] = template.Must(template.New("layout.html").Funcs(funcs).
			ParseFS(consoleFiles, "console/layout.html", "console/"+name+".html"))
	}
	return c
}

// publisherOf is the app that publishes an event type, or the type of a
// subscription id: the source app an event link names, since event ids are
// unique per source app only.
func publisherOf(typeOrSubscription string) string {
	if _, rest, ok := strings.Cut(typeOrSubscription, ":"); ok {
		typeOrSubscription = rest
	}
	app, _, _ := strings.Cut(typeOrSubscription, ".")
	return app
}

// shellQuote quotes s as one word of a POSIX shell: a workflow id holds
// the publisher's subject key, which may hold any printable text.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// formatTime shows a time in UTC to the second.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// formatTimePtr is formatTime of a time that may be missing ("").
func formatTimePtr(t *time.Time) string {
	if t == nil {
		return ""
	}
	return formatTime(*t)
}

// workflowURL links a workflow run in the Temporal UI; "" without a base URL.
func (c *console) workflowURL(workflowID, runID string) string {
	if c.temporalUI == "" {
		return ""
	}
	u := c.temporalUI + "/namespaces/" + url.PathEscape(c.h.namespaceName()) + "/workflows/" + url.PathEscape(workflowID)
	if runID != "" {
		u += "/" + url.PathEscape(runID) + "/history"
	}
	return u
}

// namespaceName is the Temporal namespace the keys run in.
func (h *Handler) namespaceName() string {
	if h.namespace == "" {
		return "default"
	}
	return h.namespace
}

// view is what every page's template gets.
type view struct {
	Title string
	// Who names the signed-in token and what it sees; empty on the
	// sign-in page.
	Who         string
	SignOutCSRF string
	// Data is the page's own.
	Data any
}

// serve answers a request under ConsolePrefix.
func (c *console) serve(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", consoleCSP)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Cache-Control", "no-store")
	path := strings.TrimPrefix(r.URL.EscapedPath(), ConsolePrefix)
	switch path {
	case "/style.css":
		if !c.method(w, r, http.MethodGet) {
			return
		}
		hd.Set("Content-Type", "text/css; charset=utf-8")
		hd.Set("Cache-Control", "max-age=3600")
		_, _ = w.Write(consoleCSS)
		return
	case "/sign-in":
		if r.Method == http.MethodPost {
			c.signIn(w, r)
			return
		}
		if c.method(w, r, http.MethodGet) {
			c.signInPage(w, r, http.StatusOK, "")
		}
		return
	case "/sign-out":
		if c.method(w, r, http.MethodPost) {
			c.signOut(w, r)
		}
		return
	}
	if !c.method(w, r, http.MethodGet) {
		return
	}
	cred, sess, ok, err := c.signedIn(w, r)
	if err != nil {
		c.readFailed(w, r, nil, "the session's token", err)
		return
	}
	if !ok {
		http.Redirect(w, r, ConsolePrefix+"/sign-in", http.StatusSeeOther)
		return
	}
	if p, busy := c.h.admit(r.Context(), cred, true); busy {
		hd.Set("Retry-After", "1")
		who := "This token has"
		if p.Code == CodeAppBusy {
			who = "This token's app has"
		}
		c.errorPage(w, r, nil, http.StatusTooManyRequests, "Too many requests",
			who+" as many requests in flight as it may; reload the page in a moment.")
		return
	}
	defer c.h.leave(cred, true)
	if !c.h.acquireReader(r.Context()) {
		return // the client went away
	}
	defer c.h.releaseReader()
	pc := &pageCtx{cred: cred, sess: sess, scope: scopeOf(cred)}
	// Split the escaped path, so that an escaped "/" (in a subject key)
	// stays in its segment.
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	for i, p := range parts {
		if parts[i], err = url.PathUnescape(p); err != nil {
			c.notFound(w, r, pc, "this page")
			return
		}
	}
	switch {
	case path == "" || path == "/":
		http.Redirect(w, r, ConsolePrefix+"/apps", http.StatusSeeOther)
	case len(parts) == 1 && parts[0] == "apps":
		c.appsPage(w, r, pc)
	case len(parts) == 2 && parts[0] == "apps" && parts[1] != "":
		c.appPage(w, r, pc, parts[1])
	case len(parts) == 1 && parts[0] == "keys":
		c.keysPage(w, r, pc)
	case len(parts) == 2 && parts[0] == "keys" && parts[1] != "":
		c.keyPage(w, r, pc, parts[1])
	case len(parts) == 2 && parts[0] == "events" && parts[1] != "":
		c.eventPage(w, r, pc, parts[1])
	case len(parts) == 1 && parts[0] == "deliveries":
		c.deliveriesPage(w, r, pc)
	case len(parts) == 1 && parts[0] == "audit":
		c.auditPage(w, r, pc)
	default:
		c.notFound(w, r, pc, "this page")
	}
}

// method answers 405 unless r's method is want.
func (c *console) method(w http.ResponseWriter, r *http.Request, want string) bool {
	if r.Method == want || (want == http.MethodGet && r.Method == http.MethodHead) {
		return true
	}
	w.Header().Set("Allow", want)
	c.errorPage(w, r, nil, http.StatusMethodNotAllowed, "Method not allowed", "This page of the console accepts "+want+" only.")
	return false
}

// signedIn finds the live token of the request's session cookie. A
// session is taken while it is unexpired and its token live (a revoked
// token ends its sessions within the token cache's TTL); else the cookie
// is cleared.
func (c *console) signedIn(w http.ResponseWriter, r *http.Request) (store.TokenCredential, session, bool, error) {
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return store.TokenCredential{}, session{}, false, nil
	}
	now := c.h.now()
	sess, ok := c.sessions.open(ck.Value, now)
	if !ok {
		setCookie(w, r, sessionCookie, "", -1)
		return store.TokenCredential{}, session{}, false, nil
	}
	// The sessions' own token cache: a presented token never reaches it.
	key := sha256.Sum256([]byte(sess.tokenID))
	if hit, cached := c.tokens.get(key, now); cached {
		if !hit.found {
			setCookie(w, r, sessionCookie, "", -1)
		}
		return hit.cred, sess, hit.found, nil
	}
	cred, err := c.h.lookup(r.Context(), sess.tokenID)
	if errors.Is(err, store.ErrNotFound) {
		c.tokens.put(key, store.TokenCredential{}, false, now)
		setCookie(w, r, sessionCookie, "", -1)
		return store.TokenCredential{}, session{}, false, nil
	}
	if err != nil {
		return store.TokenCredential{}, session{}, false, fmt.Errorf("the session's token: %w", err)
	}
	c.tokens.put(key, cred, true, now)
	return cred, sess, true, nil
}

// signInPage shows the sign-in form with a fresh CSRF nonce; problem, when
// set, says why the last try failed.
func (c *console) signInPage(w http.ResponseWriter, r *http.Request, status int, problem string) {
	nonce := randomID()
	setCookie(w, r, signInCookie, nonce, signInFormTTL)
	c.render(w, r, nil, status, "sign-in", view{Title: "Sign in", Data: struct{ CSRF, Problem string }{c.sessions.signInField(nonce), problem}})
}

// signIn checks the form's CSRF field and token, and starts a session.
func (c *console) signIn(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	if err := r.ParseForm(); err != nil {
		c.signInPage(w, r, http.StatusBadRequest, "The form could not be read; sign in again.")
		return
	}
	ck, err := r.Cookie(signInCookie)
	if err != nil || !sameOrigin(r) || !equal(r.PostForm.Get("csrf"), c.sessions.signInField(ck.Value)) {
		c.signInPage(w, r, http.StatusForbidden, "The sign-in form expired or came from another page; sign in again.")
		return
	}
	token := strings.TrimSpace(r.PostForm.Get("token"))
	cred, refused, err := c.h.credential(r, token, token != "")
	if err != nil {
		c.h.fail(w, "console sign-in", err)
		return
	}
	if refused != nil {
		if refused.retryAfter > 0 {
			w.Header().Set("Retry-After", retryAfter(refused.retryAfter))
			c.signInPage(w, r, refused.status, "Too many failed sign-ins from this address; wait "+retryAfter(refused.retryAfter)+" s.")
			return
		}
		c.signInPage(w, r, refused.status, "That token is unknown or revoked.")
		return
	}
	value, _ := c.sessions.issue(cred.ID, c.h.now())
	setCookie(w, r, sessionCookie, value, ConsoleSessionTTL)
	setCookie(w, r, signInCookie, "", -1)
	http.Redirect(w, r, ConsolePrefix+"/apps", http.StatusSeeOther)
}

// signOut ends the session (when the form's CSRF field is the session's)
// and clears its cookie.
func (c *console) signOut(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	if err := r.ParseForm(); err != nil {
		c.errorPage(w, r, nil, http.StatusBadRequest, "Bad request", "The sign-out form could not be read.")
		return
	}
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		http.Redirect(w, r, ConsolePrefix+"/sign-in", http.StatusSeeOther)
		return
	}
	sess, ok := c.sessions.open(ck.Value, c.h.now())
	if ok && (!sameOrigin(r) || !equal(r.PostForm.Get("csrf"), c.sessions.signOutField(sess))) {
		c.errorPage(w, r, nil, http.StatusForbidden, "Forbidden", "The sign-out form came from another page; sign out from the console's own button.")
		return
	}
	setCookie(w, r, sessionCookie, "", -1)
	http.Redirect(w, r, ConsolePrefix+"/sign-in", http.StatusSeeOther)
}

// pageCtx is the signed-in request's token and scope.
type pageCtx struct {
	cred  store.TokenCredential
	sess  session
	scope string
}

// render writes page with v, adding the signed-in header when pc is set.
func (c *console) render(w http.ResponseWriter, r *http.Request, pc *pageCtx, status int, page string, v view) {
	if pc != nil {
		who := "operator token " + strconv.Quote(pc.cred.Name) + " (every app)"
		if !pc.cred.Operator {
			who = "token " + strconv.Quote(pc.cred.Name) + " of app " + pc.cred.App
		}
		v.Who, v.SignOutCSRF = who, c.sessions.signOutField(pc.sess)
	}
	var buf bytes.Buffer
	if err := c.pages[page].Execute(&buf, v); err != nil {
		c.h.fail(w, "console: render "+page, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(buf.Bytes())
	}
}

// errorPage renders an error page with status.
func (c *console) errorPage(w http.ResponseWriter, r *http.Request, pc *pageCtx, status int, title, detail string) {
	c.render(w, r, pc, status, "error", view{Title: title, Data: struct {
		Status int
		Detail string
	}{status, detail}})
}

// notFound is the 404 page of an unknown id, or one out of the token's
// scope: the same page, so a token learns nothing of other apps.
func (c *console) notFound(w http.ResponseWriter, r *http.Request, pc *pageCtx, what string) {
	c.errorPage(w, r, pc, http.StatusNotFound, "Not found", fmt.Sprintf("%s is unknown, or not visible to this token.", what))
}

// readFailed renders a read's error: 400 naming the parameter, 404 for
// store.ErrNotFound, else 500.
func (c *console) readFailed(w http.ResponseWriter, r *http.Request, pc *pageCtx, what string, err error) {
	var bad *paramError
	switch {
	case errors.As(err, &bad):
		c.errorPage(w, r, pc, http.StatusBadRequest, "Bad parameter",
			fmt.Sprintf("The parameter %q is wrong: %s.", bad.name, bad.detail))
	case errors.Is(err, store.ErrNotFound):
		c.notFound(w, r, pc, what)
	case store.IsLockTimeout(err):
		w.Header().Set("Retry-After", "1")
		c.errorPage(w, r, pc, http.StatusServiceUnavailable, "Busy",
			"Herald waited too long for a lock another transaction holds; reload the page in a moment.")
	default:
		c.h.log.Error("console: read", zap.String("page", r.URL.Path), zap.Error(err))
		c.errorPage(w, r, pc, http.StatusInternalServerError, "Herald failed", "Herald failed to read this page; try again.")
	}
}
