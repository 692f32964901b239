// Package cli is the `starter` command line (docs/design.md#command-line): the operator and
// publisher tool that migrates the database, applies manifests, publishes
// events and shows catalog, subscriptions, audit trail and status, and that
// lists, inspects and recovers delivery workflows in Temporal. The starter
// binary only wires Run to the process; everything else lives here.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Exit codes (docs/design.md#command-line).
const (
	// ExitOK: the command did what was asked.
	ExitOK = 0
	// ExitError: Herald or its surroundings failed (database unreachable,
	// schema missing, an I/O error).
	ExitError = 1
	// ExitInvalid: the request was rejected or invalid (bad flags, unknown
	// command, invalid manifest, rejected event, unknown id, a state change
	// that is not allowed).
	ExitInvalid = 2
)

// command is one top-level command of starter.
type command struct {
	name string
	// group heads the section of the help the command is listed in.
	group string
	// synopsis lists the command's forms, without the leading "starter ".
	synopsis []string
	summary  string
	// run carries out the command with the arguments after its name. It is
	// nil for commands that are documented but not part of this build.
	run func(inv *invocation, args []string) error
}

// Help sections, in the order they are printed.
const (
	groupSetup      = "Set up"
	groupPublish    = "Publish"
	groupInspect    = "Inspect"
	groupDeliveries = "Deliveries (Temporal)"
)

var helpGroups = []string{groupSetup, groupPublish, groupInspect, groupDeliveries}

// commands is starter's command table, in help order. A command is added by
// giving it an entry in init with its run function. (It is filled in init
// because the run functions look commands up themselves, for their usage.)
var commands []command

func init() {
	commands = []command{
		{name: "migrate", group: groupSetup, synopsis: []string{"migrate [--runtime-role ROLE]"},
			summary: "create or upgrade Herald's database schema", run: runMigrate},
		{name: "apps", group: groupSetup,
			synopsis: []string{"apps apply PATH... [--actor A] [--allow-breaking --reason R]", "apps diff PATH...", "apps list", "apps show APP", "apps remove APP [--actor A]",
				"apps token create APP [--name N] [--actor A]", "apps token list [APP]", "apps token revoke APP NAME|ID [--actor A]",
				"apps secret show APP [--actor A]", "apps secret rotate APP [--overlap 24h] [--reason R] [--actor A]"},
			summary: "apply manifests (files or directories), diff, list, show and remove apps; " +
				"create, list and revoke their tokens for the publishing API; show and rotate their Standard Webhooks secrets", run: runApps},
		{name: "tokens", group: groupSetup,
			synopsis: []string{"tokens create --operator --name N [--actor A]", "tokens list", "tokens revoke --operator NAME|ID [--actor A]"},
			summary:  "create, list and revoke operator tokens of the operations API (they see and act on every app)", run: runTokens},
		{name: "db", group: groupSetup, synopsis: []string{"db grant-publisher APP ROLE [--actor A]", "db key-stripes [--fine-only [--actor A]]"},
			summary: "make ROLE the publisher role of APP: it may publish for APP with PublishTx and has no right on Herald's tables; " +
				"show how publishers lock ordering keys, and retire the coarse locks of releases before migration 0032", run: runDB},
		{name: "keys", group: groupSetup, synopsis: []string{"keys generate --out DIR",
			"keys export --standard-webhooks --keys PATH"},
			summary: "generate an Ed25519 signing key for the worker (HERALD_SIGNING_KEY=DIR); export the public keys", run: runKeys},

		{name: "publish", group: groupPublish,
			synopsis: []string{
				"publish --app A --type T --version V --subject K (--data JSON | --data @FILE) [--id UUID]",
				"publish --file EVENTS.ndjson",
			},
			summary: "validate and record one event, or one per line of an NDJSON file ('-' reads stdin)", run: runPublish},

		{name: "catalog", group: groupInspect, synopsis: []string{"catalog"},
			summary: "declared event types with their publishers, subscribers, first-seen times, descriptions and data schemas", run: runCatalog},
		{name: "subscriptions", group: groupInspect,
			synopsis: []string{"subscriptions [--app A]", "subscriptions pause|resume ID [--reason R] [--actor A]"},
			summary:  "list subscriptions; pause or resume one", run: runSubscriptions},
		{name: "audit", group: groupInspect, synopsis: []string{"audit [--target ID] [--action A] [--limit N]"},
			summary: "the audit trail, newest first, each action with its label (--target PREFIX* matches a prefix)", run: runAudit},
		{name: "events", group: groupInspect, synopsis: []string{"events show ID [--app A]", "events retry-relay ID [--app A] [--reason R] [--actor A]"},
			summary: "one event of the log (envelope, publisher, times, relay back-off) and its outcome for each subscription; " +
				"give an event the relay gave up on (relay_failed) back to it", run: runEvents},
		{name: "status", group: groupInspect, synopsis: []string{"status"},
			summary: "relay lag, the last rejected events and the total per app, delivery keys per status and the worker's readiness", run: runStatus},

		{name: "deliveries", group: groupDeliveries,
			synopsis: []string{"deliveries [--status S] [--subscription ID] [--app A] [--type T] [--limit N] [--page-token TOKEN]",
				"deliveries --log [--status S] [--subscription ID] [--app A] [--type T] [--subject K] [--since TIME] [--until TIME] [--limit N] [--page-token TOKEN]"},
			summary: "list running delivery workflows (one per subscription and subject key) with status, queue and head; " +
				"with --log, deliveries from the event log (also of completed keys) with a total", run: runDeliveries},
		{name: "inspect", group: groupDeliveries, synopsis: []string{"inspect WORKFLOW-ID | --subscription ID --subject K"},
			summary: "show one delivery workflow's state: head, last error, queue, counters, outcomes", run: runInspect},
		{name: "redeliver", group: groupDeliveries,
			synopsis: []string{
				"redeliver --subscription ID --subject K [--event ID] [--reason R] [--actor A]",
				"redeliver --subscription ID --all-failed [--reason R] [--actor A]",
				"redeliver --event ID [--app A] [--reason R] [--actor A]",
				"redeliver --subscription ID --since TIME [--until TIME] [--subject K] [--dry-run] [--reason R] [--actor A]",
			},
			summary: "retry a failed delivery with fresh attempts, deliver an event of the log again (--event; alone: to every " +
				"subscription of its type), or replay every event received in a window (TIME: RFC 3339 or a duration back from now, e.g. 2h); " +
				"a paused or blocked subscription is refused", run: runRedeliver},
		{name: "cancel", group: groupDeliveries,
			synopsis: []string{
				"cancel --subscription ID --subject K [--event ID | --all] [--reason R] [--actor A]",
				"cancel --subscription ID --all-failed [--reason R] [--actor A]",
			},
			summary: "cancel a failed or queued delivery, or everything queued for a key", run: runCancel},
		{name: "pause", group: groupDeliveries, synopsis: []string{"pause --subscription ID --subject K [--reason R] [--actor A]"},
			summary: "hold one subject key's deliveries", run: runPause},
		{name: "resume", group: groupDeliveries, synopsis: []string{"resume --subscription ID --subject K [--reason R] [--actor A]"},
			summary: "release a held subject key", run: runResume},
	}
}

// lookupCommand returns the command called name.
func lookupCommand(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// invocation is one run of starter: its context, streams and environment,
// and the output mode.
type invocation struct {
	ctx    context.Context
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	// json selects machine output: set by --json before the command name or
	// by the command's own --json flag.
	json bool
	// parseOnly stops the command at its first action (see act): the
	// command line is parsed and checked, nothing is read or done.
	parseOnly bool
}

// errParsedOnly ends a command run with parseOnly set where it would have
// started to act: its command line was accepted.
var errParsedOnly = errors.New("parse only: the command line is accepted; nothing was done")

// act is called by a command before its first action: connecting to the
// database or Temporal, reading the secret key, reading or writing a file.
// With parseOnly set it ends the command there (errParsedOnly), so a test
// can run every documented command line through the parser alone.
func (inv *invocation) act() error {
	if inv.parseOnly {
		return errParsedOnly
	}
	return nil
}

// Run runs starter with args (without the program name) and returns the exit
// code. Output goes to stdout, messages and errors to stderr; getenv reads
// the environment (HERALD_DATABASE_URL, HERALD_ALLOW_NETWORKS,
// TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, HERALD_WORKER_URL, USER).
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	inv := &invocation{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv}
	return inv.finish(inv.run(args))
}

// run parses the global flags and the command name in args and runs the
// command.
func (inv *invocation) run(args []string) error {
	// Global flags before the command name.
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "-h", "-help", "--help":
			printHelp(inv.stdout)
			return nil
		case "-json", "--json":
			inv.json = true
			args = args[1:]
		default:
			return usagef("", "unknown flag %s before the command name", args[0])
		}
	}
	if len(args) == 0 {
		printHelp(inv.stderr)
		return &reportedError{code: ExitInvalid}
	}
	name, rest := args[0], args[1:]
	if name == "help" {
		return runHelp(inv, rest)
	}
	cmd, ok := lookupCommand(name)
	if !ok {
		return usagef("", "unknown command %q", name)
	}
	if cmd.run == nil {
		return usagef(name, "%s is not available in this version of starter yet", name)
	}
	return cmd.run(inv, rest)
}

// runHelp prints the overview, or the usage of the named command.
func runHelp(inv *invocation, args []string) error {
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		args = args[1:] // help has no flags of its own; --json and the like change nothing
	}
	if len(args) == 0 {
		printHelp(inv.stdout)
		return nil
	}
	cmd, ok := lookupCommand(args[0])
	if !ok {
		return usagef("", "unknown command %q", args[0])
	}
	printCommandUsage(inv.stdout, cmd)
	return nil
}

// printHelp lists every command by section.
func printHelp(w io.Writer) {
	fmt.Fprintln(w, "starter: Herald's operator and publisher command line")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage:")
	for _, g := range helpGroups {
		fmt.Fprintf(w, "\n  %s:\n", g)
		for _, c := range commands {
			if c.group != g {
				continue
			}
			for _, s := range c.synopsis {
				fmt.Fprintf(w, "    starter %s\n", s)
			}
			summary := c.summary
			if c.run == nil {
				summary += " (not available in this build yet)"
			}
			fmt.Fprintf(w, "        %s\n", summary)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Every command takes --json for machine-readable output; flags may come before or after arguments.")
	fmt.Fprintln(w, "Exit status: 0 success, 2 rejected or invalid request, 1 any other error.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Environment:")
	fmt.Fprintln(w, "  HERALD_DATABASE_URL     PostgreSQL URL (required by every command but keys and help)")
	fmt.Fprintln(w, "  HERALD_ALLOW_NETWORKS   CIDRs deliveries may reach despite the SSRF guard (apps apply warns otherwise)")
	fmt.Fprintln(w, "  TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE   the Temporal frontend (default 127.0.0.1:7233, namespace default)")
	fmt.Fprintln(w, "  HERALD_WORKER_URL       the worker's HTTP address, for status (default http://127.0.0.1:8088)")
}

// printCommandUsage prints one command's forms and summary.
func printCommandUsage(w io.Writer, c command) {
	fmt.Fprintln(w, "Usage:")
	for _, s := range c.synopsis {
		fmt.Fprintf(w, "  starter %s\n", s)
	}
	fmt.Fprintf(w, "\n%s.\n", upperFirst(c.summary))
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
