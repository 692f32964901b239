package testenv

import (
	"net/netip"
	"testing"
	"time"

	"herald/config"
	"herald/signing"
)

// WorkerConfig returns a worker configuration of its own for one test: a
// fresh database schema, a fresh Temporal namespace, a generated signing
// key, loopback allowed, and a short retry schedule (two retries of 200 ms)
// so a failing key fails within a second. Tests adjust it before use.
func WorkerConfig(t testing.TB) config.Worker {
	t.Helper()
	dbURL := NewSchema(t)
	address, namespace := NewNamespace(t)
	keyDir := t.TempDir()
	if _, err := signing.GenerateKey(keyDir); err != nil {
		t.Fatal(err)
	}
	return config.Worker{
		Common: config.Common{DatabaseURL: dbURL, TemporalAddress: address, TemporalNamespace: namespace,
			LogLevel: "warn"},
		HTTPAddr:        "127.0.0.1:0",
		SigningKey:      keyDir,
		SecretKey:       SecretKey,
		Allow:           []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")},
		Schedule:        []time.Duration{200 * time.Millisecond, 200 * time.Millisecond},
		DeliveryTimeout: 5 * time.Second,
	}
}

// SecretKey is the HERALD_SECRET_KEY of test workers: a fixed test key.
const SecretKey = "aGVyYWxkLXRlc3Qtc2VjcmV0LWtleS0zMi1ieXRlcyE="
