package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

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
