//go:build !windows

package signing

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Key files were loaded whatever their permissions: a private key readable
// by its group or by everyone is now refused, naming the file and the fix.
// Public keys may be world-readable.
func TestLoadKeysRefusesOpenPrivateKeyFiles(t *testing.T) {
	dir := t.TempDir()
	kid, err := GenerateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	priv := filepath.Join(dir, kid+PrivateKeySuffix)
	pub := filepath.Join(dir, kid+PublicKeySuffix)
	for _, mode := range []os.FileMode{0o640, 0o604, 0o644, 0o660, 0o602} {
		if err := os.Chmod(priv, mode); err != nil {
			t.Fatal(err)
		}
		for _, spec := range []string{dir, priv} {
			_, err := LoadKeys(spec)
			if err == nil || !strings.Contains(err.Error(), "open to its group or others") ||
				!strings.Contains(err.Error(), "chmod 600 "+priv) {
				t.Errorf("LoadKeys(%s) with mode %04o = %v, want a refusal naming the file", spec, mode, err)
			}
		}
	}
	for _, mode := range []os.FileMode{0o600, 0o400} {
		if err := os.Chmod(priv, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(pub, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadKeys(dir); err != nil {
			t.Errorf("LoadKeys with the private key at %04o and the public one at 0644: %v", mode, err)
		}
	}
}
