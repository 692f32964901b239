// Package config reads Herald's settings from the environment (docs/design.md#environment). The
// `env` tag of each field names its variable; docs and docker-compose are
// checked against these tags.
package config

import (
	"fmt"
	"net/netip"
	"net/url"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"herald/activities"
	"herald/netguard"
	"herald/relay"
	"herald/workflows"
)

// Common is what both binaries read.
type Common struct {
	DatabaseURL       string `env:"HERALD_DATABASE_URL"`
	TemporalAddress   string `env:"TEMPORAL_ADDRESS"`
	TemporalNamespace string `env:"TEMPORAL_NAMESPACE"`
	LogLevel          string `env:"HERALD_LOG_LEVEL"`

	// Temporal connection security, under the names the temporal CLI uses.
	TemporalTLS           bool   `env:"TEMPORAL_TLS"`
	TemporalTLSCert       string `env:"TEMPORAL_TLS_CLIENT_CERT_PATH"`
	TemporalTLSKey        string `env:"TEMPORAL_TLS_CLIENT_KEY_PATH"`
	TemporalTLSCA         string `env:"TEMPORAL_TLS_SERVER_CA_CERT_PATH"`
	TemporalTLSServerName string `env:"TEMPORAL_TLS_SERVER_NAME"`
	TemporalAPIKey        string `env:"TEMPORAL_API_KEY"`
	// TemporalCompression is how requests to Temporal are compressed:
	// "gzip" (the SDK's default; also when empty) or "none".
	TemporalCompression string `env:"HERALD_TEMPORAL_COMPRESSION"`
}

// Worker is the worker process's configuration.
type Worker struct {
	Common
	HTTPAddr   string `env:"HERALD_HTTP_ADDR"`
	APIAddr    string `env:"HERALD_API_ADDR"` // the publishing API (POST /v1/events); empty: off
	SigningKey string `env:"HERALD_SIGNING_KEY"`
	// SecretKey encrypts the apps' signing secrets at rest: base64 of 32
	// bytes, or @FILE holding it (docs/signing-keys.md).
	SecretKey string `env:"HERALD_SECRET_KEY"`
	// SignV1A is "on" (default) or "off": whether deliveries also carry the
	// Ed25519 v1a entry in webhook-signature.
	SignV1A string `env:"HERALD_SIGN_V1A"`
	// EgressProxy is the http(s) proxy every delivery goes through; empty: none.
	EgressProxy     string        `env:"HERALD_EGRESS_PROXY"`
	AllowNetworks   string        `env:"HERALD_ALLOW_NETWORKS"`
	RetrySchedule   string        `env:"HERALD_RETRY_SCHEDULE"`
	DeliveryTimeout time.Duration `env:"HERALD_DELIVERY_TIMEOUT"`
	RearmCooldown   time.Duration `env:"HERALD_REARM_COOLDOWN"`
	MaxRearms       int           `env:"HERALD_MAX_REARMS"`
	IdleTimeout     time.Duration `env:"HERALD_IDLE_TIMEOUT"`
	// EndQuietKeys: a key's run that took no event signal completes as soon
	// as its rows say it owes nothing, without waiting IdleTimeout (default
	// false).
	EndQuietKeys bool `env:"HERALD_END_QUIET_KEYS"`
	// HoldExpiry cancels (retention_expired) an event a key has held longer (default 720h).
	HoldExpiry time.Duration `env:"HERALD_HOLD_EXPIRY"`
	DBMaxConns int           `env:"HERALD_DB_MAX_CONNS"`
	// DBMinConns is the connections of the worker's pool it opens before
	// it takes work and keeps open (LoadWorker: HERALD_DB_MAX_CONNS when
	// unset; 0: opened as work needs them).
	DBMinConns int `env:"HERALD_DB_MIN_CONNS"`
	// APIDBConns sizes the publishing API's own PostgreSQL pool, apart from
	// the workers' (default 4).
	APIDBConns int `env:"HERALD_API_DB_CONNS"`
	// APITokenConcurrency caps the API requests in flight per token (default 8).
	APITokenConcurrency int `env:"HERALD_API_TOKEN_CONCURRENCY"`
	// APIAppConcurrency caps the API requests in flight per app, all its
	// tokens together (default APIDBConns - 1, at least 1; at most that):
	// one app cannot hold every connection of the API's pool.
	APIAppConcurrency int `env:"HERALD_API_APP_CONCURRENCY"`
	// TemporalUIURL is the Temporal UI's base URL, which the console links
	// keys' workflows to; empty: no links.
	TemporalUIURL string `env:"HERALD_TEMPORAL_UI_URL"`
	// BuildID is the build id the worker stamps its workflow tasks with and
	// the relay starts runs with in BuildIds; empty: a hash of the
	// executable. One id for every replica of a release keeps that true
	// where binaries differ (architectures).
	BuildID string `env:"HERALD_BUILD_ID"`
	// WorkflowCacheSize bounds the key workflows kept in the worker's memory (default 2000).
	WorkflowCacheSize int    `env:"HERALD_WORKFLOW_CACHE_SIZE"`
	Issuer            string `env:"HERALD_JWT_ISSUER"`
	// Retention is how long dispatched and rejected events are kept (default 720h).
	Retention time.Duration `env:"HERALD_RETENTION"`
	// RetentionEvery is how often the retention schedule runs (default 24h).
	RetentionEvery time.Duration `env:"HERALD_RETENTION_EVERY"`
	// RelayMaxAttempts is the failed signals after which the relay gives
	// up on an event, code relay_failed (default 10).
	RelayMaxAttempts int `env:"HERALD_RELAY_MAX_ATTEMPTS"`
	// RelayPollInterval is how long the idle relay leader waits for a
	// wake-up before it looks for new events anyway (default 100ms).
	RelayPollInterval time.Duration `env:"HERALD_RELAY_POLL_INTERVAL"`
	// RelaySignalOnly makes the relay signal every key, never start a new
	// key's workflow eagerly (default false).
	RelaySignalOnly bool `env:"HERALD_RELAY_SIGNAL_ONLY"`
	// TrustIncomingTrace makes a publisher's traceparent the parent of its
	// events' publish spans, and lets tracestate reach subscribers (default
	// false: the publisher's span is only linked).
	TrustIncomingTrace bool `env:"HERALD_TRUST_INCOMING_TRACE"`

	// Parsed forms, filled by LoadWorker.
	Allow    []netip.Prefix  `env:"-"`
	Schedule []time.Duration `env:"-"`
	// NoV1A is HERALD_SIGN_V1A=off.
	NoV1A bool `env:"-"`
	// Proxy is the parsed EgressProxy, nil for none.
	Proxy *url.URL `env:"-"`
}

// Defaults.
const (
	DefaultTemporalAddress   = "127.0.0.1:7233"
	DefaultTemporalNamespace = "default"
	DefaultHTTPAddr          = "127.0.0.1:8088"
	DefaultLogLevel          = "info"
	// DefaultRetentionEvery is how often retention runs (HERALD_RETENTION_EVERY).
	DefaultRetentionEvery = 24 * time.Hour
	// DefaultWorkflowCacheSize bounds the key workflows a worker keeps in
	// memory (HERALD_WORKFLOW_CACHE_SIZE).
	DefaultWorkflowCacheSize = 2000
	// DefaultDBMaxConns is each worker's PostgreSQL pool size (HERALD_DB_MAX_CONNS).
	DefaultDBMaxConns = 20
	// DefaultAPIDBConns is the publishing API's PostgreSQL pool size
	// (HERALD_API_DB_CONNS), on top of HERALD_DB_MAX_CONNS.
	DefaultAPIDBConns = 4
	// DefaultAPITokenConcurrency caps the API requests in flight per token
	// (HERALD_API_TOKEN_CONCURRENCY).
	DefaultAPITokenConcurrency = 8
)

// LoadCommon reads the shared settings.
func LoadCommon(getenv func(string) string) (Common, error) {
	var c Common
	if err := fill(&c, getenv); err != nil {
		return c, err
	}
	if c.TemporalAddress == "" {
		c.TemporalAddress = DefaultTemporalAddress
	}
	if c.TemporalNamespace == "" {
		c.TemporalNamespace = DefaultTemporalNamespace
	}
	if c.LogLevel == "" {
		c.LogLevel = DefaultLogLevel
	}
	return c, nil
}

// buildIDPattern is what HERALD_BUILD_ID may hold: a release or a commit,
// within Temporal's limits on a search attribute's value.
var buildIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$`)

// LoadWorker reads and checks the worker's settings.
func LoadWorker(getenv func(string) string) (Worker, error) {
	var w Worker
	if err := fill(&w, getenv); err != nil {
		return w, err
	}
	common, err := LoadCommon(getenv)
	if err != nil {
		return w, err
	}
	w.Common = common
	// Checked here, not only when the client is made: a bad value stops the
	// worker before it touches the database, as other invalid settings do.
	if _, err := common.grpcCompression(); err != nil {
		return w, err
	}
	if w.DatabaseURL == "" {
		return w, fmt.Errorf("HERALD_DATABASE_URL is required")
	}
	if w.SigningKey == "" {
		return w, fmt.Errorf("HERALD_SIGNING_KEY is required: a PEM file or a directory of them (starter keys generate --out DIR)")
	}
	switch strings.ToLower(strings.TrimSpace(w.SignV1A)) {
	case "", "on", "true", "1":
	case "off", "false", "0":
		w.NoV1A = true
	default:
		return w, fmt.Errorf("HERALD_SIGN_V1A: %q: want on or off", w.SignV1A)
	}
	if w.TemporalUIURL != "" {
		u, err := url.Parse(w.TemporalUIURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return w, fmt.Errorf("HERALD_TEMPORAL_UI_URL: %q: want the Temporal UI's base URL, http(s)://HOST[:PORT][/PATH]", w.TemporalUIURL)
		}
	}
	if w.Proxy, err = netguard.ParseProxy(w.EgressProxy); err != nil {
		return w, fmt.Errorf("HERALD_EGRESS_PROXY: %w", err)
	}
	if w.HTTPAddr == "" {
		w.HTTPAddr = DefaultHTTPAddr
	}
	if w.Allow, err = netguard.ParseAllowList(w.AllowNetworks); err != nil {
		return w, fmt.Errorf("HERALD_ALLOW_NETWORKS: %w", err)
	}
	if w.BuildID != "" && !buildIDPattern.MatchString(w.BuildID) {
		return w, fmt.Errorf("HERALD_BUILD_ID: %q: want 1 to 128 letters, digits and . _ + - (a release, a commit)", w.BuildID)
	}
	if w.Schedule, err = ParseSchedule(w.RetrySchedule); err != nil {
		return w, fmt.Errorf("HERALD_RETRY_SCHEDULE: %w", err)
	}
	if strings.TrimSpace(getenv("HERALD_RELAY_MAX_ATTEMPTS")) != "" && w.RelayMaxAttempts <= 0 {
		return w, fmt.Errorf("HERALD_RELAY_MAX_ATTEMPTS: %d: must be at least 1", w.RelayMaxAttempts)
	}
	w = w.WithDefaults()
	if w.DeliveryTimeout < 0 || w.RearmCooldown < 0 || w.IdleTimeout < 0 || w.HoldExpiry < 0 || w.MaxRearms < 0 || w.DBMaxConns < 0 || w.DBMinConns < 0 || w.WorkflowCacheSize < 0 ||
		w.APIDBConns < 0 || w.APITokenConcurrency < 0 || w.APIAppConcurrency < 0 ||
		w.Retention < 0 || w.RetentionEvery < 0 || w.RelayPollInterval < 0 {
		return w, fmt.Errorf("durations and counts must not be negative")
	}
	// A pool opened whole before the worker takes work: a burst right
	// after a start (a deploy) found it empty, and every connection it
	// opened then cost an authenticated backend start, and that backend's
	// first plans a read of the catalogs (docs/performance.md).
	if strings.TrimSpace(getenv("HERALD_DB_MIN_CONNS")) == "" {
		w.DBMinConns = w.DBMaxConns
	} else if w.DBMinConns > w.DBMaxConns {
		return w, fmt.Errorf("HERALD_DB_MIN_CONNS: %d: must not exceed HERALD_DB_MAX_CONNS (%d)", w.DBMinConns, w.DBMaxConns)
	}
	if most := MaxAPIAppConcurrency(w.APIDBConns); w.APIAppConcurrency > most {
		return w, fmt.Errorf("HERALD_API_APP_CONCURRENCY: %d: must not exceed HERALD_API_DB_CONNS - 1 (%d), so that one app cannot hold every connection of the API's pool",
			w.APIAppConcurrency, most)
	}
	if w.MaxRearms == 0 && strings.TrimSpace(getenv("HERALD_MAX_REARMS")) != "" {
		w.MaxRearms = workflows.NoRearms // set to 0: a failed key never re-arms by itself
	}
	if strings.TrimSpace(w.SecretKey) == "" {
		return w, fmt.Errorf("HERALD_SECRET_KEY is required: base64 of 32 bytes (head -c32 /dev/urandom | base64), or @FILE holding it; it encrypts the apps' signing secrets")
	}
	return w, nil
}

// WithDefaults fills the settings that have a default and are unset.
func (w Worker) WithDefaults() Worker {
	if w.HTTPAddr == "" {
		w.HTTPAddr = DefaultHTTPAddr
	}
	if w.TemporalNamespace == "" {
		w.TemporalNamespace = DefaultTemporalNamespace
	}
	if w.Retention == 0 {
		w.Retention = workflows.DefaultRetention
	}
	if w.RetentionEvery == 0 {
		w.RetentionEvery = DefaultRetentionEvery
	}
	if len(w.Schedule) == 0 {
		w.Schedule = workflows.DefaultRetrySchedule
	}
	if w.DeliveryTimeout == 0 {
		w.DeliveryTimeout = activities.DefaultPostTimeout
	}
	if w.WorkflowCacheSize == 0 {
		w.WorkflowCacheSize = DefaultWorkflowCacheSize
	}
	if w.DBMaxConns == 0 {
		w.DBMaxConns = DefaultDBMaxConns
	}
	if w.RelayMaxAttempts == 0 {
		w.RelayMaxAttempts = relay.DefaultMaxAttempts
	}
	if w.RelayPollInterval == 0 {
		w.RelayPollInterval = relay.DefaultIdlePoll
	}
	if w.APIDBConns == 0 {
		w.APIDBConns = DefaultAPIDBConns
	}
	if w.APITokenConcurrency == 0 {
		w.APITokenConcurrency = DefaultAPITokenConcurrency
	}
	if w.APIAppConcurrency == 0 {
		w.APIAppConcurrency = MaxAPIAppConcurrency(w.APIDBConns)
	}
	return w
}

// MaxAPIAppConcurrency is the most API requests one app may have in flight
// with an API pool of conns connections, and the default: all but one of
// them (at least 1), so that another app always finds one.
func MaxAPIAppConcurrency(conns int) int { return max(1, conns-1) }

// DeliveryParams are the settings handed to delivery workflows.
func (w Worker) DeliveryParams() workflows.Params {
	p := workflows.Params{
		RetrySchedule:   w.Schedule,
		DeliveryTimeout: w.DeliveryTimeout,
		RearmCooldown:   w.RearmCooldown,
		MaxRearms:       w.MaxRearms,
		IdleTimeout:     w.IdleTimeout,
		HoldExpiry:      w.HoldExpiry,
		EndQuietKeys:    w.EndQuietKeys,
	}.WithDefaults()
	return p
}

// ParseSchedule parses comma-separated Go durations, one per retry; empty
// means the default schedule.
func ParseSchedule(s string) ([]time.Duration, error) {
	if strings.TrimSpace(s) == "" {
		return workflows.DefaultRetrySchedule, nil
	}
	var out []time.Duration
	for _, part := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("%q is not a duration (like 1s, 5m, 1h)", strings.TrimSpace(part))
		}
		if d <= 0 {
			return nil, fmt.Errorf("%q: delays must be positive", strings.TrimSpace(part))
		}
		out = append(out, d)
	}
	if len(out) > 100 {
		return nil, fmt.Errorf("at most 100 retries")
	}
	return out, nil
}

// EnvNames lists the variables a config struct reads (for docs and checks).
func EnvNames(v any) []string {
	var out []string
	t := reflect.TypeOf(v)
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			out = append(out, EnvNames(reflect.New(f.Type).Elem().Interface())...)
			continue
		}
		if name := f.Tag.Get("env"); name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// fill sets each tagged field of the struct behind ptr from getenv.
func fill(ptr any, getenv func(string) string) error {
	v := reflect.ValueOf(ptr).Elem()
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name := f.Tag.Get("env")
		if f.Anonymous || name == "" || name == "-" {
			continue
		}
		raw := strings.TrimSpace(getenv(name))
		if raw == "" {
			continue
		}
		field := v.Field(i)
		switch field.Interface().(type) {
		case string:
			field.SetString(raw)
		case bool:
			b, err := strconv.ParseBool(raw)
			if err != nil {
				return fmt.Errorf("%s: %q is not true or false", name, raw)
			}
			field.SetBool(b)
		case int:
			n, err := strconv.Atoi(raw)
			if err != nil {
				return fmt.Errorf("%s: %q is not a whole number", name, raw)
			}
			field.SetInt(int64(n))
		case time.Duration:
			d, err := time.ParseDuration(raw)
			if err != nil {
				return fmt.Errorf("%s: %q is not a duration (like 30s, 5m)", name, raw)
			}
			field.SetInt(int64(d))
		default:
			return fmt.Errorf("config field %s has an unsupported type", f.Name)
		}
	}
	return nil
}
