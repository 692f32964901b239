package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
)

// writeCert writes a self-signed certificate and its key, for TLS options.
func writeCert(t *testing.T) (certPath, keyPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "herald-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certPath, keyPath = filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath
}

func TestTemporalClientOptions(t *testing.T) {
	plain, err := Common{TemporalAddress: "t:7233", TemporalNamespace: "ns"}.TemporalClientOptions()
	if err != nil || plain.ConnectionOptions.TLS != nil || plain.Credentials != nil || plain.HostPort != "t:7233" || plain.Namespace != "ns" {
		t.Fatalf("plain options %+v, %v", plain, err)
	}
	cert, key := writeCert(t)
	mtls, err := Common{TemporalTLSCert: cert, TemporalTLSKey: key, TemporalTLSCA: cert, TemporalTLSServerName: "t.example"}.TemporalClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	if tc := mtls.ConnectionOptions.TLS; tc == nil || len(tc.Certificates) != 1 || tc.RootCAs == nil || tc.ServerName != "t.example" {
		t.Fatalf("mTLS options %+v", mtls.ConnectionOptions.TLS)
	}
	api, err := Common{TemporalAPIKey: "secret"}.TemporalClientOptions()
	if err != nil || api.ConnectionOptions.TLS == nil || api.Credentials == nil {
		t.Fatalf("API key options: TLS %v credentials %v err %v", api.ConnectionOptions.TLS, api.Credentials, err)
	}
	for _, c := range []struct {
		common Common
		want   string
	}{
		{Common{TemporalTLSCert: cert}, "go together"},
		{Common{TemporalTLSCert: cert, TemporalTLSKey: cert}, "client certificate"},
		{Common{TemporalTLSCA: key}, "no PEM certificate"},
		{Common{TemporalTLSCA: "/nonexistent"}, "TEMPORAL_TLS_SERVER_CA_CERT_PATH"},
	} {
		if _, err := c.common.TemporalClientOptions(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.common, err, c.want)
		}
	}
	if _, err := LoadCommon(env(map[string]string{"TEMPORAL_TLS": "maybe"})); err == nil {
		t.Error("TEMPORAL_TLS=maybe accepted")
	}
}

func TestTemporalCompression(t *testing.T) {
	for _, c := range []struct {
		value string
		want  client.GrpcCompression // nil: the SDK's default, gzip
	}{
		{"", nil},
		{"gzip", nil},
		{"none", &client.GrpcCompressionNone{}},
		{" None ", &client.GrpcCompressionNone{}},
	} {
		common, err := LoadCommon(env(map[string]string{"HERALD_TEMPORAL_COMPRESSION": c.value}))
		if err != nil {
			t.Fatalf("%q: %v", c.value, err)
		}
		opts, err := common.TemporalClientOptions()
		if err != nil {
			t.Fatalf("%q: %v", c.value, err)
		}
		if got := opts.ConnectionOptions.GrpcCompression; !reflect.DeepEqual(got, c.want) {
			t.Errorf("HERALD_TEMPORAL_COMPRESSION=%q: compression %#v, want %#v", c.value, got, c.want)
		}
	}
	common, err := LoadCommon(env(map[string]string{"HERALD_TEMPORAL_COMPRESSION": "zstd"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := common.TemporalClientOptions(); err == nil || !strings.Contains(err.Error(), "HERALD_TEMPORAL_COMPRESSION") {
		t.Errorf("HERALD_TEMPORAL_COMPRESSION=zstd: error %v, want one naming the variable", err)
	}
	// The worker refuses it while loading its settings, before it connects
	// to anything (exit 2).
	required := map[string]string{"HERALD_DATABASE_URL": "postgres://db", "HERALD_SIGNING_KEY": "/keys",
		"HERALD_SECRET_KEY": "@/keys/secret.key", "HERALD_TEMPORAL_COMPRESSION": "zstd"}
	if _, err := LoadWorker(env(required)); err == nil || !strings.Contains(err.Error(), "HERALD_TEMPORAL_COMPRESSION") {
		t.Errorf("LoadWorker with HERALD_TEMPORAL_COMPRESSION=zstd: error %v, want one naming the variable", err)
	}
	required["HERALD_TEMPORAL_COMPRESSION"] = "none"
	if _, err := LoadWorker(env(required)); err != nil {
		t.Errorf("LoadWorker with HERALD_TEMPORAL_COMPRESSION=none: %v", err)
	}
}
