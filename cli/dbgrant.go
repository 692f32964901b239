package cli

import "fmt"

// runDB runs the database role commands: `db grant-publisher APP ROLE`.
func runDB(inv *invocation, args []string) error {
	sub, rest := splitSubcommand(args)
	switch sub {
	case "grant-publisher":
		return runDBGrantPublisher(inv, rest)
	case "":
		if len(rest) > 0 && isHelpFlag(rest[0]) {
			c, _ := lookupCommand("db")
			printCommandUsage(inv.stdout, c)
			return nil
		}
		return usagef("db", "db: missing subcommand (grant-publisher)")
	default:
		return usagef("db", "db: unknown subcommand %q (want grant-publisher)", sub)
	}
}

// runDBGrantPublisher makes ROLE the publisher role of APP
// (docs/publishing.md#a-publisher-role-per-app), as the owner role.
func runDBGrantPublisher(inv *invocation, args []string) error {
	fs := inv.newFlags("db grant-publisher")
	actorFlag := fs.String("actor", "", "who grants, for the audit trail (default: $USER)")
	rest, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("db grant-publisher", rest, "APP", "ROLE"); err != nil {
		return err
	}
	app, role := rest[0], rest[1]
	st, err := inv.openOwnerStore()
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.GrantPublisher(inv.ctx, app, role, inv.actor(*actorFlag)); err != nil {
		return err
	}
	if inv.json {
		return writeJSON(inv.stdout, struct {
			App  string `json:"app"`
			Role string `json:"role"`
		}{app, role})
	}
	fmt.Fprintf(inv.stdout, "role %s publishes for app %s only (PublishTx), with no right on Herald's tables\n", role, app)
	return nil
}
