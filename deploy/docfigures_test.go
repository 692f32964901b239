package deploy_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"herald/api"
	"herald/config"
	"herald/internal/tracing"
	"herald/keyops"
	"herald/manifest"
	"herald/publish"
	"herald/relay"
	heraldservice "herald/service"
	"herald/store"
)

// docFigure is a figure a page quotes from the code: the pattern's first
// group must read as the constant, and every match in the page is checked.
type docFigure struct {
	page    string
	pattern string
	want    string
}

// docFigures are the code's constants the pages quote by hand.
var docFigures = []docFigure{
	{"docs/production.md", `(\d+) for workflow tasks and \d+ for\s+activity tasks`, fmt.Sprint(heraldservice.WorkflowTaskPollers)},
	{"docs/production.md", `\d+ for workflow tasks and (\d+) for\s+activity tasks`, fmt.Sprint(heraldservice.ActivityTaskPollers)},
	{"docs/production.md", `autoscaling poller\s+behaviour pinned at (\d+)`, fmt.Sprint(heraldservice.WorkflowTaskPollers)},
	{"README.md", `Fixed-count pollers \((\d+) for\s+workflow tasks`, fmt.Sprint(heraldservice.WorkflowTaskPollers)},
	{"README.md", `sticky queue; (\d+) for\s+activities`, fmt.Sprint(heraldservice.ActivityTaskPollers)},
	{"docs/production.md", `HTTP servers \(up to (\d+) s\)`, seconds(heraldservice.HTTPShutdownTimeout)},
	{"docs/production.md", `flushes its spans for up to (\d+) s`, seconds(tracing.FlushTimeout)},
	{"docs/observability.md", `A signal carries up to (\d+) events`, fmt.Sprint(relay.DefaultMaxEventsPerSignal)},
	{"docs/operations-api.md", `one redeliver signal per (\d+) events`, fmt.Sprint(keyops.IDsPerSignal)},
	{"README.md", `relay \(in the workers; (\d+) partitions\)`, fmt.Sprint(store.RelayPartitions)},
	{"docs/design.md", `The log's keys fall into (\d+) partitions`, fmt.Sprint(store.RelayPartitions)},
	{"docs/production.md", `keys fall into (\d+) partitions`, fmt.Sprint(store.RelayPartitions)},
	{"docs/docker.md", `the relay's (\d+) partitions`, fmt.Sprint(store.RelayPartitions)},
	{"docs/runbook.md", `(\d+) partitions of the log`, fmt.Sprint(store.RelayPartitions)},
	{"docs/production.md", `renews every second for (\d+) s`, seconds(store.PartitionLeaseTTL)},
	{"docs/production.md", `probes the log every (\d+) ms`, fmt.Sprint(relay.DefaultIdlePoll.Milliseconds())},
	{"docs/observability.md", `the worker flushes the spans still buffered,\s+waiting at most (\d+) s`, seconds(tracing.FlushTimeout)},
	// Sizes and limits of publishing.
	{"docs/design.md", `the data as given is at most (\d+) KiB`, kib(publish.DefaultMaxEventBytes)},
	{"docs/design.md", `the encoded event is at most (\d+) KiB`, kib(publish.DefaultMaxEventBytes)},
	{"docs/manifests.md", `Data longer than the event limit \((\d+) KiB\)`, kib(publish.DefaultMaxEventBytes)},
	{"docs/observability.md", `count towards the (\d+) KiB limit of an encoded event`, kib(publish.DefaultMaxEventBytes)},
	{"docs/design.md", `A ` + "`dataSchema`" + ` is compiled under a budget \((\d+) KiB`, kib(manifest.MaxSchemaBytes)},
	{"docs/manifests.md", `A ` + "`dataSchema`" + ` may be at most (\d+) KiB`, kib(manifest.MaxSchemaBytes)},
	{"docs/design.md", `the body is over (\d+) MiB`, fmt.Sprint(api.DefaultMaxBodyBytes >> 20)},
	{"docs/publishing.md", `the body is over (\d+) MiB`, fmt.Sprint(api.DefaultMaxBodyBytes >> 20)},
	{"docs/design.md", `holds over (1,000) events`, thousands(api.MaxBatchEvents)},
	{"docs/publishing.md", "`ReadHeaderTimeout` (\\d+) s", seconds(api.ReadHeaderTimeout)},
	{"docs/publishing.md", "`ReadTimeout`\\s+and `WriteTimeout` (\\d+) s", seconds(api.WriteTimeout)},
	{"docs/publishing.md", "`IdleTimeout` (\\d+) s", seconds(api.IdleTimeout)},
	{"docs/publishing.md", "`IdleTimeout` \\d+ s, (\\d+) KiB of headers", kib(api.MaxHeaderBytes)},
	{"docs/publishing.md", `a JSON event object \(alone or in an array\) is over (\d+) KiB`, kib(publish.MaxLineBytes)},
	{"docs/design.md", `a JSON event object \(alone or in an array\) is over (\d+) KiB`, kib(publish.MaxLineBytes)},
	{"docs/design.md", `decoded one after the other, each within (\d+) KiB`, kib(publish.MaxLineBytes)},
	// The API's abuse limits.
	{"docs/publishing.md", `refused by every worker within (\d+) s`, seconds(api.DefaultTokenCacheTTL)},
	{"docs/console.md", `every session of it within (\d+) s, the API's token cache`, seconds(api.DefaultTokenCacheTTL)},
	{"docs/publishing.md", `\((\d+) in a row, then one a second\)`, fmt.Sprint(api.DefaultAuthFailureBurst)},
	{"docs/production.md", `\((\d+) in a row, then one a second;`, fmt.Sprint(api.DefaultAuthFailureBurst)},
	{"docs/publishing.md", "`HERALD_API_TOKEN_CONCURRENCY` \\((\\d+)\\)", fmt.Sprint(config.DefaultAPITokenConcurrency)},
}

func kib(n int) string { return fmt.Sprint(n >> 10) }

// thousands writes n as the docs do: 1,000.
func thousands(n int) string {
	if n < 1000 {
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("%s,%03d", thousands(n/1000), n%1000)
}

func seconds(d time.Duration) string { return fmt.Sprint(int(d.Seconds())) }

// TestDocsQuoteTheCodesFigures reads each figure the docs quote from the
// code (pollers, the relay's partitions and caps, stop timeouts) against
// the constant it quotes, so a change of one is a failing test until the
// docs follow.
func TestDocsQuoteTheCodesFigures(t *testing.T) {
	for _, f := range docFigures {
		src, err := os.ReadFile(filepath.Join(repoRoot, f.page))
		if err != nil {
			t.Fatal(err)
		}
		ms := regexp.MustCompile(f.pattern).FindAllSubmatch(src, -1)
		if len(ms) == 0 {
			t.Errorf("%s no longer says %q; update the page or this test's table", f.page, f.pattern)
		}
		for _, m := range ms {
			if string(m[1]) != f.want {
				t.Errorf("%s: %q quotes %s; the code says %s", f.page, m[0], m[1], f.want)
			}
		}
	}
}

// chaosFigures are the passages that report `make chaos` runs: each must
// name the commit it was measured at.
var chaosFigures = []struct{ page, start, end string }{
	{"README.md", "## Reliability", "\n## "},
	{"docs/reliability.md", "### `make chaos`", "\n### "},
}

var commitRef = regexp.MustCompile(`\bcommit ([0-9a-f]{7,40})\b`)

// TestChaosFiguresNameTheirCommit: every report of chaos runs in the docs
// says which commit it measured, and that commit is in the repository's
// history, so a reader can tell figures that predate a change of the
// delivery path.
func TestChaosFiguresNameTheirCommit(t *testing.T) {
	_, gitErr := exec.LookPath("git")
	for _, f := range chaosFigures {
		src, err := os.ReadFile(filepath.Join(repoRoot, f.page))
		if err != nil {
			t.Fatal(err)
		}
		text := string(src)
		n := 0
		for {
			i := strings.Index(text, f.start)
			if i < 0 {
				break
			}
			text = text[i+len(f.start):]
			section := text
			if j := strings.Index(section, f.end); j >= 0 {
				section = section[:j]
			}
			n++
			heading, _, _ := strings.Cut(section, "\n")
			m := commitRef.FindStringSubmatch(section)
			if m == nil {
				t.Errorf("%s: %q reports chaos runs without naming their commit", f.page, f.start+heading)
				continue
			}
			if gitErr == nil {
				cmd := exec.Command("git", "cat-file", "-e", m[1]+"^{commit}")
				cmd.Dir = repoRoot
				if err := cmd.Run(); err != nil {
					t.Errorf("%s: %q names commit %s, which is not in this repository's history", f.page, f.start+heading, m[1])
				}
			}
		}
		if n == 0 {
			t.Errorf("%s has no %q: update this test's table", f.page, f.start)
		}
	}
}
