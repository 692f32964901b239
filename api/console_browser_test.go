package api_test

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"herald/internal/testkit/system"
)

// screenshots, when set, is the directory TestConsoleInBrowser writes the
// console's screenshots into (docs/console/: go test ./api -run
// TestConsoleInBrowser -screenshots ../docs/console).
var screenshots = flag.String("screenshots", "", "write the console's screenshots (PNG) into this directory")

// chromium finds a Chromium or Chrome binary. Without one the browser test
// is skipped, except under CI (CI set), where it fails: .ci/run installs
// chromium.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium on PATH under CI: .ci/run installs it (apt-get install -y chromium)")
	}
	t.Skip("no chromium on PATH (apt-get install -y chromium); CI runs this test")
	return ""
}

// browser is a headless Chromium with its own profile (its own cookies).
type browser struct {
	t   *testing.T
	ctx context.Context
}

func newBrowser(t *testing.T, exe string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// Start the browser now, on ctx itself: the first run's context is the
	// browser's lifetime (a timeout there would end the browser with it).
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return &browser{t: t, ctx: ctx}
}

// do runs steps within 30 s.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression in the page (through DevTools:
// the page itself runs no script, its CSP forbids it).
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// open navigates to the console's path and returns the rendered <main>'s
// text and the page's location.
func (b *browser) open(base, path string) (main, location string) {
	b.t.Helper()
	b.do("open "+path, chromedp.Navigate(base+path), chromedp.WaitReady(chromedp.CSS("main")))
	return eval[string](b, `document.querySelector("main").innerText`), eval[string](b, `location.pathname`)
}

// signIn fills in and submits the sign-in form as a person would.
func (b *browser) signIn(base, token string) {
	b.t.Helper()
	if _, loc := b.open(base, "/console/apps"); loc != "/console/sign-in" {
		b.t.Fatalf("signed out, /console/apps shows %s, want the sign-in page", loc)
	}
	b.do("sign in", chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS("nav")))
	if loc := eval[string](b, `location.pathname`); loc != "/console/apps" {
		b.t.Fatalf("after sign-in the browser is at %s", loc)
	}
}

// checkMarkup checks what every console page promises: one h1, a lang,
// a viewport, labelled inputs, tables with scoped headers, a skip link,
// no script, and no horizontal overflow at the window's width.
func (b *browser) checkMarkup(what string) {
	b.t.Helper()
	checks := map[string]string{
		"one h1":              `document.querySelectorAll("h1").length === 1`,
		"lang":                `document.documentElement.lang === "en"`,
		"viewport":            `!!document.querySelector('meta[name="viewport"][content*="width=device-width"]')`,
		"skip link":           `document.querySelector("a.skip").getAttribute("href") === "#main" && !!document.getElementById("main")`,
		"labelled inputs":     `[...document.querySelectorAll("input:not([type=hidden]), select")].every(i => i.labels && i.labels.length > 0)`,
		"scoped headers":      `[...document.querySelectorAll("th")].every(th => th.scope === "col" || th.scope === "row")`,
		"no script":           `document.scripts.length === 0`,
		"stylesheet applied":  `getComputedStyle(document.querySelector("header")).display === "flex"`,
		"no page overflow":    `document.documentElement.scrollWidth <= window.innerWidth`,
		"cookie not readable": `document.cookie === ""`,
	}
	for name, expr := range checks {
		if !eval[bool](b, expr) {
			b.t.Errorf("%s: %s fails: %s", what, name, expr)
		}
	}
}

// shoot writes a full-page screenshot at width into the screenshots
// directory, when one is given.
func (b *browser) shoot(name string, width int64) {
	b.t.Helper()
	if *screenshots == "" {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, 800)); err != nil {
		b.t.Fatal(err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*screenshots, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// TestConsoleInBrowser: in headless Chromium, billing's team signs in with
// its app token through the form and finds its failed key (the code, the
// subscriber's answer, the link to the workflow in the Temporal UI, the
// audit trail) and the event's delivery to billing only; an operator sees
// the event's deliveries to every subscriber. Each page is accessible
// markup that does not overflow a 360 px wide screen, and the session
// cookie is out of the page's reach.
func TestConsoleInBrowser(t *testing.T) {
	exe := chromium(t)
	t.Parallel()
	f := startConsole(t)
	key, event := keyPath(f.failedKey), "/console/events/"+f.bad.ID+"?app=contacts"
	uiLink := temporalUI + "/namespaces/" + f.Cfg.TemporalNamespace + "/workflows/" + url.PathEscape(f.failedKey) + "/"

	billing := newBrowser(t, exe)
	billing.signIn(f.base, f.billing)
	main, _ := billing.open(f.base, key)
	for _, want := range []string{"Key person-bad of " + system.BillingSub, "failed", "schema_mismatch", "unknown customer",
		f.bad.ID, "Open the workflow in the Temporal UI", "Delivery failed, key held"} {
		if !strings.Contains(main, want) {
			t.Errorf("billing's key page lacks %q:\n%s", want, main)
		}
	}
	if href := eval[string](billing, `document.querySelector("main a[href^='http']").href`); !strings.HasPrefix(href, uiLink) {
		t.Errorf("the key's Temporal UI link is %q, want %s…", href, uiLink)
	}
	billing.checkMarkup("billing's key page")
	main, _ = billing.open(f.base, event)
	rows := eval[[]string](billing, `[...document.querySelectorAll("main table tbody tr")].map(tr => tr.innerText.replace(/\s+/g, " "))`)
	if len(rows) != 1 || !strings.Contains(rows[0], system.BillingSub) || !strings.Contains(rows[0], "schema_mismatch") ||
		!strings.Contains(rows[0], "unknown customer") {
		t.Errorf("billing's view of the event's deliveries: %q", rows)
	}
	if strings.Contains(main, system.AuditLogSub) {
		t.Errorf("billing sees audit-log's delivery:\n%s", main)
	}
	billing.checkMarkup("billing's event page")

	// At 360 px the same pages fit the screen.
	billing.do("narrow", chromedp.EmulateViewport(360, 800))
	for _, path := range []string{key, event, "/console/apps", "/console/deliveries", "/console/keys"} {
		billing.open(f.base, path)
		billing.checkMarkup(fmt.Sprintf("billing's %s at 360 px", path))
	}

	ops := newBrowser(t, exe)
	ops.signIn(f.base, f.operator)
	ops.open(f.base, event)
	rows = eval[[]string](ops, `[...document.querySelectorAll("main table tbody tr")].map(tr => tr.innerText.replace(/\s+/g, " "))`)
	if len(rows) != 2 || !strings.Contains(rows[0], system.AuditLogSub+" delivered") || !strings.Contains(rows[1], system.BillingSub+" failed") {
		t.Errorf("the operator's view of the event's deliveries: %q", rows)
	}
	ops.checkMarkup("the operator's event page")
	ops.shoot("event-wide", 1280)
	ops.shoot("event-narrow", 360)
	ops.open(f.base, key)
	ops.checkMarkup("the operator's key page")
	ops.shoot("key-wide", 1280)
	ops.shoot("key-narrow", 360)

	// An app token's 404 is a page too.
	al := newBrowser(t, exe)
	al.signIn(f.base, f.auditLog)
	if main, _ := al.open(f.base, key); !strings.Contains(main, "unknown, or not visible to this token") || strings.Contains(main, "unknown customer") {
		t.Errorf("audit-log's view of billing's key:\n%s", main)
	}
}
