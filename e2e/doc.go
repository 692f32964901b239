// Package e2e holds Herald's end-to-end tests: a real PostgreSQL, a real
// Temporal dev server, the worker service in-process, and a subscriber built
// on the subscriber package, all on loopback.
package e2e
