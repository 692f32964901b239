package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"herald/relay"
)

// TestParallelHelpNamesTheRelayDefault: -parallel's help quotes Herald's
// relay default from the relay itself, not a copy that drifts.
func TestParallelHelpNamesTheRelayDefault(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "help")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stderr := os.Stderr
	os.Stderr = f
	_, perr := parseFlags([]string{"-h"})
	os.Stderr = stderr
	if !errors.Is(perr, flag.ErrHelp) {
		t.Fatalf("bench -h: %v, want flag.ErrHelp", perr)
	}
	help, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("Herald's relay default is %d)", relay.DefaultParallel)
	if !strings.Contains(string(help), want) {
		t.Errorf("bench -h does not say %q:\n%s", want, help)
	}
}
