package deploy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"herald/activities"
	heraldapi "herald/api"
	"herald/config"
	"herald/filter"
	"herald/internal/tracing"
	"herald/keyops"
	"herald/manifest"
	"herald/publish"
	"herald/relay"
	heraldservice "herald/service"
	"herald/signing"
	"herald/store"
	"herald/subscriber"
	"herald/workflows"
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
	// Identifiers and manifests, as design.md has them.
	{"docs/design.md", "at most (\\d+) characters \\| `person.updated`", fmt.Sprint(manifest.MaxEventNameLen)},
	{"docs/design.md", `\| version \| an integer from 1 to ([\d,]+) \|`, thousands(manifest.MaxVersion)},
	{"docs/design.md", `\| subject key \| 1 to (\d+) bytes`, fmt.Sprint(publish.MaxSubjectBytes)},
	{"docs/design.md", "by default\\s+`([^`]+)`\\), the `events`", manifest.DefaultDeliveryPath},
	{"docs/design.md", "`maxAttempts`, an integer from 1 to (\\d+);", fmt.Sprint(manifest.MaxAttemptsLimit)},
	{"docs/operational-events.md", `A subject key longer than (\d+) bytes`, fmt.Sprint(publish.MaxSubjectBytes)},
	// Sizes and limits of publishing.
	{"docs/design.md", `the data as given is at most (\d+) KiB`, kib(publish.DefaultMaxEventBytes)},
	{"docs/design.md", `the encoded event is at most (\d+) KiB`, kib(publish.DefaultMaxEventBytes)},
	{"docs/manifests.md", `Data longer than the event limit \((\d+) KiB\)`, kib(publish.DefaultMaxEventBytes)},
	{"docs/observability.md", `count towards the (\d+) KiB limit of an encoded event`, kib(publish.DefaultMaxEventBytes)},
	{"docs/design.md", `A ` + "`dataSchema`" + ` is compiled under a budget \((\d+) KiB`, kib(manifest.MaxSchemaBytes)},
	{"docs/manifests.md", `A ` + "`dataSchema`" + ` may be at most (\d+) KiB`, kib(manifest.MaxSchemaBytes)},
	{"docs/design.md", `the body is over (\d+) MiB`, fmt.Sprint(heraldapi.DefaultMaxBodyBytes >> 20)},
	{"docs/publishing.md", `the body is over (\d+) MiB`, fmt.Sprint(heraldapi.DefaultMaxBodyBytes >> 20)},
	{"docs/design.md", `holds over (1,000) events`, thousands(heraldapi.MaxBatchEvents)},
	{"docs/publishing.md", "`ReadHeaderTimeout` (\\d+) s", seconds(heraldapi.ReadHeaderTimeout)},
	{"docs/publishing.md", "`ReadTimeout`\\s+and `WriteTimeout` (\\d+) s", seconds(heraldapi.WriteTimeout)},
	{"docs/publishing.md", "`IdleTimeout` (\\d+) s", seconds(heraldapi.IdleTimeout)},
	{"docs/publishing.md", "`IdleTimeout` \\d+ s, (\\d+) KiB of headers", kib(heraldapi.MaxHeaderBytes)},
	{"docs/publishing.md", `a JSON event object \(alone or in an array\) is over (\d+) KiB`, kib(publish.MaxLineBytes)},
	{"docs/design.md", `a JSON event object \(alone or in an array\) is over (\d+) KiB`, kib(publish.MaxLineBytes)},
	{"docs/design.md", `decoded one after the other, each within (\d+) KiB`, kib(publish.MaxLineBytes)},
	// The API's abuse limits.
	{"docs/publishing.md", `refused by every worker within (\d+) s`, seconds(heraldapi.DefaultTokenCacheTTL)},
	{"docs/console.md", `every session of it within (\d+) s, the API's token cache`, seconds(heraldapi.DefaultTokenCacheTTL)},
	{"docs/publishing.md", `\((\d+) in a row, then one a second\)`, fmt.Sprint(heraldapi.DefaultAuthFailureBurst)},
	{"docs/production.md", `\((\d+) in a row, then one a second;`, fmt.Sprint(heraldapi.DefaultAuthFailureBurst)},
	{"docs/publishing.md", "`HERALD_API_TOKEN_CONCURRENCY` \\((\\d+)\\)", fmt.Sprint(config.DefaultAPITokenConcurrency)},
	{"docs/design.md", "`HERALD_API_DB_CONNS` − 1: (\\d+)", fmt.Sprint(config.MaxAPIAppConcurrency(config.DefaultAPIDBConns))},
	{"docs/design.md", "`HERALD_API_DB_CONNS` − 1 \\((\\d+); at least 1\\)", fmt.Sprint(config.MaxAPIAppConcurrency(config.DefaultAPIDBConns))},
	{"docs/publishing.md", "`HERALD_API_DB_CONNS` − 1: (\\d+)", fmt.Sprint(config.MaxAPIAppConcurrency(config.DefaultAPIDBConns))},
	{"docs/production.md", "`HERALD_API_DB_CONNS` − 1: (\\d+)", fmt.Sprint(config.MaxAPIAppConcurrency(config.DefaultAPIDBConns))},
	{"docs/design.md", `waited (\d+) s for a lock`, seconds(heraldapi.LockTimeout)},
	{"docs/design.md", `A lock is waited for at most (\d+) s`, seconds(heraldapi.LockTimeout)},
	{"docs/design.md", "`lock_timeout` (\\d+) s \\(`api.LockTimeout`", seconds(heraldapi.LockTimeout)},
	{"docs/design.md", `gives up after (\d+) s\s+with`, seconds(heraldapi.LockTimeout)},
	{"docs/design.md", `over HTTP for at most (\d+) s`, seconds(heraldapi.LockTimeout)},
	{"docs/publishing.md", `held by another transaction for (\d+) s`, seconds(heraldapi.LockTimeout)},
	{"docs/publishing.md", `The HTTP API waits at most (\d+) s`, seconds(heraldapi.LockTimeout)},
	{"docs/operations-api.md", `A statement that waits (\d+) s for a lock`, seconds(heraldapi.LockTimeout)},
	{"docs/production.md", `A request\s+waits at most (\d+) s for a key's lock`, seconds(heraldapi.LockTimeout)},
	{"api/openapi.yaml", `waited (\d+) s for a lock`, seconds(heraldapi.LockTimeout)},
	// Manifests: schemas, numbers, validation, filters and the error policy.
	{"docs/manifests.md", `at most (\d+) KiB, \d+ levels deep`, kib(manifest.MaxSchemaBytes)},
	{"docs/manifests.md", `KiB, (\d+) levels deep`, fmt.Sprint(manifest.MaxSchemaDepth)},
	{"docs/design.md", `\(\d+ KiB, (\d+) levels, [\d,]+\s+subschemas`, fmt.Sprint(manifest.MaxSchemaDepth)},
	{"docs/manifests.md", `levels deep, ([\d,]+)\s+subschemas`, thousands(manifest.MaxExpandedSchema)},
	{"docs/design.md", `levels, ([\d,]+)\s+subschemas once references are expanded`, thousands(manifest.MaxExpandedSchema)},
	{"docs/manifests.md", `and take at most (\d+) s to compile`, seconds(manifest.MaxCompileTime)},
	{"docs/design.md", `subschemas once references are expanded, (\d+) s`, seconds(manifest.MaxCompileTime)},
	{"docs/manifests.md", `more than\s+(\d+) subschemas to one value`, fmt.Sprint(manifest.MaxChecksPerValue)},
	{"docs/manifests.md", `exponent must be within ±(\d+)`, fmt.Sprint(manifest.MaxNumberExponent)},
	{"docs/manifests.md", `it may have at most\s+(\d+) digits`, fmt.Sprint(manifest.MaxNumberDigits)},
	{"docs/manifests.md", `may take at most ([\d,]+) steps`, thousands(manifest.MaxValidationSteps)},
	{"docs/design.md", `Data over ([\d,]+) steps`, thousands(manifest.MaxValidationSteps)},
	{"docs/manifests.md", `the events of one request\s+([\d,]+);`, thousands(manifest.MaxRequestValidationSteps)},
	{"docs/design.md", `its request's ([\d,]+) steps`, thousands(manifest.MaxRequestValidationSteps)},
	{"docs/manifests.md", `in at most ([\d,]+) characters`, thousands(filter.MaxLength)},
	{"docs/manifests.md", `capped \(CEL cost ([\d,]+), \d+ ms\)`, thousands(filter.CostLimit)},
	{"docs/manifests.md", `capped \(CEL cost [\d,]+, (\d+) ms\)`, fmt.Sprint(filter.Deadline.Milliseconds())},
	{"docs/design.md", `exceeds the cost limit of ([\d,]+)`, thousands(filter.CostLimit)},
	{"docs/design.md", `One evaluation stops at CEL cost ([\d,]+)`, thousands(filter.CostLimit)},
	{"docs/design.md", `\(` + "`cost_limit`" + `\) or after (\d+) ms`, fmt.Sprint(filter.Deadline.Milliseconds())},
	{"docs/manifests.md", `\(1 to (\d+)\) replaces the retry schedule's`, fmt.Sprint(manifest.MaxAttemptsLimit)},
	{"docs/manifests.md", `replaces the retry schedule's (\d+) attempts`, fmt.Sprint(len(workflows.DefaultRetrySchedule) + 1)},
	{"docs/manifests.md", `its last delay \((\w+)\) repeats`, short(workflows.DefaultRetrySchedule[len(workflows.DefaultRetrySchedule)-1])},
	{"docs/runbook.md", `by default, (\d+) attempts\)`, fmt.Sprint(len(workflows.DefaultRetrySchedule) + 1)},
	// The Delivery workflow's defaults.
	{"docs/runbook.md", "the schedule \\(`([^`]+)` by default", schedule(workflows.DefaultRetrySchedule)},
	{"docs/design.md", "on the schedule\\s+`([^`]+)` \\(\\d+ attempts", schedule(workflows.DefaultRetrySchedule)},
	{"docs/design.md", "on the schedule\\s+`[^`]+` \\((\\d+) attempts", fmt.Sprint(len(workflows.DefaultRetrySchedule) + 1)},
	{"docs/design.md", "`HERALD_REARM_COOLDOWN` \\((\\w+)\\)", short(workflows.DefaultRearmCooldown)},
	{"docs/design.md", "`HERALD_MAX_REARMS` \\((\\d+)\\) times", fmt.Sprint(workflows.DefaultMaxRearms)},
	{"docs/runbook.md", `after a cooldown \((\w+) by default, at most \d+ times`, short(workflows.DefaultRearmCooldown)},
	{"docs/runbook.md", `after a cooldown \(\w+ by default, at most (\d+) times`, fmt.Sprint(workflows.DefaultMaxRearms)},
	{"docs/design.md", "no answer within `HERALD_DELIVERY_TIMEOUT` \\((\\w+)\\)", short(activities.DefaultPostTimeout)},
	{"docs/runbook.md", `no answer within the delivery timeout \((\d+) s by default\)`, seconds(activities.DefaultPostTimeout)},
	{"docs/runbook.md", `completes after being\s+idle \((\d+) minutes by default\)`, fmt.Sprint(int(workflows.DefaultIdleTimeout.Minutes()))},
	// The relay, as design.md has it.
	{"docs/design.md", "a probe every `HERALD_RELAY_POLL_INTERVAL` \\((\\d+) ms\\)", fmt.Sprint(relay.DefaultIdlePoll.Milliseconds())},
	{"docs/design.md", "was queued at least (\\d+) s ago\\s+\\(`store.HeldAfter`", seconds(store.HeldAfter)},
	{"docs/design.md", `With every sweep \((\d+) s\) the leader`, seconds(relay.DefaultSweepInterval)},
	{"docs/design.md", "After `HERALD_RELAY_MAX_ATTEMPTS` \\((\\d+)\\) counted", fmt.Sprint(relay.DefaultMaxAttempts)},
	{"docs/design.md", "`now \\+ min\\(2\\^n s, (\\d+) min\\)`", fmt.Sprint(int(store.MaxRelayBackoff.Minutes()))},
	{"docs/design.md", "renews\\s+its rows for (\\d+) s \\(`store.PartitionLeaseTTL`\\)", seconds(store.PartitionLeaseTTL)},
	{"docs/design.md", `up to ceil\((\d+) / live workers\)`, fmt.Sprint(store.RelayPartitions)},
	{"docs/production.md", `leads at most ceil\((\d+) / replicas\)`, fmt.Sprint(store.RelayPartitions)},
	// The relay's give-up and the partitions' leases, as the runbook has them.
	{"docs/runbook.md", "after `HERALD_RELAY_MAX_ATTEMPTS` \\((\\d+)\\) failed", fmt.Sprint(relay.DefaultMaxAttempts)},
	{"docs/runbook.md", `at most (\d+) min: ` + "`min\\(2\\^n s, \\d+ min\\)`", fmt.Sprint(int(store.MaxRelayBackoff.Minutes()))},
	{"docs/runbook.md", "`min\\(2\\^n s, (\\d+) min\\)`", fmt.Sprint(int(store.MaxRelayBackoff.Minutes()))},
	{"docs/runbook.md", `once balanced they add up to (\d+)`, fmt.Sprint(store.RelayPartitions)},
	{"docs/runbook.md", `loses them (\d+) s after ` + "`expires_at`", seconds(store.PartitionLeaseTTL)},
	{"docs/runbook.md", `\(at most (\d+) ids a signal`, fmt.Sprint(keyops.IDsPerSignal)},
	// The receiver kit and Herald's tokens, as signing-keys.md has them.
	{"docs/signing-keys.md", `triggers a refresh \(at most one every (\d+) s`, seconds(subscriber.JWKSRefreshInterval)},
	{"docs/signing-keys.md", `next JWKS fetch \(at most one per (\d+) s\)`, seconds(subscriber.JWKSRefreshInterval)},
	{"docs/signing-keys.md", `but only (\d+) such deliveries\s+from one remote address`, fmt.Sprint(subscriber.MaxKidWaitsPerSource)},
	{"docs/signing-keys.md", `from one remote address and (\d+) in all`, fmt.Sprint(subscriber.MaxKidWaits)},
	{"docs/signing-keys.md", `JWKS\s+cache age \((\d+) minutes by default\)`, fmt.Sprint(int(subscriber.DefaultJWKSMaxAge.Minutes()))},
	{"docs/signing-keys.md", `the longest token lifetime \((\d+) minutes\)`, fmt.Sprint(int(signing.MaxTTL.Minutes()))},
	{"README.md", "`exp` ≤ (\\d+) min", fmt.Sprint(int(signing.MaxTTL.Minutes()))},
	{"docs/docker.md", `until the tokens it signed have\s+expired \((\d+) minutes\)`, fmt.Sprint(int(signing.MaxTTL.Minutes()))},
	{"docs/console.md", `an expiry \((\d+) hours\)`, fmt.Sprint(int(heraldapi.ConsoleSessionTTL.Hours()))},
	{"docs/console.md", `A session ends by\s+itself after (\d+) hours`, fmt.Sprint(int(heraldapi.ConsoleSessionTTL.Hours()))},
	// production.md's PostgreSQL and publishing API settings.
	{"docs/production.md", "opens at most `HERALD_DB_MAX_CONNS` connections \\((\\d+) by\\s+default\\)", fmt.Sprint(config.DefaultDBMaxConns)},
	{"docs/production.md", "`HERALD_API_DB_CONNS` \\((\\d+)\\) more", fmt.Sprint(config.DefaultAPIDBConns)},
	{"docs/production.md", "`HERALD_API_TOKEN_CONCURRENCY` \\((\\d+)\\) requests", fmt.Sprint(config.DefaultAPITokenConcurrency)},
	{"docs/production.md", `Revocation takes\s+up to (\d+) s`, seconds(heraldapi.DefaultTokenCacheTTL)},
	{"docs/production.md", `caches token lookups for (\d+) s`, seconds(heraldapi.DefaultTokenCacheTTL)},
	{"docs/production.md", `when its partition leases\s+expire, (\d+) s after`, seconds(store.PartitionLeaseTTL)},
	{"docs/production.md", "`HERALD_RETENTION` \\((\\d+) days by default\\)", fmt.Sprint(int(workflows.DefaultRetention.Hours() / 24))},
	// Subscriber app limits.
	{"docs/subscriber-limits.md", `a number from 1/86400 \(one a day\) to (\d+);`, fmt.Sprint(manifest.MaxPerSecondLimit)},
	{"docs/subscriber-limits.md", `an integer from 1 to (\d+) \|`, fmt.Sprint(manifest.MaxInFlightLimit)},
	{"docs/subscriber-limits.md", `For the head of a\s+batch it waits at most (\d+) s`, seconds(activities.LimitHeadWait)},
	{"docs/subscriber-limits.md", `the batch time \((\d+) s by default`, seconds(activities.DefaultBatchTime)},
	{"docs/subscriber-limits.md", `their batch without asking \(at most the batch time, (\d+) s`, seconds(activities.DefaultBatchTime)},
	// The Delivery workflow's and retention's defaults, as design.md has them.
	{"docs/design.md", "`HERALD_IDLE_TIMEOUT` \\((\\w+)\\) with nothing", short(workflows.DefaultIdleTimeout)},
	{"docs/design.md", "`HERALD_RETENTION_EVERY` \\((\\w+)\\)", short(config.DefaultRetentionEvery)},
	{"docs/design.md", "`HERALD_HOLD_EXPIRY` \\((\\w+)\\) is cancelled", short(workflows.DefaultHoldExpiry)},
	{"docs/design.md", "\\| (\\d+) to \\d+ attempts per event", "1"},
	{"docs/design.md", "\\| 1 to (\\d+) attempts per event", fmt.Sprint(manifest.MaxAttemptsLimit)},
	{"docs/design.md", "the schedule's \\(`HERALD_RETRY_SCHEDULE`, (\\d+)\\)", fmt.Sprint(len(workflows.DefaultRetrySchedule) + 1)},
	// The operations API's listings and replays.
	{"docs/operations-api.md", `the page size: (\d+) by default`, fmt.Sprint(store.DefaultDeliveryLimit)},
	{"docs/operations-api.md", `\*\*clamped\*\* to ([\d,]+)`, thousands(store.MaxDeliveryLimit)},
	{"docs/operations-api.md", `on all pages, up to ([\d,]+)`, thousands(store.DeliveryTotalCap)},
	{"docs/design.md", `Its ` + "`total`" + ` is exact up to ([\d,]+) rows`, thousands(store.DeliveryTotalCap)},
	{"docs/operations-api.md", `for a window of over ([\d,]+) events`, thousands(heraldapi.MaxReplayEvents)},
	{"docs/design.md", `a replay window, with a dry run; at most ([\d,]+) events`, thousands(heraldapi.MaxReplayEvents)},
}

// schedule writes a retry schedule as the docs do: 1s, 5s, 30s.
func schedule(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = short(d)
	}
	return strings.Join(parts, ", ")
}

// short writes d as the docs do: 1h, 30m, 5s.
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
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
