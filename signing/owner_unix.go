//go:build unix

package signing

import (
	"fmt"
	"os"
	"syscall"
)

// effectiveUID is the user whose key files the worker trusts (besides
// root's); tests replace it to stand for a worker running as another user.
var effectiveUID = os.Geteuid

// checkTrusted refuses a key file or key folder that someone other than the
// worker's user or root can change: anyone who can write a key file, or add
// one to the folder, can make receivers trust tokens they sign. what is
// "file" or "folder".
func checkTrusted(what, path string, info os.FileInfo) error {
	if info.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("load keys: key %s %s has mode %04o, writable by its group or others: "+
			"anyone who can write there can publish a key receivers will trust (chmod go-w %s)",
			what, path, info.Mode().Perm(), path)
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if uid := int(st.Uid); uid != 0 && uid != effectiveUID() {
		return fmt.Errorf("load keys: key %s %s is owned by uid %d, not by the worker's user (uid %d) or root: "+
			"that user can publish a key receivers will trust (chown it to the worker's user)",
			what, path, uid, effectiveUID())
	}
	return nil
}
