package signing

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// writeKey writes a fresh Ed25519 private key (PKCS#8 PEM) to path with the
// given modification time and returns its kid.
func writeKey(t *testing.T, path string, mtime time.Time) string {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, path, pemPrivateKey, der, mtime)
	return KeyID(pub)
}

// writePublicKey writes a fresh Ed25519 public key (PKIX PEM) and returns its kid.
func writePublicKey(t *testing.T, path string, mtime time.Time) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, path, pemPublicKey, der, mtime)
	return KeyID(pub)
}

func writePEM(t *testing.T, path, blockType string, der []byte, mtime time.Time) {
	t.Helper()
	data := pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if !mtime.IsZero() {
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
}

func TestGenerateKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys", "nested")
	kid, err := GenerateKey(dir)
	if err != nil {
		t.Fatalf("GenerateKey: %v", err)
	}
	if len(kid) != 16 {
		t.Errorf("kid %q: want 16 characters (12 bytes base64url)", kid)
	}

	dirInfo, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := dirInfo.Mode().Perm(); got != 0o700 {
		t.Errorf("directory mode %o, want 700", got)
	}
	privInfo, err := os.Stat(filepath.Join(dir, kid+PrivateKeySuffix))
	if err != nil {
		t.Fatalf("private key file: %v", err)
	}
	if got := privInfo.Mode().Perm(); got != 0o600 {
		t.Errorf("private key mode %o, want 600", got)
	}
	if _, err := os.Stat(filepath.Join(dir, kid+PublicKeySuffix)); err != nil {
		t.Fatalf("public key file: %v", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Errorf("directory holds %d entries, want the 2 key files", len(entries))
	}

	ks, err := LoadKeys(dir)
	if err != nil {
		t.Fatalf("LoadKeys: %v", err)
	}
	if got := ks.Kids(); !slices.Equal(got, []string{kid}) {
		t.Errorf("Kids() = %v, want [%s] (the .pub.pem must merge into its private key)", got, kid)
	}
	if got := ks.Signer().Kid(); got != kid {
		t.Errorf("signer kid %q, want %q", got, kid)
	}

	kid2, err := GenerateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if kid2 == kid {
		t.Error("two generated keys share a kid")
	}
}

func TestLoadKeys(t *testing.T) {
	base := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	type want struct {
		kids   []string // newest first
		signer string
		errHas string
		errIs  error
	}
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string) (spec string, w want)
	}{
		{"single file", func(t *testing.T, dir string) (string, want) {
			p := filepath.Join(dir, "signing.pem")
			kid := writeKey(t, p, base)
			return p, want{kids: []string{kid}, signer: kid}
		}},
		{"file without .pem suffix", func(t *testing.T, dir string) (string, want) {
			p := filepath.Join(dir, "signing.key")
			kid := writeKey(t, p, base)
			return p, want{kids: []string{kid}, signer: kid}
		}},
		{"directory, newest mtime signs", func(t *testing.T, dir string) (string, want) {
			older := writeKey(t, filepath.Join(dir, "b.pem"), base)
			newest := writeKey(t, filepath.Join(dir, "a.pem"), base.Add(time.Hour))
			writeKey(t, filepath.Join(dir, "ignored.txt"), base.Add(2*time.Hour))
			return dir, want{kids: []string{newest, older}, signer: newest}
		}},
		{"directory, equal mtimes: greater name signs", func(t *testing.T, dir string) (string, want) {
			a := writeKey(t, filepath.Join(dir, "2025-01.pem"), base)
			b := writeKey(t, filepath.Join(dir, "2025-06.pem"), base)
			return dir, want{kids: []string{b, a}, signer: b}
		}},
		{"public-only key is published, newest private signs", func(t *testing.T, dir string) (string, want) {
			priv := writeKey(t, filepath.Join(dir, "current.pem"), base)
			next := writePublicKey(t, filepath.Join(dir, "next.pub.pem"), base.Add(time.Hour))
			return dir, want{kids: []string{next, priv}, signer: priv}
		}},
		{"comma-separated list of file and directory", func(t *testing.T, dir string) (string, want) {
			sub := filepath.Join(dir, "more")
			if err := os.Mkdir(sub, 0o700); err != nil {
				t.Fatal(err)
			}
			f := filepath.Join(dir, "one.pem")
			k1 := writeKey(t, f, base.Add(2*time.Hour))
			k2 := writeKey(t, filepath.Join(sub, "two.pem"), base)
			k3 := writeKey(t, filepath.Join(sub, "three.pem"), base.Add(time.Hour))
			return f + " , " + sub + ",", want{kids: []string{k1, k3, k2}, signer: k1}
		}},
		{"same key listed twice is loaded once", func(t *testing.T, dir string) (string, want) {
			f := filepath.Join(dir, "k.pem")
			kid := writeKey(t, f, base)
			return f + "," + dir + "," + f, want{kids: []string{kid}, signer: kid}
		}},
		{"empty directory", func(t *testing.T, dir string) (string, want) {
			return dir, want{errHas: "no key files"}
		}},
		{"only public keys", func(t *testing.T, dir string) (string, want) {
			writePublicKey(t, filepath.Join(dir, "a.pub.pem"), base)
			return dir, want{errHas: "no private key"}
		}},
		{"missing path", func(t *testing.T, dir string) (string, want) {
			return filepath.Join(dir, "nope.pem"), want{errIs: os.ErrNotExist}
		}},
		{"PKCS#8 ECDSA private key", func(t *testing.T, dir string) (string, want) {
			ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			der, err := x509.MarshalPKCS8PrivateKey(ec)
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, "ec.pem")
			writePEM(t, p, pemPrivateKey, der, base)
			return p, want{errIs: ErrNotEd25519, errHas: "not an Ed25519 key"}
		}},
		{"PKIX ECDSA public key in a directory", func(t *testing.T, dir string) (string, want) {
			writeKey(t, filepath.Join(dir, "good.pem"), base)
			ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			der, err := x509.MarshalPKIXPublicKey(&ec.PublicKey)
			if err != nil {
				t.Fatal(err)
			}
			writePEM(t, filepath.Join(dir, "ec.pub.pem"), pemPublicKey, der, base)
			return dir, want{errIs: ErrNotEd25519, errHas: "ec.pub.pem"}
		}},
		{"SEC 1 EC private key block", func(t *testing.T, dir string) (string, want) {
			p := filepath.Join(dir, "ec.pem")
			writePEM(t, p, "EC PRIVATE KEY", []byte{1, 2, 3}, base)
			return p, want{errIs: ErrNotEd25519, errHas: `"EC PRIVATE KEY"`}
		}},
		{"not PEM", func(t *testing.T, dir string) (string, want) {
			p := filepath.Join(dir, "junk.pem")
			if err := os.WriteFile(p, []byte("hello"), 0o600); err != nil {
				t.Fatal(err)
			}
			return p, want{errHas: "no PEM block"}
		}},
		{"corrupt PKCS#8", func(t *testing.T, dir string) (string, want) {
			p := filepath.Join(dir, "bad.pem")
			writePEM(t, p, pemPrivateKey, []byte("garbage"), base)
			return p, want{errHas: "parse PKCS#8 private key"}
		}},
		{"empty spec", func(t *testing.T, dir string) (string, want) {
			return " , ", want{errHas: "no key files"}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec, w := tc.setup(t, t.TempDir())
			ks, err := LoadKeys(spec)
			if w.errHas != "" || w.errIs != nil {
				if err == nil {
					t.Fatalf("LoadKeys(%q) succeeded with kids %v, want an error", spec, ks.Kids())
				}
				if w.errHas != "" && !strings.Contains(err.Error(), w.errHas) {
					t.Errorf("error %q does not mention %q", err, w.errHas)
				}
				if w.errIs != nil && !errors.Is(err, w.errIs) {
					t.Errorf("error %q is not %v", err, w.errIs)
				}
				return
			}
			if err != nil {
				t.Fatalf("LoadKeys(%q): %v", spec, err)
			}
			if got := ks.Kids(); !slices.Equal(got, w.kids) {
				t.Errorf("Kids() = %v, want %v", got, w.kids)
			}
			if got := ks.Signer().Kid(); got != w.signer {
				t.Errorf("signer kid %q, want %q", got, w.signer)
			}
			if got := len(ks.PublicKeys()); got != len(w.kids) {
				t.Errorf("PublicKeys() holds %d keys, want %d", got, len(w.kids))
			}
		})
	}
}

func TestJWKS(t *testing.T) {
	dir := t.TempDir()
	base := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	oldKid := writeKey(t, filepath.Join(dir, "old.pem"), base)
	newKid := writeKey(t, filepath.Join(dir, "new.pem"), base.Add(time.Minute))
	pubKid := writePublicKey(t, filepath.Join(dir, "extra.pub.pem"), base.Add(-time.Minute))
	ks, err := LoadKeys(dir)
	if err != nil {
		t.Fatal(err)
	}

	var doc struct {
		Keys []map[string]string `json:"keys"`
	}
	if err := json.Unmarshal(ks.JWKS(), &doc); err != nil {
		t.Fatalf("JWKS is not JSON: %v\n%s", err, ks.JWKS())
	}
	wantOrder := []string{newKid, oldKid, pubKid}
	if len(doc.Keys) != len(wantOrder) {
		t.Fatalf("JWKS has %d keys, want %d: %s", len(doc.Keys), len(wantOrder), ks.JWKS())
	}
	pubs := ks.PublicKeys()
	for i, k := range doc.Keys {
		if k["kid"] != wantOrder[i] {
			t.Errorf("key %d kid %q, want %q (newest first)", i, k["kid"], wantOrder[i])
		}
		for field, want := range map[string]string{"kty": "OKP", "crv": "Ed25519", "use": "sig", "alg": "EdDSA"} {
			if k[field] != want {
				t.Errorf("key %d %s = %q, want %q", i, field, k[field], want)
			}
		}
		if len(k) != 6 {
			t.Errorf("key %d has fields %v, want exactly kty crv x kid use alg", i, k)
		}
		x, err := base64.RawURLEncoding.DecodeString(k["x"])
		if err != nil {
			t.Errorf("key %d x is not unpadded base64url: %v", i, err)
			continue
		}
		if !ed25519.PublicKey(x).Equal(pubs[k["kid"]]) {
			t.Errorf("key %d x does not match the public key", i)
		}
		if KeyID(x) != k["kid"] {
			t.Errorf("key %d kid is not derived from x", i)
		}
	}

	// JWKS returns a copy: callers cannot corrupt the published document.
	b := ks.JWKS()
	b[0] = 'X'
	if ks.JWKS()[0] != '{' {
		t.Error("JWKS() exposes its internal buffer")
	}
}

func TestJWKSHandler(t *testing.T) {
	dir := t.TempDir()
	writeKey(t, filepath.Join(dir, "k.pem"), time.Time{})
	ks, err := LoadKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	h := JWKSHandler(ks)

	tests := []struct {
		method     string
		wantStatus int
		wantBody   bool
	}{
		{http.MethodGet, http.StatusOK, true},
		{http.MethodHead, http.StatusOK, false},
		{http.MethodPost, http.StatusMethodNotAllowed, false},
	}
	for _, tc := range tests {
		t.Run(tc.method, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, JWKSPath, nil))
			if rec.Code != tc.wantStatus {
				t.Fatalf("status %d, want %d", rec.Code, tc.wantStatus)
			}
			if tc.wantStatus != http.StatusOK {
				return
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			cc := rec.Header().Get("Cache-Control")
			if !strings.Contains(cc, "max-age=") {
				t.Errorf("Cache-Control %q has no max-age", cc)
			}
			if tc.wantBody && rec.Body.String() != string(ks.JWKS()) {
				t.Errorf("body %q, want the JWKS", rec.Body.String())
			}
			if !tc.wantBody && rec.Body.Len() != 0 {
				t.Errorf("HEAD answered a body")
			}
		})
	}
}
