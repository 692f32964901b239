// Command subscriber is the example receiver that `make dev` delivers to. One
// process receives for several example apps (every example manifest points at
// http://127.0.0.1:8089): it verifies each delivery with the subscriber
// package against Herald's JWKS, logs one line per event and can append each
// event to a JSON-lines file.
//
// It can be told to fail, to show Herald holding a key and recovering:
//
//	subscriber -fail-status 500 -fail-subjects person-2,person-3
//	subscriber -fail-for 30s                 # every delivery, for 30 s after start
//	curl -X POST 'http://127.0.0.1:8089/control/fail?status=500&for=30s&subject=person-2'
//	curl -X POST http://127.0.0.1:8089/control/ok
//	curl http://127.0.0.1:8089/control
//
// A status of 422 is a rejection (terminal for Herald), 503 carries
// Retry-After: 5. The control endpoints have no authentication: keep the
// listener on loopback, as it is by default.
//
// Keys: -jwks fetches Herald's JWKS, which must be https:// except for a
// loopback URL (the default, for make dev); -keys instead pins the public
// keys of a file (PEM "PUBLIC KEY" blocks such as Herald's <kid>.pub.pem
// files, or a saved JWKS), as the compose stack does.
//
// Every flag has an environment variable: SUBSCRIBER_ADDR, SUBSCRIBER_JWKS,
// SUBSCRIBER_KEYS, SUBSCRIBER_APPS, SUBSCRIBER_PATH, SUBSCRIBER_RECORD, SUBSCRIBER_FAIL_STATUS,
// SUBSCRIBER_FAIL_SUBJECTS, SUBSCRIBER_FAIL_FOR; a flag wins over its variable.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"herald/manifest"
	"herald/subscriber"
)

// options are the command's flags.
type options struct {
	addr         string
	jwksURL      string
	keysFile     string
	apps         string
	path         string
	record       string
	failStatus   int
	failSubjects string
	failFor      time.Duration
}

func main() {
	opts, err := parseOptions(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "subscriber:", err)
		os.Exit(2)
	}
	if err := run(opts); err != nil {
		fmt.Fprintln(os.Stderr, "subscriber:", err)
		os.Exit(1)
	}
}

// parseOptions reads flags, with defaults from the environment.
func parseOptions(args []string, getenv func(string) string) (options, error) {
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	var opts options
	fs := flag.NewFlagSet("subscriber", flag.ContinueOnError)
	fs.StringVar(&opts.addr, "addr", env("SUBSCRIBER_ADDR", "127.0.0.1:8089"), "listen address")
	fs.StringVar(&opts.jwksURL, "jwks", env("SUBSCRIBER_JWKS", "http://127.0.0.1:8088/.well-known/jwks.json"),
		"Herald's JWKS URL: https://, or http:// on loopback")
	fs.StringVar(&opts.keysFile, "keys", env("SUBSCRIBER_KEYS", ""), "pin the public keys of this file instead of fetching -jwks")
	fs.StringVar(&opts.apps, "apps", env("SUBSCRIBER_APPS", "contacts,billing,audit-log"), "comma-separated app ids to receive for (audience app:<id>)")
	fs.StringVar(&opts.path, "path", env("SUBSCRIBER_PATH", manifest.DefaultDeliveryPath), "delivery path")
	fs.StringVar(&opts.record, "record", env("SUBSCRIBER_RECORD", ""), "append each event as a JSON line to this file")
	failStatus, err := envInt(getenv, "SUBSCRIBER_FAIL_STATUS")
	if err != nil {
		return options{}, err
	}
	fs.IntVar(&opts.failStatus, "fail-status", failStatus, "fail deliveries with this status (500 when -fail-subjects or -fail-for is set)")
	fs.StringVar(&opts.failSubjects, "fail-subjects", env("SUBSCRIBER_FAIL_SUBJECTS", ""), "comma-separated subject keys to fail (default all)")
	failFor, err := envDuration(getenv, "SUBSCRIBER_FAIL_FOR")
	if err != nil {
		return options{}, err
	}
	fs.DurationVar(&opts.failFor, "fail-for", failFor, "fail deliveries only for this long after start")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if opts.failStatus != 0 && (opts.failStatus < 400 || opts.failStatus > 599) {
		return options{}, fmt.Errorf("-fail-status %d: want 400..599", opts.failStatus)
	}
	if opts.failFor < 0 {
		return options{}, fmt.Errorf("-fail-for %s: must not be negative", opts.failFor)
	}
	return opts, nil
}

func envInt(getenv func(string) string, name string) (int, error) {
	v := getenv(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return n, nil
}

func envDuration(getenv func(string) string, name string) (time.Duration, error) {
	v := getenv(name)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return d, nil
}

// audiences turns "contacts, billing" into app:contacts and app:billing.
func audiences(apps string) []string {
	var out []string
	for _, app := range splitList(apps) {
		if !strings.HasPrefix(app, "app:") {
			app = "app:" + app
		}
		out = append(out, app)
	}
	return out
}

// startRule is the failure rule given by flags, or nil.
func startRule(opts options, now time.Time) *failRule {
	if opts.failStatus == 0 && opts.failSubjects == "" && opts.failFor == 0 {
		return nil
	}
	rule := &failRule{Status: opts.failStatus, Subjects: splitList(opts.failSubjects)}
	if rule.Status == 0 {
		rule.Status = http.StatusInternalServerError
	}
	if opts.failFor > 0 {
		rule.Until = now.Add(opts.failFor)
	}
	return rule
}

func run(opts options) error {
	log, err := newLogger()
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	var rec io.Writer
	if opts.record != "" {
		f, err := os.OpenFile(opts.record, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return fmt.Errorf("open record file: %w", err)
		}
		defer f.Close()
		rec = f
	}

	rv := newReceiver(log, time.Now, startRule(opts, time.Now()), rec)
	cfg := subscriber.Config{Audiences: audiences(opts.apps)}
	if opts.keysFile != "" {
		cfg.KeysFile = opts.keysFile
	} else {
		cfg.JWKSURL = opts.jwksURL
		cfg.AllowLoopbackHTTP = true // refused anyway for a host that is not loopback
	}
	handler, err := rv.routes(cfg, opts.path)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	srv := &http.Server{
		Addr:              opts.addr,
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Info("listening", zap.String("addr", opts.addr), zap.String("path", opts.path),
		zap.Strings("apps", audiences(opts.apps)), zap.String("jwks", opts.jwksURL), zap.String("keys", opts.keysFile))

	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// newLogger logs one human-readable line per entry to stdout.
func newLogger() (*zap.Logger, error) {
	cfg := zap.NewDevelopmentConfig()
	cfg.OutputPaths = []string{"stdout"}
	cfg.DisableStacktrace = true
	cfg.DisableCaller = true
	cfg.EncoderConfig.EncodeLevel = zapcore.CapitalLevelEncoder
	cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	log, err := cfg.Build()
	if err != nil {
		return nil, fmt.Errorf("build logger: %w", err)
	}
	return log, nil
}
