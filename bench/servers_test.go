package main

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestTemporalDBCPU checks that -temporal-db-pid puts the process it names
// in the CPU accounting as Temporal's database (the PostgreSQL of
// scripts/temporal-pg.sh), and that without it there is no such figure.
func TestTemporalDBCPU(t *testing.T) {
	self := os.Getpid() // a process that exists, standing in for the postmaster
	o, err := parseFlags([]string{"-temporal-db-pid", strconv.Itoa(self)})
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{cfg: Config{PIDs: o.givenPIDs()}}
	b.pids = b.serverPIDs()
	if b.pids[temporalDB] != self {
		t.Fatalf("pids %v: want %s = %d", b.pids, temporalDB, self)
	}
	if _, ok := b.cpu(0)[temporalDB]; !ok {
		t.Errorf("no %s CPU figure with -temporal-db-pid", temporalDB)
	}
	o, err = parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	b = &bench{cfg: Config{PIDs: o.givenPIDs()}}
	b.pids = b.serverPIDs()
	if _, ok := b.cpu(0)[temporalDB]; ok {
		t.Errorf("a %s CPU figure without -temporal-db-pid", temporalDB)
	}

	// Herald's PostgreSQL and Temporal's one cluster: counted once, as
	// Herald's, and said so.
	var progress strings.Builder
	pids := map[string]int{temporalDB: self, "postgres": self}
	b = &bench{cfg: Config{PIDs: pids, Progress: &progress}}
	b.pids = b.serverPIDs()
	if _, ok := b.pids[temporalDB]; ok || b.pids["postgres"] != self {
		t.Errorf("one cluster for both: pids %v, want postgres alone", b.pids)
	}
	if !strings.Contains(progress.String(), "Herald's PostgreSQL too") {
		t.Errorf("one cluster for both went unsaid: %q", progress.String())
	}
}
