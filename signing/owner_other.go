//go:build !unix

package signing

import "os"

// checkTrusted is a no-op where files have no Unix owner and mode bits.
func checkTrusted(what, path string, info os.FileInfo) error { return nil }
