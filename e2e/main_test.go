package e2e_test

import (
	"testing"

	"herald/internal/testenv"
)

// The system under test is internal/testkit's System: a worker on a
// listener the test keeps across restarts, a verifying recording
// subscriber and the fixture manifests.

func TestMain(m *testing.M) { testenv.Main(m) }
