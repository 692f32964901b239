// Package chaos holds Herald's fault-injection suite. It runs a private
// PostgreSQL cluster, a private Temporal dev server and the worker binary as
// child processes, streams events to a recording subscriber in the test
// process, and breaks things while they flow: it kills and restarts workers,
// restarts the database and the Temporal server, runs two workers and stops
// one, makes the subscriber fail, time out, reset connections, refuse them
// and answer slowly, and, through Temporal's API, terminates and resets key
// workflows and sends them forged event signals. Afterwards it checks
// Herald's guarantees: every accepted event delivered to every active
// subscription, per-key order, and duplicates only where a fault made them
// possible.
//
// The full suite is behind the build tag "chaos" (make chaos); a short
// version without the tag runs in make test. docs/reliability.md describes
// the guarantees and how each is checked.
package chaos
