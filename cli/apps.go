package cli

import (
	"errors"
	"fmt"
	"io"
	"strconv"

	"herald/store"
)

// runApps dispatches the apps subcommands.
func runApps(inv *invocation, args []string) error {
	sub, rest := splitSubcommand(args)
	switch sub {
	case "apply":
		return runAppsApply(inv, rest)
	case "diff":
		return runAppsDiff(inv, rest)
	case "list":
		return runAppsList(inv, rest)
	case "show":
		return runAppsShow(inv, rest)
	case "remove":
		return runAppsRemove(inv, rest)
	case "token":
		return runAppsToken(inv, rest)
	case "secret":
		return runAppsSecret(inv, rest)
	case "":
		if len(rest) > 0 && isHelpFlag(rest[0]) {
			c, _ := lookupCommand("apps")
			printCommandUsage(inv.stdout, c)
			return nil
		}
		return usagef("apps", "apps: missing subcommand (apply, diff, list, show, remove, token or secret)")
	default:
		return usagef("apps", "apps: unknown subcommand %q (want apply, diff, list, show, remove, token or secret)", sub)
	}
}

func isHelpFlag(s string) bool {
	return s == "-h" || s == "--help" || s == "-help"
}

// runAppsList lists every app, removed ones included.
func runAppsList(inv *invocation, args []string) error {
	fs := inv.newFlags("apps list")
	rest, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("apps list", rest); err != nil {
		return err
	}
	st, err := inv.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	apps, err := st.ListApps(inv.ctx)
	if err != nil {
		return err
	}
	if inv.json {
		return writeJSON(inv.stdout, nonNil(apps))
	}
	if len(apps) == 0 {
		fmt.Fprintln(inv.stdout, "no apps applied yet (starter apps apply PATH...)")
		return nil
	}
	t := newTable(inv.stdout, "APP", "STATUS", "ENDPOINT", "DELIVERY PATH", "APPLIED")
	for _, a := range apps {
		status := "active"
		if a.RemovedAt != nil {
			status = "removed " + formatTime(*a.RemovedAt)
		}
		t.row(a.ID, status, a.Endpoint, a.DeliveryPath, formatTime(a.AppliedAt))
	}
	return t.flush()
}

// runAppsShow shows one app with its declarations and subscriptions.
func runAppsShow(inv *invocation, args []string) error {
	fs := inv.newFlags("apps show")
	rest, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("apps show", rest, "APP"); err != nil {
		return err
	}
	st, err := inv.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	app, err := st.GetApp(inv.ctx, rest[0])
	if errors.Is(err, store.ErrNotFound) {
		return invalidf("app %s not found", rest[0])
	}
	if err != nil {
		return err
	}
	if inv.json {
		app.Declarations = nonNil(app.Declarations)
		app.Subscriptions = nonNil(app.Subscriptions)
		return writeJSON(inv.stdout, app)
	}
	return printApp(inv.stdout, app)
}

func printApp(w io.Writer, app store.AppDetail) error {
	t := newTable(w, "App:", app.ID)
	t.row("Endpoint:", app.Endpoint)
	t.row("Delivery path:", app.DeliveryPath)
	t.row("Limits:", store.Limits{MaxPerSecond: app.MaxPerSecond, MaxInFlight: app.MaxInFlight}.String())
	t.row("Applied:", formatTime(app.AppliedAt))
	if app.RemovedAt != nil {
		t.row("Removed:", formatTime(*app.RemovedAt))
	}
	t.row("Content hash:", app.ContentHash)
	if err := t.flush(); err != nil {
		return err
	}

	fmt.Fprintln(w, "\nDeclarations:")
	if len(app.Declarations) == 0 {
		fmt.Fprintln(w, "  none")
	} else {
		t = newTable(w, "  EVENT", "SUBJECT", "TITLE", "STATUS", "UPDATED")
		for _, d := range app.Declarations {
			status := "declared"
			switch {
			case d.RetiredAt != nil:
				status = "retired " + formatTime(*d.RetiredAt)
			case len(d.Place) > 0 && string(d.Place) != "null":
				status = "declared (resource-scoped)"
			case d.Deprecated:
				status = "deprecated"
			}
			t.row("  "+d.Type+"@"+strconv.Itoa(d.Version), d.Subject, dash(d.Title), status, formatTime(d.UpdatedAt))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}

	fmt.Fprintln(w, "\nSubscriptions:")
	if len(app.Subscriptions) == 0 {
		fmt.Fprintln(w, "  none")
		return nil
	}
	t = newTable(w, "  ID", "STATE", "REASON", "UPDATED")
	for _, s := range app.Subscriptions {
		t.row("  "+s.ID, s.State, dash(s.Reason), formatTime(s.UpdatedAt))
	}
	return t.flush()
}

// runAppsRemove retires an app's declarations and cancels its subscriptions.
func runAppsRemove(inv *invocation, args []string) error {
	fs := inv.newFlags("apps remove")
	actor := fs.String("actor", "", "name recorded in the audit trail (default: the OS user)")
	rest, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("apps remove", rest, "APP"); err != nil {
		return err
	}
	st, err := inv.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	res, err := st.RemoveApp(inv.ctx, rest[0], inv.actor(*actor))
	if errors.Is(err, store.ErrNotFound) {
		return invalidf("app %s not found", rest[0])
	}
	if err != nil {
		return err
	}
	if res.Unchanged {
		// An operator command that had nothing to do exits 2
		// (docs/design.md#command-line).
		return invalidf("app %s is already removed: nothing changed (starter apps apply brings it back)", res.App)
	}
	if inv.json {
		res.StateChanges = nonNil(res.StateChanges)
		return writeJSON(inv.stdout, res)
	}
	fmt.Fprintf(inv.stdout, "%s: removed\n", res.App)
	printChanges(inv.stdout, res)
	return nil
}
