package service

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sync"
)

// processBuildID is the build id of this process's executable, which its
// Temporal worker stamps its workflow tasks with (worker.SetBinaryChecksum)
// and the relay starts runs with (relay.Relay.BuildID) unless
// HERALD_BUILD_ID names one: the first 16 bytes of the executable's
// SHA-256, in hex. The SDK would compute its own from the same file (an
// MD5, or a SHA-256 in FIPS mode); Herald sets it, so the relay's starts
// name the id the worker uses whatever the SDK's choice. Replicas of one
// release built apart (another architecture) get other ids: a run one
// starts and another's worker first takes then has both in BuildIds, and
// costs the second visibility write the ids were to save. Read once a
// process.
var processBuildID = sync.OnceValues(func() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the executable: %w", err)
	}
	f, err := os.Open(exe)
	if err != nil {
		return "", fmt.Errorf("read the executable: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read the executable: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)[:16]), nil
})
