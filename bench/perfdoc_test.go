package main

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestPerformancePageReproducesItsParallelism: docs/performance.md says
// how many keys the ceiling and the floor keep in flight ("N keys in
// flight"), the parallelism its figures were measured at. Its Reproducing
// commands must measure at that parallelism too: when it is not the
// bench's default (-parallel), every command there that runs the ceiling
// or the floor passes -parallel N, or it would measure something else than
// the figures it claims to reproduce.
func TestPerformancePageReproducesItsParallelism(t *testing.T) {
	page, err := os.ReadFile("../docs/performance.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(page)
	m := regexp.MustCompile(`(\d+) keys in flight`).FindStringSubmatch(text)
	if m == nil {
		t.Fatal(`performance.md does not say how many keys the ceiling keeps in flight ("N keys in flight")`)
	}
	n, _ := strconv.Atoi(m[1])
	o, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(text, "## Reproducing")
	if !ok {
		t.Fatal("performance.md has no Reproducing section")
	}
	_, block, ok := strings.Cut(rest, "```sh\n")
	if !ok {
		t.Fatal("performance.md's Reproducing section has no sh block")
	}
	block, _, _ = strings.Cut(block, "```")
	commands := 0
	for _, line := range strings.Split(block, "\n") {
		cmd, _, _ := strings.Cut(line, "#")
		if !strings.HasPrefix(cmd, "make bench") && !strings.HasPrefix(cmd, "go run ./bench") {
			continue
		}
		if strings.Contains(cmd, "-herald-only") || strings.Contains(cmd, "-render") {
			continue // neither the ceiling nor the floor runs
		}
		commands++
		if n != o.parallel && !strings.Contains(cmd, "-parallel "+m[1]) {
			t.Errorf("performance.md's figures were measured at %d keys in flight, the bench's default is %d, "+
				"and this command does not pass -parallel %d:\n%s", n, o.parallel, n, strings.TrimSpace(line))
		}
	}
	if commands == 0 {
		t.Fatal("no command in performance.md's Reproducing section runs the ceiling or the floor")
	}
}
