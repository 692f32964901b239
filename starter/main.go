// Command starter is Herald's operator and publisher command line (docs/design.md#command-line):
// migrations, manifests, publishing, catalog, subscriptions, audit and
// status. Run `starter help` for the commands; the logic lives in herald/cli.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"herald/cli"
	"herald/internal/tracing"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// With OTEL_EXPORTER_OTLP_ENDPOINT set, `starter publish` starts each
	// event's trace (and commands that call Temporal carry it there).
	shutdownTracing, err := tracing.Setup(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "starter:", err)
		os.Exit(cli.ExitInvalid) // an OTEL_* setting it cannot use
	}
	code := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	fctx, cancel := context.WithTimeout(context.Background(), tracing.FlushTimeout)
	if err := shutdownTracing(fctx); err != nil {
		fmt.Fprintln(os.Stderr, "starter: flush traces:", err)
	}
	cancel()
	os.Exit(code)
}
