// Command starter is Herald's operator and publisher command line (docs/design.md#command-line):
// migrations, manifests, publishing, catalog, subscriptions, audit and
// status. Run `starter help` for the commands; the logic lives in herald/cli.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"herald/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
