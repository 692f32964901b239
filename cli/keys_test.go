package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"herald/internal/swverify"
	"herald/signing"
)

func TestKeysGenerate(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "keys")
	// No database needed.
	r := mustRun(t, env{}, "keys", "generate", "--out", dir)
	ks, err := signing.LoadKeys(dir)
	if err != nil {
		t.Fatalf("LoadKeys of the generated directory: %v", err)
	}
	kid := ks.Kids()[0]
	wantContains(t, "stdout", r.stdout, kid, filepath.Join(dir, kid+".pem"), "HERALD_SIGNING_KEY="+dir)

	out := decode[keyFiles](t, mustRun(t, env{}, "keys", "--json", "generate", "--out", dir).stdout)
	if out.Kid == "" || out.Kid == kid || out.Dir != dir {
		t.Errorf("keys generate --json = %+v", out)
	}
	for _, f := range []string{out.PrivateKey, out.PublicKey} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("reported key file: %v", err)
		}
	}
	if !strings.HasSuffix(out.PublicKey, signing.PublicKeySuffix) {
		t.Errorf("public key file %s", out.PublicKey)
	}
	ks, err = signing.LoadKeys(dir)
	if err != nil || len(ks.Kids()) != 2 {
		t.Fatalf("LoadKeys after a second key: %v, kids %v", err, ks)
	}

	// A file where the directory should be.
	file := writeFile(t, t.TempDir(), "taken", "x")
	if r := run(t, env{}, "keys", "generate", "--out", file); r.code != ExitError {
		t.Errorf("--out naming a file: exit %d, want %d\n%s", r.code, ExitError, r.stderr)
	}
}

func TestKeysExportStandardWebhooks(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "keys")
	mustRun(t, env{}, "keys", "generate", "--out", dir)
	mustRun(t, env{}, "keys", "generate", "--out", dir)
	ks, err := signing.LoadKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := decode[[]exportedKey](t, mustRun(t, env{}, "keys", "export", "--standard-webhooks", "--keys", dir, "--json").stdout)
	if len(got) != 2 || !got[0].Signing || got[1].Signing {
		t.Fatalf("export = %+v", got)
	}
	for _, k := range got {
		pub, err := swverify.ParsePublicKey(k.StandardWebhooks)
		if err != nil || !pub.Equal(ks.PublicKeys()[k.Kid]) {
			t.Fatalf("key %s: %q does not carry its public key (%v)", k.Kid, k.StandardWebhooks, err)
		}
	}
	r := mustRun(t, env{}, "keys", "export", "--standard-webhooks", "--keys", dir)
	wantContains(t, "stdout", r.stdout, got[0].StandardWebhooks, got[1].Kid, "signs now")
	if r := run(t, env{}, "keys", "export", "--keys", dir); r.code != ExitInvalid {
		t.Fatalf("export without a form: exit %d", r.code)
	}
}
