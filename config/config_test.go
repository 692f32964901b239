package config

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"herald/workflows"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestLoadWorker(t *testing.T) {
	base := map[string]string{"HERALD_DATABASE_URL": "postgres://x", "HERALD_SIGNING_KEY": "/keys", "HERALD_SECRET_KEY": "@/keys/secret.key"}
	w, err := LoadWorker(env(base))
	if err != nil {
		t.Fatal(err)
	}
	if w.APIAddr != "" {
		t.Fatalf("the publishing API is on by default: %q", w.APIAddr)
	}
	if w.HTTPAddr != DefaultHTTPAddr || w.TemporalAddress != DefaultTemporalAddress || w.TemporalNamespace != "default" ||
		!reflect.DeepEqual(w.Schedule, workflows.DefaultRetrySchedule) || w.Retention != workflows.DefaultRetention ||
		w.RetentionEvery != 24*time.Hour || len(w.Allow) != 0 || w.LogLevel != "info" || w.RelayMaxAttempts != 10 ||
		w.APIDBConns != 4 || w.APITokenConcurrency != 8 || w.APIAppConcurrency != 3 || w.RelayPollInterval != 100*time.Millisecond ||
		w.DBMaxConns != DefaultDBMaxConns || w.DBMinConns != DefaultDBMaxConns {
		t.Fatalf("defaults: %+v", w)
	}
	set := map[string]string{
		"HERALD_DATABASE_URL": "postgres://x", "HERALD_SIGNING_KEY": "/keys", "HERALD_SECRET_KEY": "@/keys/secret.key",
		"HERALD_RETRY_SCHEDULE": "1s, 2m", "HERALD_ALLOW_NETWORKS": "127.0.0.0/8,::1",
		"HERALD_DELIVERY_TIMEOUT": "5s", "HERALD_MAX_REARMS": "2", "TEMPORAL_NAMESPACE": "prod",
		"HERALD_RELAY_MAX_ATTEMPTS": "4", "HERALD_API_DB_CONNS": "2", "HERALD_API_TOKEN_CONCURRENCY": "16",
		"HERALD_RELAY_POLL_INTERVAL": "250ms", "HERALD_TEMPORAL_UI_URL": "https://temporal.example/ui",
		"HERALD_BUILD_ID": "2026.12.5+a2ecc43", "HERALD_DB_MAX_CONNS": "7",
	}
	w, err = LoadWorker(env(set))
	if err != nil {
		t.Fatal(err)
	}
	p := w.DeliveryParams()
	if !reflect.DeepEqual(p.RetrySchedule, []time.Duration{time.Second, 2 * time.Minute}) || p.MaxAttempts() != 3 ||
		p.DeliveryTimeout != 5*time.Second || p.MaxRearms != 2 || len(w.Allow) != 2 || w.TemporalNamespace != "prod" ||
		w.RelayMaxAttempts != 4 || w.APIDBConns != 2 || w.APITokenConcurrency != 16 || w.RelayPollInterval != 250*time.Millisecond ||
		w.TemporalUIURL != "https://temporal.example/ui" || w.BuildID != "2026.12.5+a2ecc43" ||
		w.DBMaxConns != 7 || w.DBMinConns != 7 {
		t.Fatalf("parsed: %+v params %+v", w, p)
	}
	// HERALD_API_APP_CONCURRENCY unset is one less than the API's pool
	// (at least 1); set, it is what it says, up to that.
	for _, tc := range []struct{ conns, app, want string }{{"2", "", "1"}, {"1", "", "1"}, {"10", "", "9"}, {"10", "4", "4"}, {"1", "1", "1"}} {
		e := map[string]string{"HERALD_API_DB_CONNS": tc.conns, "HERALD_API_APP_CONCURRENCY": tc.app}
		for k, v := range base {
			e[k] = v
		}
		if w, err := LoadWorker(env(e)); err != nil || strconv.Itoa(w.APIAppConcurrency) != tc.want {
			t.Errorf("HERALD_API_DB_CONNS=%s HERALD_API_APP_CONCURRENCY=%q: %d, %v; want %s", tc.conns, tc.app, w.APIAppConcurrency, err, tc.want)
		}
	}
	// HERALD_DB_MIN_CONNS unset is the pool's size; set, it is what it says.
	for v, want := range map[string]int{"0": 0, "3": 3, "7": 7} {
		set["HERALD_DB_MIN_CONNS"] = v
		if w, err = LoadWorker(env(set)); err != nil || w.DBMinConns != want {
			t.Errorf("HERALD_DB_MIN_CONNS=%s: %d, %v; want %d", v, w.DBMinConns, err, want)
		}
	}
}

func TestLoadWorkerRejects(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"HERALD_SIGNING_KEY": "/k"}, "HERALD_DATABASE_URL is required"},
		{map[string]string{"HERALD_DATABASE_URL": "x"}, "HERALD_SIGNING_KEY is required"},
		{map[string]string{"HERALD_DATABASE_URL": "x", "HERALD_SIGNING_KEY": "/k"}, "HERALD_SECRET_KEY is required"},
		{map[string]string{"HERALD_DATABASE_URL": "x", "HERALD_SIGNING_KEY": "/k", "HERALD_SIGN_V1A": "maybe"}, "HERALD_SIGN_V1A"},
		{map[string]string{"HERALD_DATABASE_URL": "x", "HERALD_SIGNING_KEY": "/k", "HERALD_EGRESS_PROXY": "socks5://p:1080"}, "HERALD_EGRESS_PROXY"},
		{map[string]string{"HERALD_DATABASE_URL": "x", "HERALD_SIGNING_KEY": "/k", "HERALD_RETRY_SCHEDULE": "1s,soon"}, `"soon" is not a duration`},
		{map[string]string{"HERALD_DATABASE_URL": "x", "HERALD_SIGNING_KEY": "/k", "HERALD_RETRY_SCHEDULE": "1s,-2s"}, "must be positive"},
		{map[string]string{"HERALD_DATABASE_URL": "x", "HERALD_SIGNING_KEY": "/k", "HERALD_ALLOW_NETWORKS": "10.0.0.0/33"}, "HERALD_ALLOW_NETWORKS"},
		{map[string]string{"HERALD_DATABASE_URL": "x", "HERALD_SIGNING_KEY": "/k", "HERALD_DELIVERY_TIMEOUT": "30"}, "HERALD_DELIVERY_TIMEOUT"},
		{map[string]string{"HERALD_DATABASE_URL": "x", "HERALD_SIGNING_KEY": "/k", "HERALD_MAX_REARMS": "three"}, "HERALD_MAX_REARMS"},
		{map[string]string{"HERALD_DATABASE_URL": "x", "HERALD_SIGNING_KEY": "/k", "HERALD_IDLE_TIMEOUT": "-1m"}, "negative"},
		{map[string]string{"HERALD_DATABASE_URL": "x", "HERALD_SIGNING_KEY": "/k", "HERALD_RELAY_MAX_ATTEMPTS": "0"}, "HERALD_RELAY_MAX_ATTEMPTS: 0: must be at least 1"},
		{map[string]string{"HERALD_DATABASE_URL": "x", "HERALD_SIGNING_KEY": "/k", "HERALD_RELAY_MAX_ATTEMPTS": "-3"}, "HERALD_RELAY_MAX_ATTEMPTS"},
		{map[string]string{"HERALD_DATABASE_URL": "x", "HERALD_SIGNING_KEY": "/k", "HERALD_RELAY_MAX_ATTEMPTS": "ten"}, "HERALD_RELAY_MAX_ATTEMPTS"},
		{map[string]string{"HERALD_DATABASE_URL": "x", "HERALD_SIGNING_KEY": "/k", "HERALD_API_DB_CONNS": "-1"}, "negative"},
		{map[string]string{"HERALD_DATABASE_URL": "x", "HERALD_SIGNING_KEY": "/k", "HERALD_DB_MIN_CONNS": "-1"}, "negative"},
		{map[string]string{"HERALD_DATABASE_URL": "x", "HERALD_SIGNING_KEY": "/k", "HERALD_DB_MIN_CONNS": "21"}, "HERALD_DB_MIN_CONNS: 21: must not exceed HERALD_DB_MAX_CONNS (20)"},
		{map[string]string{"HERALD_DATABASE_URL": "x", "HERALD_SIGNING_KEY": "/k", "HERALD_DB_MAX_CONNS": "5", "HERALD_DB_MIN_CONNS": "6"}, "must not exceed HERALD_DB_MAX_CONNS (5)"},
		{map[string]string{"HERALD_DATABASE_URL": "x", "HERALD_SIGNING_KEY": "/k", "HERALD_DB_MIN_CONNS": "some"}, "HERALD_DB_MIN_CONNS"},
		{map[string]string{"HERALD_DATABASE_URL": "x", "HERALD_SIGNING_KEY": "/k", "HERALD_API_TOKEN_CONCURRENCY": "many"}, "HERALD_API_TOKEN_CONCURRENCY"},
		{map[string]string{"HERALD_DATABASE_URL": "x", "HERALD_SIGNING_KEY": "/k", "HERALD_API_APP_CONCURRENCY": "-1"}, "negative"},
		{map[string]string{"HERALD_DATABASE_URL": "x", "HERALD_SIGNING_KEY": "/k", "HERALD_API_APP_CONCURRENCY": "4"}, "HERALD_API_APP_CONCURRENCY: 4: must not exceed HERALD_API_DB_CONNS - 1 (3)"},
		{map[string]string{"HERALD_DATABASE_URL": "x", "HERALD_SIGNING_KEY": "/k", "HERALD_API_DB_CONNS": "8", "HERALD_API_APP_CONCURRENCY": "8"}, "must not exceed HERALD_API_DB_CONNS - 1 (7)"},
		{map[string]string{"HERALD_DATABASE_URL": "x", "HERALD_SIGNING_KEY": "/k", "HERALD_TEMPORAL_UI_URL": "localhost:8233"}, "HERALD_TEMPORAL_UI_URL"},
		{map[string]string{"HERALD_DATABASE_URL": "x", "HERALD_SIGNING_KEY": "/k", "HERALD_TEMPORAL_UI_URL": "javascript:alert(1)"}, "HERALD_TEMPORAL_UI_URL"},
		{map[string]string{"HERALD_DATABASE_URL": "x", "HERALD_SIGNING_KEY": "/k", "HERALD_TEMPORAL_UI_URL": "https://ui.example/?q=1"}, "HERALD_TEMPORAL_UI_URL"},
		{map[string]string{"HERALD_DATABASE_URL": "x", "HERALD_SIGNING_KEY": "/k", "HERALD_BUILD_ID": "v1 rc"}, "HERALD_BUILD_ID"},
		{map[string]string{"HERALD_DATABASE_URL": "x", "HERALD_SIGNING_KEY": "/k", "HERALD_BUILD_ID": "-v1"}, "HERALD_BUILD_ID"},
		{map[string]string{"HERALD_DATABASE_URL": "x", "HERALD_SIGNING_KEY": "/k", "HERALD_BUILD_ID": strings.Repeat("a", 129)}, "HERALD_BUILD_ID"},
	} {
		if _, err := LoadWorker(env(tc.env)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want it to mention %q", tc.env, err, tc.want)
		}
	}
}

func TestEnvNames(t *testing.T) {
	names := EnvNames(Worker{})
	for _, want := range []string{"HERALD_DATABASE_URL", "TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "HERALD_HTTP_ADDR",
		"HERALD_SIGNING_KEY", "HERALD_ALLOW_NETWORKS", "HERALD_RETRY_SCHEDULE", "HERALD_DELIVERY_TIMEOUT", "HERALD_LOG_LEVEL",
		"HERALD_API_ADDR"} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Errorf("documented variable %s is not read by the worker", want)
		}
	}
}

// HERALD_SIGN_V1A=off drops v1a; HERALD_EGRESS_PROXY is parsed.
func TestLoadWorkerSigningAndProxy(t *testing.T) {
	base := map[string]string{"HERALD_DATABASE_URL": "postgres://x", "HERALD_SIGNING_KEY": "/keys", "HERALD_SECRET_KEY": "@/k"}
	w, err := LoadWorker(env(base))
	if err != nil || w.NoV1A || w.Proxy != nil {
		t.Fatalf("defaults: %+v, %v: want v1a on, no proxy", w, err)
	}
	base["HERALD_SIGN_V1A"] = "off"
	base["HERALD_EGRESS_PROXY"] = "http://proxy.internal:3128"
	w, err = LoadWorker(env(base))
	if err != nil || !w.NoV1A || w.Proxy == nil || w.Proxy.Host != "proxy.internal:3128" {
		t.Fatalf("off and proxy: %+v, %v", w, err)
	}
}
