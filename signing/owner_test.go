//go:build unix

package signing

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A public key dropped into a key folder was published in the JWKS, so
// receivers trusted tokens signed by whoever dropped it. Key files and their
// folder must now be owned by the worker's user (or root) and not writable by
// group or others (issue 27 item 8).
func TestLoadKeysRefusesKeysOthersCanChange(t *testing.T) {
	// setup returns a key folder with one genuine key pair and a stranger's
	// public key, as someone with write access to the folder would drop it.
	setup := func(t *testing.T) (dir, dropped string) {
		t.Helper()
		dir = t.TempDir()
		if _, err := GenerateKey(dir); err != nil {
			t.Fatal(err)
		}
		other := t.TempDir()
		kid, err := GenerateKey(other)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(other, kid+PublicKeySuffix))
		if err != nil {
			t.Fatal(err)
		}
		dropped = filepath.Join(dir, kid+PublicKeySuffix)
		if err := os.WriteFile(dropped, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return dir, dropped
	}
	refused := func(t *testing.T, spec, name, want string) {
		t.Helper()
		ks, err := LoadKeys(spec)
		if err == nil {
			t.Fatalf("LoadKeys(%s) published %d keys, want a refusal", spec, len(ks.keys))
		}
		if !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), want) {
			t.Errorf("LoadKeys(%s) = %v, want an error naming %s and saying %q", spec, err, name, want)
		}
	}

	t.Run("folder and files closed: loads", func(t *testing.T) {
		dir, _ := setup(t)
		ks, err := LoadKeys(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(ks.keys) != 2 {
			t.Errorf("%d keys, want 2", len(ks.keys))
		}
	})
	for _, mode := range []os.FileMode{0o664, 0o646, 0o666} {
		t.Run("public key file writable by others "+mode.String(), func(t *testing.T) {
			dir, dropped := setup(t)
			if err := os.Chmod(dropped, mode); err != nil {
				t.Fatal(err)
			}
			refused(t, dir, dropped, "writable by its group or others")
		})
	}
	for _, mode := range []os.FileMode{0o770, 0o707, 0o777, 0o777 | os.ModeSticky} {
		t.Run("folder writable by others "+mode.String(), func(t *testing.T) {
			dir, dropped := setup(t)
			if err := os.Chmod(dir, mode); err != nil {
				t.Fatal(err)
			}
			refused(t, dir, dir, "writable by its group or others")
			// Naming a file there does not avoid the folder's check.
			refused(t, dropped, dir, "writable by its group or others")
		})
	}
	t.Run("file owned by another user", func(t *testing.T) {
		dir, dropped := setup(t)
		stranger := asOtherUser(t, dropped)
		refused(t, dir, dropped, "owned by uid "+stranger)
	})
	t.Run("folder owned by another user", func(t *testing.T) {
		dir, _ := setup(t)
		stranger := asOtherUser(t, dir)
		refused(t, dir, dir, "owned by uid "+stranger)
	})
}

// asOtherUser makes path belong to a user other than the worker's and root,
// and returns that uid. As root (as in CI) it chowns path; otherwise it makes
// the worker stand for another user than the one owning path.
func asOtherUser(t *testing.T, path string) string {
	t.Helper()
	if os.Geteuid() == 0 {
		const uid = 4242
		if err := os.Chown(path, uid, -1); err != nil {
			t.Fatal(err)
		}
		return "4242"
	}
	mine := os.Geteuid()
	old := effectiveUID
	effectiveUID = func() int { return mine + 1 }
	t.Cleanup(func() { effectiveUID = old })
	return strconv.Itoa(mine)
}
