package store_test

import (
	"testing"

	"herald/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
